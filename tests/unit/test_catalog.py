"""The catalog: every CONTRACT name resolves; user files (model YAML, HF config.json) load;
unknown or malformed input raises InputError naming the field."""
from __future__ import annotations

import json

import pytest

import perfmodel
from perfmodel import InputError

CONTRACT_MODELS = [
    "gpt3-1.3b", "gpt3-13b", "gpt3-175b", "mt-nlg-530b", "gpt-1t", "bloom-176b",
    "llama2-7b", "llama2-13b", "llama2-70b", "llama3-8b", "llama3-70b", "llama3.1-405b",
]
CONTRACT_GPUS = [
    "v100-sxm2-16gb", "v100-sxm3-32gb", "a100-sxm4-40gb", "a100-sxm4-80gb", "a100-sxm4", "a800-sxm4-80gb",
    "h100-sxm5-80gb", "h100-sxm5-96gb", "h800-sxm5-80gb", "h200-sxm-141gb", "b200", "b300", "gb200", "gb300",
]

# HF meta-llama/Llama-2-7b-hf config.json (the fields that matter)
LLAMA2_7B_HF = {
    "architectures": ["LlamaForCausalLM"],
    "hidden_act": "silu",
    "hidden_size": 4096,
    "intermediate_size": 11008,
    "max_position_embeddings": 4096,
    "model_type": "llama",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 32,
    "rms_norm_eps": 1e-05,
    "tie_word_embeddings": False,
    "torch_dtype": "float16",
    "vocab_size": 32000,
}


@pytest.mark.parametrize("name", CONTRACT_MODELS)
def test_contract_models_load(name):
    m = perfmodel.load_model(name)
    assert m.hidden_size % m.n_heads == 0
    assert m.n_heads % m.n_kv_heads == 0
    assert m.n_params() > 1e9


@pytest.mark.parametrize("name", CONTRACT_GPUS)
def test_contract_gpus_load(name):
    g = perfmodel.load_gpu(name)
    assert g.peak_flop_per_s("bf16") > 1e13
    assert g.hbm_capacity_bytes > 1e10
    assert g.hbm_bandwidth_bytes_per_s > 1e11
    assert g.sources


def test_gpu_capacity_matches_its_name():
    for name in CONTRACT_GPUS:
        digits = [int(p.removesuffix("gb")) for p in name.split("-") if p.endswith("gb") and p[:-2].isdigit()]
        if digits:
            assert perfmodel.load_gpu(name).hbm_capacity_gib == pytest.approx(digits[0], rel=0.12), name


def test_hf_llama_config_json_loads_like_the_catalog(tmp_path):
    d = tmp_path / "Llama-2-7b-hf"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(LLAMA2_7B_HF))
    m = perfmodel.load_model(str(d / "config.json"))
    ref = perfmodel.load_model("llama2-7b")
    for key in ("n_layers", "hidden_size", "ffn_hidden_size", "n_heads", "n_kv_heads", "vocab_size", "mlp",
                "tied_embeddings"):
        assert getattr(m, key) == getattr(ref, key), key
    assert m.n_params() == 6_738_415_616  # HF's published count


def test_hf_gqa_config_json(tmp_path):
    cfg = dict(LLAMA2_7B_HF, hidden_size=8192, intermediate_size=28672, num_attention_heads=64,
               num_key_value_heads=8, num_hidden_layers=80, vocab_size=128256)
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    m = perfmodel.load_model(str(p))
    assert m.n_kv_heads == 8 and m.mlp == "swiglu"
    assert m.n_params() == pytest.approx(perfmodel.load_model("llama3-70b").n_params(), rel=1e-12)


def test_model_yaml_loads(tmp_path):
    p = tmp_path / "tiny.yaml"
    p.write_text(
        "n_layers: 4\nhidden_size: 256\nffn_hidden_size: 1024\nn_heads: 4\nn_kv_heads: 4\n"
        "vocab_size: 1000\nmlp: gelu\ntied_embeddings: true\n"
    )
    m = perfmodel.load_model(str(p))
    assert m.name == "tiny"
    assert (m.n_layers, m.hidden_size, m.n_heads) == (4, 256, 4)
    h, l, V = 256, 4, 1000
    # 12 l h^2 + 13 l h + V h + final LayerNorm
    assert m.n_params() == pytest.approx(12 * l * h * h + 13 * l * h + V * h + 2 * h, rel=1e-12)


def test_unknown_model_names_field():
    with pytest.raises(InputError) as exc:
        perfmodel.load_model("gpt-5-ultra")
    assert exc.value.field == "model"
    assert "gpt-5-ultra" in str(exc.value)


def test_unknown_gpu_names_field():
    with pytest.raises(InputError) as exc:
        perfmodel.load_gpu("tpu-v9")
    assert exc.value.field == "gpu"
    assert "tpu-v9" in str(exc.value)


def test_missing_model_file_names_field(tmp_path):
    with pytest.raises(InputError) as exc:
        perfmodel.load_model(str(tmp_path / "nope.yaml"))
    assert exc.value.field == "model"


def test_malformed_model_yaml(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("n_layers: [1, 2\n")
    with pytest.raises(InputError) as exc:
        perfmodel.load_model(str(p))
    assert exc.value.field == "model"


def test_model_yaml_missing_field_names_it(tmp_path):
    p = tmp_path / "partial.yaml"
    p.write_text("n_layers: 4\nhidden_size: 256\n")
    with pytest.raises(InputError) as exc:
        perfmodel.load_model(str(p))
    assert exc.value.field.startswith("model")
    assert "ffn_hidden_size" in str(exc.value) or "n_heads" in str(exc.value)


def test_model_yaml_extra_key_is_rejected(tmp_path):
    p = tmp_path / "extra.yaml"
    p.write_text(
        "n_layers: 4\nhidden_size: 256\nffn_hidden_size: 1024\nn_heads: 4\nn_kv_heads: 4\n"
        "vocab_size: 1000\nn_layerz: 5\n"
    )
    with pytest.raises(InputError) as exc:
        perfmodel.load_model(str(p))
    assert "n_layerz" in str(exc.value)


def test_malformed_config_json(tmp_path):
    p = tmp_path / "config.json"
    p.write_text('{"hidden_size": 4096,,}')
    with pytest.raises(InputError) as exc:
        perfmodel.load_model(str(p))
    assert exc.value.field == "model"


def test_config_json_without_shape(tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps({"model_type": "llama", "vocab_size": 32000}))
    with pytest.raises(InputError) as exc:
        perfmodel.load_model(str(p))
    assert "hidden_size" in str(exc.value)


def test_heads_not_dividing_hidden_is_rejected(tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps(dict(LLAMA2_7B_HF, hidden_size=4100)))
    with pytest.raises(InputError) as exc:
        perfmodel.load_model(str(p))
    assert "hidden_size" in str(exc.value)


def test_malformed_gpu_yaml(tmp_path):
    p = tmp_path / "gpu.yaml"
    p.write_text("peak_dense_tflop_per_s: {bf16: \n  - [\n")
    with pytest.raises(InputError) as exc:
        perfmodel.load_gpu(str(p))
    assert exc.value.field == "gpu"


# kernels.csv 'Maximum Achievable Matmul FLOPS' (stas00/ml-engineering): the GPUs measured directly
MAMF_ROWS = {"h100-sxm5-80gb": "NVIDIA H100 SXM", "h200-sxm-141gb": "NVIDIA H200 SXM", "b200": "NVIDIA B200 SXM",
             "b300": "NVIDIA B300 SXM", "gb200": "NVIDIA GB200 SXM"}


@pytest.mark.parametrize("gpu,row", sorted(MAMF_ROWS.items()))
def test_fp8_mamf_is_the_measured_one(gpu, row):
    """The profile's fp8 MAMF is the measured FP8 e4m3 best-shape rate over the profile's own fp8 peak."""
    from pathlib import Path

    import pandas as pd

    kernels = Path(__file__).resolve().parents[2] / "calibration" / "data" / "kernels.csv"
    k = pd.read_csv(kernels)
    hit = k[(k.gpu_type == row) & (k.source_ref == "FP8 e4m3 table")]
    assert len(hit) == 1
    spec = perfmodel.catalog.load_gpu(gpu)
    measured = float(hit.tflops.iloc[0]) / spec.peak_dense_tflop_per_s["fp8"]
    assert spec.fp8_matmul_efficiency_max == pytest.approx(measured, abs=0.001)
    # the fp8 GEMM rate never exceeds what was measured, nor the bf16 MAMF's share of its peak by much
    assert spec.fp8_matmul_efficiency_max <= spec.matmul_efficiency_max + 0.01


@pytest.mark.parametrize("name", CONTRACT_GPUS)
def test_tensor_core_formats_follow_the_architecture(name):
    """bf16 from Ampere, fp8 from Hopper (Ada aside), MX/NV block formats on Blackwell only: a job in
    another format is refused by estimate and the search instead of being costed at a stand-in rate."""
    gpu = perfmodel.load_gpu(name)
    arch = ("volta" if name.startswith("v100") else "ampere" if name.startswith(("a100", "a800"))
            else "hopper" if name.startswith(("h100", "h800", "h200")) else "blackwell")
    assert gpu.supports_precision("fp16")
    assert gpu.supports_precision("bf16") == (arch != "volta")
    assert gpu.supports_precision("fp8") == (arch in ("hopper", "blackwell"))
    for block_format in ("mxfp8", "nvfp4"):
        assert gpu.supports_precision(block_format) == (arch == "blackwell")
    model = perfmodel.load_model("llama3-8b")
    cluster = perfmodel.ClusterSpec.build(gpu, n_gpus=8)
    par = perfmodel.ParallelSpec(tp=1, pp=1, dp=8)
    for precision in ("bf16", "fp8", "nvfp4"):
        job = perfmodel.JobSpec(global_batch=8, seq_len=2048, precision=precision)
        if gpu.supports_precision(precision):
            assert perfmodel.estimate(model, cluster, par, job).iteration_time_s > 0
        else:
            with pytest.raises(InputError, match=rf"precision: {name} has no {precision} tensor cores"):
                perfmodel.estimate(model, cluster, par, job)


def test_a_missing_gpu_catalog_is_named_not_taken_for_an_unknown_gpu(monkeypatch, tmp_path):
    """An install whose catalog is gone (a damaged site-packages copy; a wheel carries it,
    tests/unit/test_shipped_install.py): the error says so, not 'unknown GPU ... (known: )'."""
    import perfmodel.catalog as catalog
    from perfmodel import InputError

    monkeypatch.setattr(catalog, "PROFILES_DIR", tmp_path / "hardware_profiles")
    with pytest.raises(InputError, match=r"GPU catalog .* is missing from this installation \(reinstall"):
        catalog.load_gpu("h100-sxm5-80gb")
