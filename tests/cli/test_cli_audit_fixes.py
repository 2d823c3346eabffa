"""What a CLI audit found: a report whose scaling counts all fail, Ulysses CP against the key/value
heads, a rack-sized "node" with one tray's NICs, breakdown rows past the 50th, an unknown or empty
framework, and an empty report folder."""
from __future__ import annotations

import json

from typer.testing import CliRunner

from perfmodel.cli import app

runner = CliRunner()


def _one_error(res, field: str) -> str:
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert res.exit_code == 2 and len(lines) == 1 and lines[0].startswith(f"error: {field}"), res.output
    assert "Traceback" not in res.output
    return lines[0]


def test_report_with_no_feasible_scaling_count_is_still_written(tmp_path):
    """--scaling-gpus 3,5: no layout divides the batch at either count (was KeyError 'n_gpus')."""
    out = tmp_path / "r"
    res = runner.invoke(app, ["report", "--model", "llama3-8b", "--gpu", "h100-sxm5-80gb", "--gpus", "16",
                              "--seq-len", "4096", "--global-batch", "32", "--out", str(out), "--scaling-gpus", "3,5"])
    assert res.exit_code == 0, res.output
    assert (out / "report.html").is_file() and (out / "scaling.png").is_file()
    assert (out / "scaling.csv").read_text().startswith("n_gpus,tp,pp,dp,cp")


def test_report_refuses_an_empty_folder_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    res = runner.invoke(app, ["report", "--model", "llama3-8b", "--gpu", "h100-sxm5-80gb", "--gpus", "16",
                              "--global-batch", "32", "--out", ""])
    _one_error(res, "out: must name a folder")
    assert list(tmp_path.iterdir()) == []


def test_ulysses_cp_must_divide_the_key_value_heads_too():
    """llama3-8b: 32 query heads, 8 key/value heads: cp 16 splits the queries but not the K/V heads
    (Transformer Engine's all-to-all CP asserts it)."""
    base = ["estimate", "--model", "llama3-8b", "--gpu", "h100-sxm5-80gb", "--gpus", "16", "--global-batch", "16",
            "--seq-len", "8192", "--cp-kind", "ulysses"]
    line = _one_error(runner.invoke(app, base + ["--cp", "16"]), "cp: with cp_kind ulysses")
    assert "n_kv_heads/tp=8" in line
    assert runner.invoke(app, base + ["--cp", "8", "--dp", "2"]).exit_code == 0
    import perfmodel as pm
    from perfmodel.search import run_search

    cluster = pm.ClusterSpec.build(pm.load_gpu("h100-sxm5-80gb"), 64, 8)
    found = run_search(pm.load_model("llama3-8b"), cluster, pm.JobSpec(global_batch=8, seq_len=65536)).candidates
    ulysses = found[(found.cp_kind == "ulysses") & (found.cp > 1)]
    assert len(ulysses) > 0  # (cp 2, 4, 8 divide the 8 K/V heads)
    kv_per_rank = (8 // ulysses.tp).clip(lower=1)
    assert (kv_per_rank % ulysses.cp == 0).all()


def test_a_rack_sized_node_has_its_gpus_nics():
    """GB200 trays of 4 or the NVL72 rack as one 72-GPU node: the same hardware, the same answer
    (the default NIC bandwidth is per GPU, not one tray's for the whole rack)."""
    def run(gpn):
        res = runner.invoke(app, ["estimate", "--model", "llama3-70b", "--gpu", "gb200", "--gpus", "144", "--tp", "4",
                                  "--global-batch", "144", "--seq-len", "8192", "--gpus-per-node", str(gpn), "--json"])
        assert res.exit_code == 0, res.output
        return json.loads(res.output)

    tray, rack = run(4), run(72)
    assert rack["config"]["scale_out_gbit_per_s_per_node"] == 18 * tray["config"]["scale_out_gbit_per_s_per_node"]
    assert rack["iteration_time_s"] == tray["iteration_time_s"]


def test_recommend_gives_every_row_it_prints_a_breakdown():
    res = runner.invoke(app, ["recommend", "--model", "llama3-8b", "--gpu", "h100-sxm5-80gb", "--gpus", "16",
                              "--global-batch", "64", "--seq-len", "4096", "--top", "60"])
    assert res.exit_code == 0 and "nan" not in res.output, res.output


def test_unknown_framework_is_noted_and_an_empty_one_refused():
    base = ["estimate", "--model", "llama3-8b", "--gpu", "h100-sxm5-80gb", "--gpus", "16", "--tp", "2",
            "--global-batch", "64"]
    res = runner.invoke(app, base + ["--framework", "megatron-ml"])
    assert res.exit_code == 0 and "note: framework 'megatron-ml' has no profile" in res.output
    assert "has no profile" not in runner.invoke(app, base + ["--framework", "NeMo"]).output
    _one_error(runner.invoke(app, base + ["--framework", ""]), "framework: must name a training stack")
    rec = runner.invoke(app, ["recommend", "--model", "llama3-8b", "--gpu", "h100-sxm5-80gb", "--gpus", "16",
                              "--global-batch", "64", "--framework", "megatron-ml", "--top", "2"])
    assert rec.exit_code == 0 and "note: framework 'megatron-ml' has no profile" in rec.output


def test_framework_names_are_read_without_blanks_and_noted_everywhere(tmp_path):
    base = ["estimate", "--model", "llama3-8b", "--gpu", "h100-sxm5-80gb", "--gpus", "16", "--tp", "2",
            "--global-batch", "64", "--json"]
    spaced = json.loads(runner.invoke(app, base + ["--framework", "megatron-lm "]).output)
    plain = json.loads(runner.invoke(app, base + ["--framework", "megatron-lm"]).output)
    assert spaced["iteration_time_s"] == plain["iteration_time_s"]  # not the generic profile's
    what = runner.invoke(app, ["whatif", "--model", "llama3-8b", "--gpu", "h100-sxm5-80gb", "--gpus", "16",
                               "--global-batch", "64", "--vary", "scale_out_gbit_per_s=400,800", "--framework",
                               "megatronlm"])
    assert what.exit_code == 0 and "note: framework 'megatronlm' has no profile" in what.output
