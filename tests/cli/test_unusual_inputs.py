"""What an audit of less-trodden inputs found: a node of a board and a half (12 H100s) was costed as one
12-GPU NVLink domain; a GPU profile's default NIC bandwidth above the cluster limit was blamed on
--gpus-per-node; a Hugging Face config.json under another file name took its folder's name; DBRX's
experts (nested in ffn_config) were reported as a missing MLP width. Each now gives one clear line or
the right name."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import perfmodel as pm
from perfmodel.cli import app

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]


def _one_error(res, field: str) -> str:
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert res.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error:"), res.output
    assert field in lines[0], res.output
    return lines[0]


@pytest.mark.parametrize("args", [
    ["comm", "--op", "all_reduce", "--bytes", "1073741824", "--gpus", "48", "--gpus-per-node", "12",
     "--gpu", "h100-sxm5-80gb"],
    ["estimate", "--model", "llama3-70b", "--gpu", "h100-sxm5-80gb", "--gpus", "48", "--gpus-per-node", "12",
     "--tp", "8", "--pp", "2", "--global-batch", "48"],
])
def test_a_node_of_a_board_and_a_half_is_refused(args):
    line = _one_error(runner.invoke(app, args), "gpus_per_node")
    assert "8-GPU NVLink board" in line and "(got 12)" in line


def test_nodes_of_whole_boards_and_nvl72_trays_still_build():
    h100, gb200 = pm.load_gpu("h100-sxm5-80gb"), pm.load_gpu("gb200")
    assert pm.ClusterSpec.build(h100, 32, 16).nvlink_domain_gpus == 8  # two boards per node
    assert pm.ClusterSpec.build(h100, 32, 4).nvlink_domain_gpus == 4  # half a board
    assert pm.ClusterSpec.build(gb200, 144, 48).nvlink_domain_gpus == 48  # any part of an NVL72 rack
    with pytest.raises(pm.InputError, match="gpus_per_node"):
        pm.ClusterSpec.build(h100, 48, 12)


def test_a_profile_nic_bandwidth_above_the_limit_names_the_profile_field(tmp_path):
    text = (ROOT / "hardware_profiles" / "h100-sxm5-80gb.yaml").read_text().splitlines()
    text = [("default_scale_out_gbit_per_s_per_node: 5000000" if ln.startswith("default_scale_out_gbit_per_s_per_node:")
             else ln) for ln in text]
    gpu = tmp_path / "gpu.yaml"
    gpu.write_text("\n".join(text) + "\n")
    _one_error(runner.invoke(app, ["estimate", "--model", "llama3-8b", "--gpu", str(gpu), "--gpus", "16",
                                   "--global-batch", "16"]), "default_scale_out_gbit_per_s_per_node")


MISTRAL = {"architectures": ["MistralForCausalLM"], "hidden_size": 4096, "intermediate_size": 14336,
           "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8, "vocab_size": 32000,
           "hidden_act": "silu", "tie_word_embeddings": False, "max_position_embeddings": 32768}


def test_a_hf_config_is_named_by_its_file_unless_it_is_config_json(tmp_path):
    (tmp_path / "models").mkdir()
    named = tmp_path / "models" / "mistral7b.json"
    named.write_text(json.dumps(MISTRAL))
    assert pm.load_model(str(named)).name == "mistral7b"
    folder = tmp_path / "Mistral-7B-v0.1"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(MISTRAL))
    assert pm.load_model(str(folder)).name == "Mistral-7B-v0.1"
    assert pm.load_model(str(folder / "config.json")).name == "Mistral-7B-v0.1"


def test_dbrx_is_refused_as_a_mixture_of_experts(tmp_path):
    dbrx = {"architectures": ["DbrxForCausalLM"], "d_model": 6144, "n_heads": 48, "n_layers": 40,
            "vocab_size": 100352, "max_seq_len": 32768,
            "ffn_config": {"ffn_hidden_size": 10752, "moe_num_experts": 16, "moe_top_k": 4}}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(dbrx))
    line = _one_error(runner.invoke(app, ["estimate", "--model", str(path), "--gpu", "h100-sxm5-80gb", "--gpus", "8",
                                          "--global-batch", "16"]), "model")
    assert "mixture-of-experts (ffn_config.moe_num_experts=16)" in line


def test_a_runs_row_with_a_board_and_a_half_per_node_is_invalid(tmp_path):
    csv = tmp_path / "runs.csv"
    head = ("run_id,n_layers,hidden_size,ffn_hidden_size,n_heads,n_kv_heads,vocab_size,seq_len,gpu,n_gpus,"
            "gpus_per_node,tp,pp,dp,global_batch,micro_batch,framework,tokens_per_s_per_gpu\n")
    row = "{},32,4096,14336,32,8,128256,4096,h100-sxm5-80gb,48,{},1,1,48,96,1,megatron-lm,3000\n"
    csv.write_text(head + row.format("r12", 12) + row.format("r8", 8) + row.format("r16", 16))
    out = tmp_path / "pred.csv"
    res = runner.invoke(app, ["validate", str(csv), "--out", str(out)])
    assert res.exit_code == 0, res.output
    import pandas as pd

    pred = pd.read_csv(out).set_index("run_id")
    assert pred.loc["r12", "status"] == "invalid" and "8-GPU NVLink board" in pred.loc["r12", "reason"]
    assert pred.loc["r8", "status"] == "ok" and pred.loc["r16", "status"] == "ok"
