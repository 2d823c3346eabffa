"""User-supplied GPU profiles, model YAMLs and config.json files read strictly (a review of 2026-12-02: ~860
variants). Each case below was read with a silently wrong or guessed value, exit 0."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_helpers import run_cli

ROOT = Path(__file__).resolve().parents[2]
A100_YAML = ROOT / "hardware_profiles" / "a100-sxm4-80gb.yaml"
BASE = ["--gpus", "16", "--global-batch", "64", "--seq-len", "4096", "--json"]


def _estimate(monkeypatch, capsys, model, gpu):
    code, out, err = run_cli(monkeypatch, capsys, "estimate", "--model", str(model), "--gpu", str(gpu), *BASE)
    return code, (json.loads(out) if code == 0 else None), err


def test_an_edited_copy_of_a_catalog_gpu_keeps_its_edit(monkeypatch, capsys, tmp_path):
    """The calibration's value for the catalog GPU of that name replaced the file's edited one, silently."""
    text = A100_YAML.read_text()
    assert "attention_efficiency_max: 0.61" in text
    edited = tmp_path / "a100_edit.yaml"
    edited.write_text(text.replace("attention_efficiency_max: 0.61", "attention_efficiency_max: 0.30"))
    copy = tmp_path / "a100_copy.yaml"
    copy.write_text(text)
    _, base, _ = _estimate(monkeypatch, capsys, "llama3-8b", "a100-sxm4-80gb")
    _, same, err_same = _estimate(monkeypatch, capsys, "llama3-8b", copy)
    code, ed, err = _estimate(monkeypatch, capsys, "llama3-8b", edited)
    assert same["iteration_time_s"] == base["iteration_time_s"] and "is used, not the calibration" not in err_same
    assert code == 0 and ed["iteration_time_s"] > 1.05 * base["iteration_time_s"]
    assert "attention_efficiency_max = 0.3 (the catalog's is 0.61) is used, not the calibration's" in err


@pytest.mark.parametrize("old,new,words", [
    ("n_layers: 32", "n_layers: 040", ("'040' is a YAML 1.1 number form",)),   # octal: read as 32
    ("n_layers: 32", "n_layers: 1:20", ("'1:20' is a YAML 1.1 number form",)),  # base 60: read as 80
])
def test_yaml_1_1_number_forms_are_refused(monkeypatch, capsys, tmp_path, old, new, words):
    model = tmp_path / "m.yaml"
    model.write_text("n_layers: 32\nhidden_size: 4096\nffn_hidden_size: 14336\nn_heads: 32\nn_kv_heads: 8\n"
                     "vocab_size: 128256\nmlp: swiglu\n".replace(old, new))
    code, _, err = _estimate(monkeypatch, capsys, model, "h100-sxm5-80gb")
    assert code == 2 and len(err.strip().splitlines()) == 1 and all(w in err for w in words), err


def test_a_model_yaml_without_its_mlp_and_a_gpu_with_text_counts_are_refused(monkeypatch, capsys, tmp_path):
    model = tmp_path / "m.yaml"
    model.write_text("n_layers: 32\nhidden_size: 4096\nffn_hidden_size: 14336\nn_heads: 32\nn_kv_heads: 8\n"
                     "vocab_size: 128256\n")
    code, _, err = _estimate(monkeypatch, capsys, model, "h100-sxm5-80gb")
    assert code == 2 and "model.mlp: required in a model YAML" in err  # was costed as a 2-matrix GELU MLP
    gpu = tmp_path / "g.yaml"
    gpu.write_text(A100_YAML.read_text().replace("n_sms: 108", "n_sms: '108'"))
    assert "n_sms: '108'" in gpu.read_text()
    code, _, err = _estimate(monkeypatch, capsys, "llama3-8b", gpu)
    assert code == 2 and "n_sms" in err and "not text" in err
    blank = tmp_path / "blank.yaml"
    blank.write_text(A100_YAML.read_text().replace("name: a100-sxm4-80gb", "name: '  '"))
    code, _, err = _estimate(monkeypatch, capsys, "llama3-8b", blank)
    assert code == 2 and "name" in err, err


LLAMA = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
         "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256, "hidden_act": "silu"}


@pytest.mark.parametrize("cfg,words", [
    ({**LLAMA, "model_type": "mixtral"}, ("model.model_type: 'mixtral' is a mixture-of-experts model",)),
    ({**LLAMA, "model_type": "deepseek_v2"}, ("mixture-of-experts",)),
    ({**LLAMA, "is_encoder_decoder": "true"}, ("model.is_encoder_decoder: must be a JSON boolean",)),
    ({**LLAMA, "ffn_config": {"moe_num_experts": "16"}}, ("model.ffn_config.moe_num_experts: must be a JSON integer",)),
    ({k: v for k, v in {**LLAMA, "hidden_act": "gelu"}.items() if k not in ("model_type", "intermediate_size")},
     ("model.ffn_hidden_size: config.json gives no MLP width",)),
])
def test_hf_configs_that_were_guessed_are_refused(monkeypatch, capsys, tmp_path, cfg, words):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    code, _, err = _estimate(monkeypatch, capsys, path, "h100-sxm5-80gb")
    assert code == 2 and len(err.strip().splitlines()) == 1 and all(w in err for w in words), err


def test_hf_config_defaults_of_falcon_and_gpt_neox_are_transformers_own(tmp_path):
    """FalconConfig's ffn_hidden_size was not read (4h costed); GPT-NeoX, GPT-J and Phi untie the output layer
    when tie_word_embeddings is absent (their configs default to False), where it was taken as tied."""
    from perfmodel.catalog import load_model

    falcon = tmp_path / "falcon" / "config.json"
    falcon.parent.mkdir()
    falcon.write_text(json.dumps({"model_type": "falcon", "hidden_size": 8192, "num_hidden_layers": 60,
                                  "num_attention_heads": 128, "num_kv_heads": 8, "new_decoder_architecture": True,
                                  "vocab_size": 65024, "ffn_hidden_size": 16384}))
    assert load_model(falcon).ffn_hidden_size == 16384
    for model_type in ("gpt_neox", "gptj", "phi"):
        cfg = tmp_path / model_type / "config.json"
        cfg.parent.mkdir()
        cfg.write_text(json.dumps({"model_type": model_type, "hidden_size": 2560, "num_hidden_layers": 32,
                                   "num_attention_heads": 32, "vocab_size": 50304, "intermediate_size": 10240,
                                   "hidden_act": "gelu"}))
        assert load_model(cfg).tied_embeddings is False


def test_small_readings_of_definition_files(monkeypatch, capsys, tmp_path):
    """A peak table spelled BF16 said only that bf16 was missing; an upper-case CONFIG.JSON was read as a model
    YAML; one GPU file under two spellings in --vary gpu= made two identical points."""
    import perfmodel as pm
    from pydantic import ValidationError

    d = pm.load_gpu("h100-sxm5-80gb").model_dump()
    d["peak_dense_tflop_per_s"] = {("BF16" if k == "bf16" else k): v for k, v in d["peak_dense_tflop_per_s"].items()}
    with pytest.raises(ValidationError, match="'BF16' must be spelled 'bf16'"):
        pm.specs.AcceleratorSpec(**d)
    upper = tmp_path / "m" / "CONFIG.JSON"
    upper.parent.mkdir()
    upper.write_text(json.dumps(LLAMA))
    assert pm.load_model(upper).ffn_hidden_size == 14336
    gpu = tmp_path / "g.yaml"
    gpu.write_text((ROOT / "hardware_profiles" / "h100-sxm5-80gb.yaml").read_text())
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli(monkeypatch, capsys, "whatif", "--model", "llama3-8b", "--gpu", "h100-sxm5-80gb",
                           "--gpus", "16", "--global-batch", "64", "--vary", "gpu=g.yaml,./g.yaml")
    assert code == 2 and "vary.gpu: lists g.yaml / ./g.yaml more than once" in err


def test_peak_table_slips_and_yaml_problems_are_named(tmp_path):
    """A bf16 peak typed in PFLOP/s (0.99 beside fp32's 66.9) was read; fp8 as e4m3 was kept unused without a
    word; mlp_bias got no note (attention_bias did); a broken YAML said only 'not valid YAML'."""
    import perfmodel as pm
    from perfmodel.errors import InputError
    from perfmodel.structured_text import load_yaml
    from pydantic import ValidationError

    d = pm.load_gpu("h100-sxm5-80gb").model_dump()
    slip = {**d["peak_dense_tflop_per_s"], "bf16": 0.9894, "fp16": 0.9894}
    with pytest.raises(ValidationError, match="must be at least fp32's"):
        pm.specs.AcceleratorSpec(**{**d, "peak_dense_tflop_per_s": slip})
    e4m3 = {**{k: v for k, v in d["peak_dense_tflop_per_s"].items() if k != "fp8"}, "e4m3": 1979.0}
    with pytest.raises(ValidationError, match="'e4m3' must be spelled 'fp8'"):
        pm.specs.AcceleratorSpec(**{**d, "peak_dense_tflop_per_s": e4m3})
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({**LLAMA, "mlp_bias": True}))
    assert any("mlp_bias" in n for n in pm.load_model(cfg).notes)
    with pytest.raises(InputError, match=r"not valid YAML \(mapping values are not allowed here\)"):
        load_yaml("a: b: c\n", "model", "m.yaml")


def test_an_hbm_bandwidth_in_tb_per_s_is_refused(monkeypatch, capsys, tmp_path):
    """2.039 (A100 80 GB's TB/s, written in the GB/s field) was read: every element-wise pass cost 1,000x."""
    text = A100_YAML.read_text()
    line = next(x for x in text.splitlines() if x.startswith("hbm_bandwidth_gb_per_s:"))
    gpu = tmp_path / "g.yaml"
    gpu.write_text(text.replace(line, "hbm_bandwidth_gb_per_s: 2.039"))
    code, _, err = _estimate(monkeypatch, capsys, "llama3-8b", gpu)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "hbm_bandwidth_gb_per_s (2.039) must be at least 0.1 GB/s per 16-bit TFLOP/s" in err
    gpu.write_text(text.replace(line, "hbm_bandwidth_gb_per_s: 400"))  # a slow but real memory: read
    code, out, _ = _estimate(monkeypatch, capsys, "llama3-8b", gpu)
    assert code == 0 and out["iteration_time_s"] > 0
