"""Review of whatif, the JSON outputs and the report: what-if best mode searches the search's own
space (ZeRO++ under DeepSpeed), every output carries its notes, a fixed what-if notes what the stack
cannot run, a GPU swap shows the node size and NIC bandwidth it took, the scaling section names
every GPU count asked for, and MFU's peak is labelled with its precision."""
from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

import perfmodel as pm
from perfmodel.cli import app
from perfmodel.report.data import collect, default_scaling_gpus
from perfmodel.report.inputs import cluster_rows

README = Path(__file__).resolve().parents[2] / "README.md"
JOB_7B = ["--model", "llama2-7b", "--gpu", "a100-sxm4-80gb", "--gpus", "64", "--seq-len", "2048",
          "--global-batch", "512", "--scale-out-gbit-per-s", "25"]
SMALL = ["--model", "llama3-8b", "--gpu", "h100-sxm5-80gb", "--gpus", "16", "--seq-len", "2048",
         "--global-batch", "64"]
CONFIG_KEYS = ("tp", "pp", "dp", "cp", "vpp", "micro_batch", "sp", "zero_stage", "zeropp", "recompute")


def _json(args: list[str]) -> dict:
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


# ---- 1. best mode searches exactly the search's space ----------------------------------------------

@pytest.mark.parametrize("framework", ["deepspeed", "megatron-lm"])
def test_whatif_best_point_is_recommends_winner(framework):
    args = [*JOB_7B, "--framework", framework]
    winner = _json(["recommend", *args, "--top", "1", "--json"])["top"][0]
    point = _json(["whatif", *args, "--vary", "scale_out_gbit_per_s=25", "--json"])["points"][0]
    assert {k: point[k] for k in CONFIG_KEYS} == {k: winner[k] for k in CONFIG_KEYS}
    assert point["tokens_per_s_per_gpu"] == pytest.approx(winner["tokens_per_s_per_gpu"], rel=1e-12)
    if framework == "deepspeed":  # the case that differed: the search picks ZeRO++ here
        assert winner["zeropp"] != ""


def test_zeropp_off_keeps_deepspeed_off_zeropp_and_on_keeps_the_search_rules():
    model = pm.load_model("llama2-7b")
    cluster = pm.ClusterSpec.build(pm.load_gpu("a100-sxm4-80gb"), 64, 8, 25.0)
    job = pm.JobSpec(global_batch=512, seq_len=2048, framework="deepspeed")
    df = pm.whatif(model, cluster, job, {"zeropp_on": ["off", "on"]})
    off, on = df.iloc[0], df.iloc[1]
    assert off["zeropp"] == "" and on["zeropp"] == "qwz,hpz,qgz" and on["zero_stage"] == 3
    no_zpp = pm.search(model, cluster, job, top=1, zeropp=False).iloc[0]
    assert off["tokens_per_s_per_gpu"] == pytest.approx(no_zpp["tokens_per_s_per_gpu"], rel=1e-12)
    # hpZ needs whole nodes (rule 40): 12 GPUs on 8-GPU nodes have no ZeRO++ point with every part on
    odd = pm.ClusterSpec.build(pm.load_gpu("a100-sxm4-80gb"), 12, 8, 25.0)
    job12 = pm.JobSpec(global_batch=48, seq_len=2048, framework="deepspeed")
    row = pm.whatif(model, odd, job12, {"zeropp_on": ["on"]}).iloc[0]
    assert row["status"] == "invalid" and "hpz" in row["reason"]


# ---- 2. notes in every JSON output and in the Python API ----------------------------------------

def test_estimate_json_carries_every_note():
    base = ["estimate", *SMALL, "--tp", "2", "--pp", "2", "--zero-stage", "3", "--json"]
    out = _json([*base, "--framework", "megatrn-lm", "--network", "no-such-fabric"])
    for key in ("iteration_time_s", "tokens_per_s_per_gpu", "mfu", "memory_gib", "fits", "time_breakdown_s",
                "memory_breakdown_gib"):
        assert key in out
    notes = out["notes"]
    assert any("'megatrn-lm' has no profile" in n for n in notes)
    assert any("'no-such-fabric' has no calibration entry" in n for n in notes)
    clean = _json([*base, "--framework", "megatron-lm"])["notes"]
    assert any("megatron-lm cannot run this configuration" in n for n in clean)
    assert _json(["estimate", *SMALL, "--json"])["notes"] == []


def test_estimate_json_mode_prints_only_the_json():
    res = CliRunner().invoke(app, ["estimate", *SMALL, "--framework", "megatrn-lm", "--json"])
    assert res.exit_code == 0
    json.loads(res.stdout)  # one object, nothing else
    assert res.stderr == ""


def test_recommend_and_whatif_json_carry_the_notes():
    rec = _json(["recommend", *SMALL, "--framework", "megatrn-lm", "--network", "no-such-fabric", "--top", "1",
                 "--json"])
    assert {"n_evaluated", "n_feasible", "search_time_s", "top"} <= set(rec)
    assert len(rec["notes"]) == 2 and "megatrn-lm" in rec["notes"][0] and "no-such-fabric" in rec["notes"][1]
    wi = _json(["whatif", *SMALL, "--framework", "megatrn-lm", "--vary", "gpus=8,16", "--json"])
    assert any("megatrn-lm" in n for n in wi["notes"])
    assert _json(["recommend", *SMALL, "--top", "1", "--json"])["notes"] == []


def test_python_api_exposes_the_notes():
    model = pm.load_model("llama3-8b")
    cluster = pm.ClusterSpec.build(pm.load_gpu("h100-sxm5-80gb"), 16, network="no-such-fabric")
    job = pm.JobSpec(global_batch=64, seq_len=2048, framework="megatrn-lm")
    est = pm.estimate(model, cluster, pm.ParallelSpec(tp=2, pp=2, dp=4), job)
    assert len(est.notes) == 2 and "megatrn-lm" in est.notes[0] and "no-such-fabric" in est.notes[1]
    assert est.to_dict()["notes"] == list(est.notes)
    assert pm.search(model, cluster, job, top=1).attrs["notes"] == list(est.notes)
    assert pm.whatif(model, cluster, job, {"gpus": [16]}).attrs["notes"] == list(est.notes)
    plain = pm.JobSpec(global_batch=64, seq_len=2048)
    odd = pm.estimate(model, pm.ClusterSpec.build(cluster.gpu, 16), pm.ParallelSpec(tp=2, pp=2, dp=4, zero_stage=3),
                      plain)
    assert len(odd.notes) == 1 and "megatron-lm cannot run this configuration" in odd.notes[0]
    assert pm.estimate(model, pm.ClusterSpec.build(cluster.gpu, 16), pm.ParallelSpec(dp=16), plain).notes == ()


# ---- 3. a fixed what-if notes what the stack cannot run ----------------------------------------

def test_fixed_whatif_notes_a_capability_rule_as_estimate_does():
    fixed = ["--mode", "fixed", "--tp", "2", "--pp", "2", "--zero-stage", "3"]
    points = _json(["whatif", *SMALL, *fixed, "--vary", "gpus=8,16", "--json"])["points"]
    est = _json(["estimate", *SMALL, "--tp", "2", "--pp", "2", "--zero-stage", "3", "--json"])
    assert [p["status"] for p in points] == ["ok", "ok"]
    assert points[1]["note"] == est["notes"][0] and "ZeRO-2/3 does not compose" in points[1]["note"]
    assert points[1]["tokens_per_s_per_gpu"] == pytest.approx(est["tokens_per_s_per_gpu"], rel=1e-12)
    runnable = _json(["whatif", *SMALL, "--mode", "fixed", "--tp", "2", "--vary", "gpus=16", "--json"])
    assert runnable["points"][0]["note"] == ""


def test_fixed_whatif_under_torchtitan_defaults_to_its_zero_stage():
    tt = [*SMALL, "--framework", "torchtitan", "--mode", "fixed", "--tp", "2", "--vary", "gpus=16", "--json"]
    point = _json(["whatif", *tt])["points"][0]
    assert point["zero_stage"] == 3 and point["note"] == ""
    asked = _json(["whatif", *tt, "--zero-stage", "1"])["points"][0]
    assert asked["zero_stage"] == 1 and "must be 0 (DDP) or 3 (FSDP)" in asked["note"]
    # the Python API: a ParallelSpec that does not state its ZeRO stage takes the stack's
    model, cluster = pm.load_model("llama3-8b"), pm.ClusterSpec.build(pm.load_gpu("h100-sxm5-80gb"), 16)
    job = pm.JobSpec(global_batch=64, seq_len=2048, framework="torchtitan")
    df = pm.whatif(model, cluster, job, {"gpus": [16]}, mode="fixed", parallel=pm.ParallelSpec(tp=2))
    assert df["zero_stage"].iloc[0] == 3


# ---- 4. a GPU swap shows the node size and NIC bandwidth it took; the table is whole --------------

def test_gpu_swap_shows_node_size_and_bandwidth(tmp_path):
    args = ["whatif", "--model", "llama3-8b", "--gpu", "a100-sxm4-80gb", "--gpus", "64", "--global-batch", "128",
            "--vary", "gpu=a100-sxm4-80gb,h100-sxm5-80gb"]
    points = _json([*args, "--json"])["points"]
    for p in points:
        gpu = pm.load_gpu(p["gpu"])
        assert p["gpus_per_node"] == gpu.default_gpus_per_node
        assert p["scale_out_gbit_per_s_per_node"] == gpu.default_scale_out_gbit_per_s(gpu.default_gpus_per_node)
    assert points[0]["scale_out_gbit_per_s_per_node"] != points[1]["scale_out_gbit_per_s_per_node"]
    res = CliRunner().invoke(app, [*args, "--out", str(tmp_path)])
    assert res.exit_code == 0
    csv = pd.read_csv(tmp_path / "whatif.csv")
    assert list(csv["scale_out_gbit_per_s_per_node"]) == [p["scale_out_gbit_per_s_per_node"] for p in points]
    header = res.stdout.splitlines()[0].split()
    assert "gpus_per_node" in header and "scale_out_gbit_per_s_per_node" in header


def test_readme_whatif_example_prints_every_column():
    text = README.read_text()
    section = text[text.index("## Reports and what-if"):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        exec(compile(code, "README.md", "exec"), {})
    printed = buf.getvalue()
    assert "..." not in printed
    assert "cp_kind" in printed and "memory_gib" in printed and "iteration_time_s" in printed


# ---- 5. the scaling section names every GPU count -----------------------------------------------

def test_scaling_keeps_every_requested_count_with_why():
    cluster = pm.ClusterSpec.build(pm.load_gpu("h100-sxm5-80gb"), 512)
    job = pm.JobSpec(global_batch=512, seq_len=8192)
    data = collect(pm.load_model("llama3-70b"), cluster, job, top=2, scaling_gpus=[8, 16, 64, 512])
    s = data.scaling.set_index("n_gpus")
    assert list(s.index) == [8, 16, 64, 512]
    assert s.loc[8, "status"] == "no fit" and "fits in memory" in s.loc[8, "reason"]
    assert pd.isna(s.loc[8, "tokens_per_s"])
    assert (s.loc[[16, 64, 512], "status"] == "ok").all() and (s.loc[[16, 64, 512], "tokens_per_s"] > 0).all()


def test_scaling_names_a_count_without_a_valid_layout(tmp_path):
    res = CliRunner().invoke(app, ["report", *SMALL, "--top", "1", "--scaling-gpus", "7,16", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    s = pd.read_csv(tmp_path / "scaling.csv").set_index("n_gpus")
    assert list(s.index) == [7, 16]
    assert s.loc[7, "status"] == "invalid" and s.loc[7, "reason"] != ""
    html = (tmp_path / "report.html").read_text()
    assert s.loc[7, "reason"].split(" (")[0] in html


def test_default_scaling_range_is_the_documented_one():
    assert default_scaling_gpus(512) == [64, 128, 256, 512, 1024]
    assert default_scaling_gpus(16) == [2, 4, 8, 16, 32]
    assert default_scaling_gpus(12) == [3, 6, 12, 24]
    assert default_scaling_gpus(4) == [1, 2, 4, 8]


# ---- 6. MFU's peak is labelled with the precision it is -----------------------------------------

def test_mfu_peak_is_labelled_with_its_precision(tmp_path):
    v100 = pm.ClusterSpec.build(pm.load_gpu("v100-sxm2-16gb"), 16)
    labels = dict(cluster_rows(v100))
    assert not any("BF16" in k for k in labels)
    peak = next(k for k in labels if "peak" in k)
    assert "16-bit" in peak and "fp16" in peak and "125" in labels[peak]
    h100 = dict(cluster_rows(pm.ClusterSpec.build(pm.load_gpu("h100-sxm5-80gb"), 16)))
    assert any("16-bit" in k and "bf16" in k for k in h100)
    res = CliRunner().invoke(app, ["estimate", "--model", "gpt3-1.3b", "--gpu", "v100-sxm2-16gb", "--gpus", "16",
                                   "--global-batch", "64", "--seq-len", "1024"])
    assert res.exit_code == 0, res.output
    mfu_line = next(line for line in res.stdout.splitlines() if line.strip().startswith("MFU"))
    assert "fp16" in mfu_line and "125" in mfu_line
    args = ["report", "--model", "gpt3-1.3b", "--gpu", "v100-sxm2-16gb", "--gpus", "16", "--global-batch", "64",
            "--seq-len", "1024", "--top", "1", "--scaling-gpus", "16", "--out", str(tmp_path)]
    assert CliRunner().invoke(app, args).exit_code == 0
    html = (tmp_path / "report.html").read_text()
    assert "BF16" not in html and "16-bit (fp16) peak" in html
