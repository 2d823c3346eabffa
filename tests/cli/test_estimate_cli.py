"""`perfmodel estimate` through typer's CliRunner (and once through the installed entry point):
the JSON contract, and bad input -> exit 2 with one `error:` line naming the field."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from perfmodel.cli import app

runner = CliRunner()

BASE = ["estimate", "--model", "llama3-70b", "--gpu", "h100-sxm5-80gb", "--gpus", "64",
        "--global-batch", "64", "--seq-len", "4096"]
CONTRACT_KEYS = {"iteration_time_s", "tokens_per_s_per_gpu", "mfu", "memory_gib", "fits",
                 "time_breakdown_s", "memory_breakdown_gib"}


def with_opts(base, **opts):
    """BASE with some options replaced or added (option name without the dashes, _ -> -)."""
    args = list(base)
    for key, value in opts.items():
        flag = "--" + key.replace("_", "-")
        if flag in args:
            args[args.index(flag) + 1] = str(value)
        else:
            args += [flag, str(value)]
    return args


def check_json(stdout: str) -> dict:
    out = json.loads(stdout)
    assert CONTRACT_KEYS <= set(out)
    assert sum(out["time_breakdown_s"].values()) == pytest.approx(out["iteration_time_s"], rel=1e-9)
    assert sum(out["memory_breakdown_gib"].values()) == pytest.approx(out["memory_gib"], rel=1e-9)
    assert isinstance(out["fits"], bool)
    assert out["iteration_time_s"] > 0 and out["tokens_per_s_per_gpu"] > 0 and 0 < out["mfu"] < 1
    return out


@pytest.mark.parametrize(
    "extra",
    [
        ["--tp", "8", "--pp", "4", "--vpp", "5", "--recompute", "selective"],
        ["--tp", "8", "--pp", "2", "--zero-stage", "3", "--recompute", "full", "--no-sp"],
        ["--tp", "4", "--cp", "2", "--micro-batch", "2", "--precision", "fp8", "--framework", "nemo"],
        ["--tp", "8", "--zero-stage", "3", "--zeropp", "qwz,hpz"],
    ],
)
def test_estimate_json_contract(extra):
    res = runner.invoke(app, BASE + extra + ["--json"])
    assert res.exit_code == 0, res.stderr
    out = check_json(res.stdout)
    assert out["tokens_per_s_per_gpu"] == pytest.approx(64 * 4096 / out["iteration_time_s"] / 64, rel=1e-9)


def test_a_part_used_last_node_is_costed():
    # 12 GPUs on 8-GPU nodes: dp 3 at stride tp 4 (ranks 0, 4, 8) spans both nodes, so the data-parallel
    # reduce pays the scale-out link, and the same job inside one node does not
    args = ["estimate", "--model", "llama3-8b", "--gpu", "h100-sxm5-80gb", "--global-batch", "12",
            "--seq-len", "4096", "--tp", "4", "--gpus-per-node", "8", "--zero-stage", "0", "--json"]
    dp_s = {}
    for gpus, gbit in ((12, 100), (12, 3200), (8, 100)):
        res = runner.invoke(app, args + ["--gpus", str(gpus), "--scale-out-gbit-per-s", str(gbit)])
        assert res.exit_code == 0, res.stderr
        dp_s[gpus, gbit] = check_json(res.stdout)["time_breakdown_s"]["dp_comm_s"]
    assert dp_s[12, 100] > dp_s[12, 3200] > 0 and dp_s[12, 100] > dp_s[8, 100]


def test_config_reports_sequence_parallelism_as_costed():
    """--sp asks for sequence parallelism; it only exists with a TP group (asked for at tp 1 it is refused,
    tests/cli/test_third_audit.py), and config says what ran: left at its default, tp 1 runs without."""
    on = json.loads(runner.invoke(app, BASE + ["--tp", "8", "--sp", "--json"]).stdout)
    off = json.loads(runner.invoke(app, BASE + ["--tp", "1", "--json"]).stdout)
    assert on["config"]["sp"] is True and off["config"]["sp"] is False
    for args, shown in ((["--tp", "1"], "sp=False"), (["--tp", "8", "--sp"], "sp=True")):  # the header line too
        assert shown in runner.invoke(app, BASE + args).stdout.splitlines()[0]


def test_estimate_human_output():
    res = runner.invoke(app, BASE + ["--tp", "8", "--pp", "4"])
    assert res.exit_code == 0, res.stderr
    assert "iteration time" in res.stdout


def test_help_lists_commands():
    res = runner.invoke(app, ["--help"])
    assert res.exit_code == 0
    assert "estimate" in res.stdout and "validate" in res.stdout


def test_entry_point_subprocess():
    exe = shutil.which("perfmodel")
    cmd = [exe] if exe else [sys.executable, "-c", "from perfmodel.cli import main; main()"]
    proc = subprocess.run(cmd + BASE + ["--tp", "8", "--pp", "4", "--json"], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    check_json(proc.stdout)
    bad = subprocess.run(cmd + BASE + ["--tp", "3"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2
    lines = bad.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and "tp" in lines[0]
    assert "Traceback" not in bad.stderr + bad.stdout


# ---- bad input --------------------------------------------------------------------------------
def _files(tmp_path):
    bad_yaml = tmp_path / "bad_model.yaml"
    bad_yaml.write_text("n_layers: [1, 2\nhidden_size: 8\n")
    partial_yaml = tmp_path / "partial.yaml"
    partial_yaml.write_text("n_layers: 4\nhidden_size: 256\nn_heads: 4\nn_kv_heads: 4\nvocab_size: 1000\n")
    cfg_dir = tmp_path / "hf"
    cfg_dir.mkdir()
    bad_json = cfg_dir / "config.json"
    bad_json.write_text('{"hidden_size": 4096,, "num_hidden_layers": 32}')
    return {"bad_yaml": str(bad_yaml), "partial_yaml": str(partial_yaml), "bad_json": str(bad_json),
            "missing": str(tmp_path / "missing.yaml")}


# (id, option overrides, the field name the error line must contain)
BAD_INPUTS = [
    ("tp-not-dividing-heads", dict(tp=3), "tp"),
    ("pp-not-dividing-layers", dict(pp=3), "pp"),
    ("dp-inconsistent-with-gpus", dict(dp=3), "dp"),
    ("negative-gpus", dict(gpus=-8), "gpus"),
    ("zero-gpus", dict(gpus=0), "gpus"),
    ("zero-global-batch", dict(global_batch=0), "global_batch"),
    ("negative-seq-len", dict(seq_len=-5), "seq_len"),
    ("unknown-model", dict(model="gpt-5-ultra"), "model"),
    ("unknown-gpu", dict(gpu="tpu-v9"), "gpu"),
    ("malformed-model-yaml", dict(model="{bad_yaml}"), "model"),
    ("model-yaml-missing-field", dict(model="{partial_yaml}"), "ffn_hidden_size"),
    ("missing-model-file", dict(model="{missing}"), "model"),
    ("malformed-config-json", dict(model="{bad_json}"), "model"),
    ("bad-recompute", dict(recompute="sometimes"), "recompute"),
    ("bad-precision", dict(precision="fp3"), "precision"),
    ("zero-stage-5", dict(zero_stage=5), "zero_stage"),
    ("zero-stage-negative", dict(zero_stage=-1), "zero_stage"),
    ("zeropp-without-zero3", dict(zeropp="qwz"), "zeropp"),
    ("unknown-zeropp-part", dict(zero_stage=3, zeropp="qwz,turbo"), "zeropp"),
    ("micro-batch-not-dividing-batch", dict(tp=8, micro_batch=3), "micro_batch"),
    ("cp-not-dividing-seq-len", dict(cp=2, seq_len=4097), "cp"),
    ("vpp-not-dividing-stage", dict(tp=8, pp=2, vpp=3), "vpp"),
    ("vpp-without-pipeline", dict(vpp=2), "vpp"),
    ("zero-tp", dict(tp=0), "tp"),
    ("zero-micro-batch", dict(micro_batch=0), "micro_batch"),
    ("tp-pp-cp-not-dividing-gpus", dict(tp=8, cp=3), "gpus"),
    ("gpus-per-node-zero", dict(gpus_per_node=0), "gpus_per_node"),
    ("negative-scale-out", dict(scale_out_gbit_per_s=-1), "scale_out"),
    ("missing-calibration-file", dict(calibration="{missing}"), "calibration"),
]


@pytest.mark.parametrize("opts, field", [b[1:] for b in BAD_INPUTS], ids=[b[0] for b in BAD_INPUTS])
def test_bad_input_exits_2_with_one_error_line(tmp_path, opts, field):
    files = _files(tmp_path)
    opts = {k: (v.format(**files) if isinstance(v, str) else v) for k, v in opts.items()}
    res = runner.invoke(app, with_opts(BASE, **opts) + ["--json"])
    assert res.exit_code == 2, (res.exit_code, res.stdout, res.stderr, res.exception)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("error:")
    assert field in lines[0]
    assert "Traceback" not in res.stderr + res.stdout
    assert res.stdout == ""


@pytest.mark.parametrize(
    "args",
    [
        with_opts(BASE, seq_len="abc"),
        with_opts(BASE, gpus="1.5"),
        with_opts(BASE, zero_stage="three"),
        [a for a in BASE if a not in ("--model", "llama3-70b")],  # missing required option
        BASE + ["--no-such-option", "1"],
    ],
    ids=["non-integer-seq-len", "non-integer-gpus", "non-integer-zero-stage", "missing-model", "unknown-option"],
)
def test_usage_errors_exit_2_without_traceback(args):
    res = runner.invoke(app, args)
    assert res.exit_code == 2
    assert "Traceback" not in res.stderr + res.stdout
    assert res.stdout == ""
