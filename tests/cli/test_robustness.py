"""Through the real entry point (``perfmodel`` main): every failure is one ``error:`` line, exit 2,
no traceback; a runs CSV with broken rows still yields one output row per input row."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from perfmodel.errors import InputError

ROOT = Path(__file__).resolve().parents[2]
RUNS = ROOT / "calibration" / "data" / "runs" / "calibration_runs.csv"
BASE = ["--model", "llama3-8b", "--gpu", "h100-sxm5-80gb", "--gpus", "8", "--global-batch", "8"]


def run(*args):
    return subprocess.run([sys.executable, "-m", "perfmodel.cli", *args], capture_output=True, text=True, cwd=ROOT)


def assert_one_error(res, field=None):
    assert res.returncode == 2, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), res.stderr
    assert "Traceback" not in res.stderr
    if field:
        assert field in lines[0]


@pytest.mark.parametrize("args,field", [
    (["estimate", *BASE[:5], "abc", *BASE[6:]], "gpus"),               # not an integer (usage error)
    (["estimate", *BASE, "--bogus"], "bogus"),                         # unknown option
    (["validate", str(RUNS)], "out"),                                  # missing option
    (["estimate", *BASE, "--scale-out-gbit-per-s", "inf"], "scale_out"),
    (["recommend", *BASE[:7], "99999999999999"], "global_batch"),      # would not fit the search arrays
    (["calibrate", "--gpu", "h100-sxm5-80gb", "--runs", str(RUNS), "--gpus-per-node", "0", "--out", "x.yaml"],
     "gpus_per_node"),
    (["whatif", *BASE, "--vary", "gpus=8", "--vary", "gpus=16"], "vary.gpus"),
    # a precision the GPU has no tensor cores for is refused, not costed at a stand-in rate
    (["estimate", *BASE[:2], "--gpu", "a100-sxm4-80gb", *BASE[4:], "--precision", "fp8"], "precision"),
    (["recommend", *BASE, "--precision", "mxfp8"], "precision"),
    (["estimate", *BASE[:2], "--gpu", "v100-sxm2-16gb", *BASE[4:], "--precision", "bf16"], "precision"),
    # a blank range (an unset shell variable) is refused, not read as "not given" (it said --gpus was missing,
    # or searched --gpus alone beside it)
    (["recommend", *BASE[:4], *BASE[6:], "--gpus-range", " "], "gpus_range: is empty"),
    (["recommend", *BASE, "--gpus-range", ""], "gpus_range: is empty"),
    (["report", *BASE, "--scaling-gpus", "", "--out", "never-written"], "scaling_gpus: is empty"),
])
def test_bad_input_is_one_line(args, field):
    assert_one_error(run(*args), field)


def test_precision_defaults_to_what_the_gpu_has():
    """No --precision: bf16, or fp16 on Volta (no bf16 tensor cores)."""
    res = run("estimate", *BASE[:2], "--gpu", "v100-sxm2-16gb", *BASE[4:], "--json")
    assert res.returncode == 0, res.stderr
    assert '"precision": "fp16"' in res.stdout
    res = run("estimate", *BASE, "--json")
    assert res.returncode == 0, res.stderr
    assert '"precision": "bf16"' in res.stdout


def test_binary_and_folder_inputs(tmp_path):
    binary = tmp_path / "x.yaml"
    binary.write_bytes(b"\xff\xfe\x00bin")
    assert_one_error(run("estimate", "--model", str(binary), *BASE[2:]), "not a text file")
    assert_one_error(run("estimate", *BASE, "--calibration", str(binary)), "calibration")
    stale = tmp_path / "stale.yaml"  # a key a framework profile does not have, named with its framework
    stale.write_text("frameworks:\n  nanotron:\n    tp_internode_efficiency: 0.2\n")
    assert_one_error(run("estimate", *BASE, "--calibration", str(stale)),
                     "calibration.frameworks.nanotron.tp_internode_efficiency: moved to constants")
    typo = tmp_path / "typo.yaml"  # a framework name no profile has would be silently ignored
    typo.write_text("frameworks:\n  nanotorn:\n    kernel_efficiency: 0.9\n")
    assert_one_error(run("estimate", *BASE, "--calibration", str(typo)), "calibration.frameworks.nanotorn")
    assert_one_error(run("validate", str(tmp_path), "--out", str(tmp_path / "p.csv")), "folder")
    header_only = tmp_path / "h.csv"
    header_only.write_text(RUNS.read_text().splitlines()[0] + "\n")
    assert_one_error(run("validate", str(header_only), "--out", str(tmp_path / "p.csv")), "no data rows")


def test_broken_rows_are_invalid_and_the_rest_predicted(tmp_path):
    df = pd.read_csv(RUNS, dtype=str).head(8)
    df.loc[0, "tp"] = "abc"
    df.loc[1, "n_layers"] = "-4"
    df.loc[2, "seq_len"] = "inf"
    df.loc[3, "zero_stage"] = "7"
    df.loc[4, "mlp"] = "tanh"
    src = tmp_path / "runs.csv"
    df.to_csv(src, index=False)
    out = tmp_path / "pred.csv"
    res = run("validate", str(src), "--out", str(out))
    assert res.returncode == 0 and "Traceback" not in res.stderr
    pred = pd.read_csv(out)
    assert list(pred["run_id"]) == list(df["run_id"])
    assert list(pred["status"][:5]) == ["invalid"] * 5
    for i, field in enumerate(["tp", "n_layers", "seq_len", "zero_stage", "mlp"]):
        assert field in pred["reason"][i]
    assert (pred["status"][5:] == "ok").all()


def test_calibrate_with_no_usable_run_exits_1_without_a_profile(tmp_path):
    df = pd.read_csv(RUNS).head(5).assign(tp=3)  # 3 divides no head count or GPU count here
    src = tmp_path / "runs.csv"
    df.to_csv(src, index=False)
    out = tmp_path / "p.yaml"
    res = run("calibrate", "--gpu", "h100-sxm5-80gb", "--runs", str(src), "--out", str(out))
    assert res.returncode == 1, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: runs:") and "Traceback" not in res.stderr
    assert not out.exists()


def test_calibrate_says_which_runs_it_did_not_fit(tmp_path):
    import yaml

    df = pd.read_csv(RUNS)
    # ten rows, so that the six fitted are enough for the stack's kernel efficiency (fit_runs.MIN_ROWS_FRAMEWORK):
    # runs that identify no parameter write no profile (exit 1, as the other inputs)
    df = df[df.run_id.str.startswith("kwai")].head(10).reset_index(drop=True)
    df.loc[:2, "tp"] = 3  # three rows break the layout rules
    df.loc[9, ["tokens_per_s_per_gpu", "iteration_time_s", "tflops_per_gpu", "mfu", "hfu"]] = np.nan  # one unmeasured
    src = tmp_path / "runs.csv"
    df.to_csv(src, index=False)
    out = tmp_path / "p.yaml"
    res = run("calibrate", "--gpu", "h800-sxm5-80gb", "--runs", str(src), "--out", str(out))
    assert res.returncode == 0, res.stderr
    warn = [ln for ln in res.stderr.splitlines() if ln.startswith("warning: runs:")]
    assert len(warn) == 1 and "4 of 10 rows not fitted (invalid 3, no measurement 1" in warn[0], warn
    assert df.run_id[0] in warn[0]
    doc = yaml.safe_load(out.read_text())
    assert [i["points"] for i in doc["provenance"]["inputs"] if i["kind"] == "runs"] == [6]


@pytest.mark.parametrize("args,field", [
    # sizes past what the search arrays hold are refused wherever they are given
    (["whatif", *BASE, "--vary", "seq_len=2048,99999999999"], "vary.seq_len"),
    (["whatif", *BASE, "--vary", "gpus=8,4294967296"], "vary.gpus"),
    (["whatif", *BASE, "--vary", "gpus=8,16.5"], "vary.gpus: values must be whole numbers"),
    (["recommend", *BASE, "--gpus-range", "16,1099511627776"], "gpus_range"),
    (["recommend", *BASE, "--objective", "cost", "--train-tokens", "inf", "--usd-per-gpu-hour", "2"], "train_tokens"),
    # a fixed configuration the model cannot take is bad input (exit 2), not an infeasible sweep (exit 1)
    (["whatif", *BASE, "--vary", "gpus=8,16", "--mode", "fixed", "--tp", "3"], "tp: must divide n_heads"),
    # the option that was given is named, not an internal one
    (["report", *BASE, "--out", "unused", "--scaling-gpus", "0,16"], "scaling_gpus"),
])
def test_out_of_range_and_misnamed_inputs(args, field, tmp_path):
    res = subprocess.run([sys.executable, "-m", "perfmodel.cli", *args], capture_output=True, text=True,
                         cwd=tmp_path)
    assert_one_error(res, field)
    assert not (tmp_path / "unused").exists()  # no partial report folder


def test_runs_csv_header_edge_cases(tmp_path):
    """A duplicated column is bad input; a UTF-8 byte-order mark (spreadsheet export) is not."""
    text = RUNS.read_text()
    header, body = text.split("\n", 1)
    dup = tmp_path / "dup.csv"
    dup.write_text(header + ",tp\n" + "\n".join(line + ",1" for line in body.splitlines()[:3] if line) + "\n")
    assert_one_error(run("validate", str(dup), "--out", str(tmp_path / "p.csv")), "appear more than once")
    assert not (tmp_path / "p.csv").exists()
    bom = tmp_path / "bom.csv"
    bom.write_bytes(b"\xef\xbb\xbf" + ("\n".join(text.splitlines()[:4]) + "\n").encode())
    res = run("validate", str(bom), "--out", str(tmp_path / "b.csv"))
    assert res.returncode == 0 and res.stderr == "", res.stderr
    assert len(pd.read_csv(tmp_path / "b.csv")) == 3


def test_validate_rows_edge_cases(tmp_path):
    """Zero sizes and a blank run_id are invalid rows without numpy warnings on stderr; a file with no
    costable row exits 1 with one error line."""
    df = pd.read_csv(RUNS, dtype=str).head(4)
    df.loc[0, "gpus_per_node"] = "0"
    df.loc[1, "n_kv_heads"] = "0"
    df.loc[2, "run_id"] = ""
    src = tmp_path / "runs.csv"
    df.to_csv(src, index=False)
    res = run("validate", str(src), "--out", str(tmp_path / "p.csv"))
    assert res.returncode == 0 and res.stderr == "", res.stderr
    pred = pd.read_csv(tmp_path / "p.csv")
    assert list(pred["status"]) == ["invalid", "invalid", "invalid", "ok"]
    assert "run_id: blank" in pred["reason"][2]
    bad = tmp_path / "bad.csv"
    df.assign(tp="3").to_csv(bad, index=False)
    res = run("validate", str(bad), "--out", str(tmp_path / "q.csv"))
    assert res.returncode == 1
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: no row of") and "Traceback" not in res.stderr


def test_an_uncalibrated_network_is_named():
    res = run("estimate", *BASE, "--network", "efaa")
    assert res.returncode == 0 and res.stderr == ""
    assert "note: network 'efaa' has no calibration entry" in res.stdout and "efa" in res.stdout.splitlines()[-1]
    assert "note:" not in run("estimate", *BASE, "--network", "EFA").stdout


def test_comm_bounds_and_option_names():
    comm = ["comm", "--op", "all_reduce", "--gpus-per-node", "8", "--gpu", "h100-sxm5-80gb"]
    assert_one_error(run(*comm, "--gpus", "16"), "bytes: Missing option '--bytes'")  # the option, not bytes_
    assert_one_error(run(*comm, "--bytes", "1048576", "--gpus", "4294967296"), "gpus: must be at most")
    assert_one_error(run(*comm, "--bytes", str(1 << 60), "--gpus", "16"), "bytes: must be between")
    assert_one_error(run("estimate", *BASE[:4], *BASE[6:]), "gpus: Missing option '--gpus'")


def test_a_run_on_a_broken_gpu_profile_file_is_invalid_with_its_error(tmp_path):
    gpu = tmp_path / "gpu.yaml"
    text = (ROOT / "hardware_profiles" / "h100-sxm5-80gb.yaml").read_text()
    gpu.write_text(text.replace("bf16: 989.4", "bf16: 0", 1))
    df = pd.read_csv(RUNS, dtype=str).head(2)
    df.loc[0, "gpu"] = str(gpu)
    src = tmp_path / "runs.csv"
    df.to_csv(src, index=False)
    res = run("validate", str(src), "--out", str(tmp_path / "p.csv"))
    assert res.returncode == 0 and res.stderr == "", res.stderr
    pred = pd.read_csv(tmp_path / "p.csv")
    assert pred["status"][0] == "invalid" and "peak_dense_tflop_per_s.bf16" in pred["reason"][0]


def test_hostile_documents_are_one_error_line(tmp_path):
    """Documents that are valid syntax but not configurations: deep nesting (a RecursionError traceback
    before), YAML aliases (a 9^9 'billion laughs' ran for minutes), keys given twice (the last one
    won silently), numbers given as text, activations the model does not cost, a bandwidth so small
    that every time overflows, a trace event of 1e308 us."""
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 200_000 + "]" * 200_000)
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [{', '.join(['*' + p] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi")))
    dup = tmp_path / "dup.yaml"
    dup.write_text("n_layers: 4\nn_layers: 8\nhidden_size: 512\nffn_hidden_size: 2048\nn_heads: 8\n"
                   "n_kv_heads: 8\nvocab_size: 1000\n")
    text_layers = tmp_path / "text.yaml"
    text_layers.write_text(dup.read_text().replace("n_layers: 4\nn_layers: 8", 'n_layers: "32"'))
    ds = tmp_path / "ds.json"
    ds.write_text('{"zero_optimization": {"stage": 1, "stage": 3}, "train_micro_batch_size_per_gpu": 1}')
    act = tmp_path / "config.json"
    act.write_text('{"model_type": "weird", "hidden_act": "tanh_of_doom", "hidden_size": 512, '
                   '"num_hidden_layers": 4, "num_attention_heads": 8, "vocab_size": 1000}')
    trace = tmp_path / "trace.json"
    trace.write_text('{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "gemm", "ts": 0, "dur": 1e308}]}')
    est = ["estimate", "--gpu", "h100-sxm5-80gb", "--gpus", "16", "--global-batch", "64"]
    cases = [
        ([*est, "--model", str(deep)], "nested too deeply"),
        ([*est, "--model", str(bomb)], "anchors and aliases"),
        ([*est, "--model", "llama3-8b", "--calibration", str(bomb)], "calibration: YAML anchors"),
        ([*est, "--model", str(dup)], "dup.yaml:2: model: key 'n_layers' given twice"),
        ([*est, "--model", str(text_layers)], "model.n_layers: must be an integer, not text"),
        ([*est, "--model", "llama3-8b", "--deepspeed-config", str(ds)], "key 'stage' given twice"),
        ([*est, "--model", str(act)], "model.hidden_act: activation 'tanh_of_doom'"),
        ([*est, "--model", "/dev/null"], "not a regular file"),
        ([*est, "--model", "llama3-8b", "--scale-out-gbit-per-s", "1e-300"], "scale_out_gbit_per_s"),
        (["comm", "--op", "all_reduce", "--bytes", "1024", "--gpus", "16", "--gpus-per-node", "8", "--gpu",
          "h100-sxm5-80gb", "--scale-out-gbit-per-s", "5e-324"], "scale_out_gbit_per_s"),
        ([*est, "--model", "llama3-8b", "--zero-stage", "3", "--zeropp", "qwz,qwz"], "lists qwz more than once"),
        (["recommend", *BASE, "--objective", "cost", "--train-tokens", "1e308", "--usd-per-gpu-hour", "2"],
         "train_tokens"),
        (["calibrate", "--gpu", "h100-sxm5-80gb", "--trace", str(trace), "--out", str(tmp_path / "c.yaml")],
         "traceEvents[0].dur"),
    ]
    for args, field in cases:
        assert_one_error(run(*args), field)
    assert not (tmp_path / "c.yaml").exists()


def test_bad_measurements_and_partial_outputs(tmp_path):
    """A negative measurement or an unknown target makes its row invalid (not scored as ok); a log line
    whose time is not a number is an error, not skipped; an all-infeasible what-if writes nothing."""
    df = pd.read_csv(RUNS, dtype=str).head(4)
    df.loc[0, "tokens_per_s_per_gpu"] = "-138"
    df.loc[1, "target"] = "banana"
    df.loc[3, "scale_out_gbit_per_s_per_node"] = "0.0001"  # below estimate's floor: every time would overflow
    src = tmp_path / "runs.csv"
    df.to_csv(src, index=False)
    res = run("validate", str(src), "--out", str(tmp_path / "p.csv"))
    pred = pd.read_csv(tmp_path / "p.csv")
    assert res.returncode == 0 and list(pred["status"]) == ["invalid", "invalid", "ok", "invalid"]
    assert "scale_out_gbit_per_s_per_node: must be a number from 0.001" in pred["reason"][3]
    assert "cannot be negative" in pred["reason"][0] and "target: must be one of" in pred["reason"][1]
    log = tmp_path / "nan.log"
    log.write_text(" iteration 1/ 3 | elapsed time per iteration (ms): 5.0 |\n"
                   " iteration 2/ 3 | elapsed time per iteration (ms): nan |\n")
    assert_one_error(run("calibrate", "--gpu", "h100-sxm5-80gb", "--log", str(log), "--out",
                         str(tmp_path / "c.yaml")), "nan.log:2: iteration_time_s")
    out = tmp_path / "w"
    res = run("whatif", "--model", "llama3-70b", "--gpu", "h100-sxm5-80gb", "--gpus", "64", "--global-batch", "64",
              "--mode", "fixed", "--vary", "gpus=1,64", "--out", str(out))
    assert res.returncode == 1 and not out.exists()
    (tmp_path / "file").write_text("")
    assert_one_error(run("whatif", *BASE, "--vary", "gpus=8,16", "--out", str(tmp_path / "file")), "out: is a file")


def test_recommend_json_gives_the_value_it_ranked_by():
    """--objective cost / time-to-train: each top entry of --json carries cost_usd and time_to_train_s,
    which the text table prints ('cost $', 'train h'); a script could not get them before."""
    import json as _json

    args = ["recommend", "--model", "llama3-8b", "--gpu", "h100-sxm5-80gb", "--gpus", "8", "--global-batch", "64",
            "--seq-len", "4096", "--objective", "cost", "--train-tokens", "1e12", "--usd-per-gpu-hour", "2",
            "--json", "--top", "3"]
    r = run(*args)
    assert r.returncode == 0, r.stderr
    top = _json.loads(r.stdout)["top"]
    costs = [t["cost_usd"] for t in top]
    assert costs == sorted(costs) and all(c > 0 for c in costs)
    # cost = GPUs x hours x price, hours = tokens / (tokens/s/GPU x GPUs)
    t0 = top[0]
    assert t0["time_to_train_s"] == pytest.approx(1e12 / (t0["tokens_per_s_per_gpu"] * 8))
    assert t0["cost_usd"] == pytest.approx(8 * t0["time_to_train_s"] / 3600 * 2)
    plain = _json.loads(run(*args[:11], "--json").stdout)["top"][0]
    assert "cost_usd" not in plain


def test_comm_says_when_the_fabric_has_no_calibration_entry():
    """A --network without a fit runs at datasheet rates: comm says so (text note, JSON 'notes') as estimate
    does, so a typo in 'efa' does not change the answer silently."""
    import json as _json

    base = ["comm", "--op", "all_reduce", "--bytes", "1048576", "--gpus", "16", "--gpus-per-node", "8",
            "--gpu", "h100-sxm5-80gb"]
    bogus = _json.loads(run(*base, "--network", "Bogus net", "--json").stdout)
    assert {"time_s", "algbw_gb_per_s", "busbw_gb_per_s"} <= set(bogus)
    assert len(bogus["notes"]) == 1 and "'Bogus net' has no calibration entry" in bogus["notes"][0]
    assert set(_json.loads(run(*base, "--network", "efa", "--json").stdout)) == {
        "time_s", "algbw_gb_per_s", "busbw_gb_per_s"}  # CONTRACT's keys exactly when there is nothing to say
    assert "note: network 'Bogus net'" in run(*base, "--network", "Bogus net").stdout


@pytest.mark.parametrize("command", [
    ["validate", "calibration/data/runs/calibration_runs.csv"],
    ["calibrate", "--gpu", "h100-sxm5-80gb", "--gemm", "tests/fixtures/parsers/gemm_ok.csv"],
])
def test_an_out_path_ending_in_a_separator_names_a_folder_and_is_refused(tmp_path, command):
    """``--out newdir/`` wrote a file called newdir (Path drops the separator): a folder path is refused."""
    target = tmp_path / "newdir"
    res = run(*command, "--out", f"{target}/")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert res.stderr.startswith("error: ") and "out: ends with a path separator" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and not target.exists()


@pytest.mark.parametrize("run_id", ["r1", ""])
def test_validate_summary_has_no_nan_and_no_dataframe_dump(tmp_path, run_id):
    """A row without a measured throughput is not scored, and one without a run id is not costed: the
    summary says so with '-' and a source name, not NaN or pandas' 'Empty DataFrame'."""
    runs = tmp_path / "runs.csv"
    runs.write_text(f"run_id,n_layers,hidden_size,seq_len,gpu,n_gpus\n{run_id},32,4096,4096,h100-sxm5-80gb,8\n")
    res = run("validate", str(runs), "--out", str(tmp_path / "pred.csv"))
    assert res.returncode == (0 if run_id else 1), res.stderr
    assert "NaN" not in res.stdout and "nan" not in res.stdout and "Empty DataFrame" not in res.stdout
    assert "scored 0" in res.stdout


@pytest.mark.parametrize("column", ["precision", "recompute", "mlp", "framework", "zeropp", "network", "gpu"])
def test_a_text_cell_reading_nan_is_blank_as_in_a_number_column(tmp_path, column):
    """README: a cell reading nan (a frame written after .astype(str)) is blank. It was in number columns
    only: precision / gpu 'nan' came out unsupported, recompute / mlp / zeropp invalid."""
    from perfmodel.calibrate.parsers.runs_csv import read_runs_csv
    from perfmodel.validate import predict_runs

    head = "run_id,n_layers,hidden_size,seq_len,gpu,n_gpus,global_batch,precision,recompute,mlp,framework,zeropp,network"
    cells = {"gpu": "h100-sxm5-80gb"}
    rows = []
    for rid, value in (("a-1", ""), ("a-2", "nan"), ("a-3", "NaN")):
        row = {**{c: "" for c in head.split(",")}, "run_id": rid, "n_layers": "32", "hidden_size": "4096",
               "seq_len": "4096", "n_gpus": "8", "global_batch": "8", **cells, column: value}
        rows.append(",".join(row[c] for c in head.split(",")))
    path = tmp_path / "runs.csv"
    path.write_text(head + "\n" + "\n".join(rows) + "\n")
    pred = predict_runs(read_runs_csv(path))
    assert pred["status"].nunique() == 1 and pred["reason"].fillna("").nunique() == 1, pred[["status", "reason"]]
    assert pred["pred_iteration_time_s"].fillna(-1).nunique() == 1


@pytest.mark.parametrize("model,seq_len,noted", [
    ("gpt3-175b", 8192, True),    # learned positions: 2,048
    ("gpt3-175b", 2048, False),
    ("llama3-8b", 32768, False),  # RoPE: no position table to outgrow
])
def test_a_sequence_longer_than_a_learned_position_table_is_said(model, seq_len, noted):
    res = run("estimate", "--model", model, "--gpu", "h100-sxm5-80gb", "--gpus", "64", "--global-batch", "64",
              "--seq-len", str(seq_len), "--tp", "8", "--pp", "8", "--recompute", "full", "--json")
    assert res.returncode == 0, res.stderr
    notes = [n for n in json.loads(res.stdout)["notes"] if "position" in n]
    assert bool(notes) is noted
    if noted:
        assert f"--max-position-embeddings {seq_len}" in notes[0] and "2,048" in notes[0]


NCCL_LOG = ROOT / "calibration" / "data" / "collectives" / "traces" / "nccl" / "aws_p5_1node_h100_allreduce.txt"
TRACE = ROOT / "calibration" / "data" / "kernels_h200" / "layer_llama3-8b_s8192.json"
HUGE = "9" * 5000  # past Python's 4,300-digit limit on reading a whole number, which raised a traceback


def _first_data_row(lines):
    """The first table row (after the launcher's '[1,0]<stdout>:' prefix): its index and its cells."""
    i = next(i for i, ln in enumerate(lines) if ln.startswith("[") and " sum " in ln)
    return i, lines[i].split(":", 1)[-1].split()


def _with_cells(line, cells):
    return line.split(":", 1)[0] + ":  " + "  ".join(cells)


def test_a_whole_number_too_long_to_read_is_one_line_in_every_loader(tmp_path):
    """An audit: a 5,000-digit number in a model YAML, HF config.json, DeepSpeed JSON, calibration YAML,
    nccl-tests log or profiler trace ended in a ValueError traceback (exit 1)."""
    (tmp_path / "m.yaml").write_text(f"name: m\nn_layers: {HUGE}\nhidden_size: 4096\nn_heads: 32\n")
    (tmp_path / "hf.json").write_text(f'{{"model_type": "llama", "num_hidden_layers": {HUGE}}}')
    (tmp_path / "ds.json").write_text(f'{{"train_micro_batch_size_per_gpu": {HUGE}}}')
    (tmp_path / "cal.yaml").write_text(f"constants:\n  nic_efficiency: {HUGE}\n")
    lines = NCCL_LOG.read_text().splitlines()
    i, cells = _first_data_row(lines)
    lines[i] = _with_cells(lines[i], [HUGE, *cells[1:]])
    (tmp_path / "nccl.txt").write_text("\n".join(lines) + "\n")
    (tmp_path / "trace.json").write_text(f'{{"traceEvents": [{{"ph": "X", "name": "k", "ts": {HUGE}, "dur": 1}}]}}')
    cases = [
        (["estimate", "--model", str(tmp_path / "m.yaml"), *BASE[2:]], "model"),
        (["estimate", "--model", str(tmp_path / "hf.json"), *BASE[2:]], "model"),
        (["estimate", *BASE, "--deepspeed-config", str(tmp_path / "ds.json")], "deepspeed_config"),
        (["estimate", *BASE, "--calibration", str(tmp_path / "cal.yaml")], "calibration"),
        (["calibrate", "--gpu", "h100-sxm5-80gb", "--nccl-tests", str(tmp_path / "nccl.txt"), "--out",
          str(tmp_path / "o.yaml")], "size_bytes"),
        (["calibrate", "--gpu", "h100-sxm5-80gb", "--trace", str(tmp_path / "trace.json"), "--out",
          str(tmp_path / "o.yaml")], "trace"),
    ]
    for args, field in cases:
        res = run(*args)
        assert_one_error(res, field)
        assert len(res.stderr) < 400, res.stderr  # the number is not quoted whole


def test_deeply_nested_flow_yaml_is_refused_at_once(tmp_path):
    """An audit: 50,000 nested '[' in a model or calibration YAML ran for over a minute (PyYAML's scanner
    slows faster than the depth grows); anything past 100 flow levels is refused before parsing."""
    import time

    deep = tmp_path / "deep.yaml"
    deep.write_text("a: " + "[" * 50_000 + "]" * 50_000 + "\n")
    t0 = time.perf_counter()
    for args, field in ((["estimate", "--model", str(deep), *BASE[2:]], "model"),
                        (["estimate", *BASE, "--calibration", str(deep)], "calibration")):
        res = run(*args)
        assert_one_error(res, field)
        assert "nested too deeply" in res.stderr
    assert time.perf_counter() - t0 < 30.0
    from perfmodel.structured_text import load_yaml

    # the depth is the parser's, not a count of brackets: text, comments, block scalars and apostrophes
    # do not nest (a review found a textual pre-scan refusing these)
    assert load_yaml("a: '" + "[" * 500 + "'\n# " + "{" * 500 + "\nb: [[1]]\n", "f", "w") == {
        "a": "[" * 500, "b": [[1]]}
    assert load_yaml("source: |\n  " + "see [" * 101 + "\n", "f", "w") == {"source": "see [" * 101 + "\n"}
    assert len(load_yaml("rows:\n" + "- [x, it's]\n- it's\n" * 101, "f", "w")["rows"]) == 202
    assert load_yaml('a: "\\" ' + "[" * 101 + '"\n', "f", "w") == {"a": '" ' + "[" * 101}  # an escaped quote
    with pytest.raises(InputError, match="nested too deeply"):
        load_yaml("a:\n" + "- " * 101 + "x\n", "f", "w")  # block nesting counts too


def test_padded_and_quoted_csv_cells_still_read(tmp_path):
    """A review finding: a strict csv reader refused a hand-aligned table (a space after a closing quote)
    that had always been read; only a quote left open at the end of the file is refused."""
    from perfmodel.calibrate.parsers._csv_table import read_csv_text

    (tmp_path / "pad.csv").write_text('name     ,b\n"llama"  ,1\n"x""y",2\n"",3\n5" screen,4\n"multi\nline",5\n')
    df, lines, _ = read_csv_text(tmp_path / "pad.csv")
    assert [c.strip() for c in df.iloc[:, 0]] == ["llama", 'x"y', "", '5" screen', "multi\nline"]
    assert lines == [2, 3, 4, 5, 7]


def test_a_csv_cut_inside_a_quoted_cell_is_refused(tmp_path):
    """An audit: a runs CSV that ends inside a quoted cell was read with the rest of the file in that cell."""
    text = RUNS.read_text().splitlines()
    cut = "\n".join(text[:4]) + "\n" + text[4][: text[4].rfind('"')]  # the last row's quoted notes left open
    assert cut.count('"') % 2 == 1
    (tmp_path / "cut.csv").write_text(cut)
    res = run("validate", str(tmp_path / "cut.csv"), "--out", str(tmp_path / "p.csv"))
    assert_one_error(res, "csv")
    assert "not closed before the end of the file" in res.stderr


def test_nccl_tables_with_impossible_redop_or_root_are_refused(tmp_path):
    """An audit: redop 'xor' (nccl-tests prints sum, prod, max, min, avg, mulsum or none) and root 5 in an
    all_reduce table (nccl-tests prints -1 for a rootless collective) were fitted."""
    lines = NCCL_LOG.read_text().splitlines()
    i, cells = _first_data_row(lines)
    assert cells[3:5] == ["sum", "-1"]
    for k, value, field in ((3, "xor", "redop"), (4, "5", "root")):
        row = list(cells)
        row[k] = value
        edited = list(lines)
        edited[i] = _with_cells(lines[i], row)
        (tmp_path / "t.txt").write_text("\n".join(edited) + "\n")
        res = run("calibrate", "--gpu", "h100-sxm5-80gb", "--nccl-tests", str(tmp_path / "t.txt"),
                  "--out", str(tmp_path / "o.yaml"))
        assert_one_error(res, field)
        assert f":{i + 1}:" in res.stderr  # the row's own line


def test_trace_event_start_must_be_a_number(tmp_path):
    """An audit: a kernel event whose 'ts' was a string was accepted (a string 'dur' was refused)."""
    doc = json.loads(TRACE.read_text())
    k = next(j for j, ev in enumerate(doc["traceEvents"]) if ev.get("ph") == "X" and ev.get("cat") == "kernel")
    doc["traceEvents"][k]["ts"] = "abc"
    (tmp_path / "t.json").write_text(json.dumps(doc))
    res = run("calibrate", "--gpu", "h200-sxm-141gb", "--trace", str(tmp_path / "t.json"), "--out",
              str(tmp_path / "o.yaml"))
    assert_one_error(res, f"traceEvents[{k}].ts")


@pytest.mark.parametrize("args,field,rule", [
    (["estimate", *BASE, "--zero-stage", "3", "--zeropp", ""], "zeropp", "is empty"),
    (["validate", str(RUNS), "--out", ""], "out", "empty value"),
    (["calibrate", "--gpu", "h100-sxm5-80gb", "--runs", str(RUNS), "--out", ""], "out", "empty value"),
])
def test_empty_option_values_are_refused(args, field, rule):
    """An audit: --zeropp '' ran as no ZeRO++ (an empty --network, --precision or --recompute is refused),
    and --out '' was called a folder ('.')."""
    res = run(*args)
    assert_one_error(res, field)
    assert rule in res.stderr


def test_a_long_path_stays_whole_in_an_error_and_a_huge_cell_is_cut_at_both_ends(tmp_path):
    """A review finding: shortening long tokens cut a 200-character path before its file name."""
    deep = tmp_path / ("d" * 150)
    deep.mkdir()
    res = run("estimate", "--model", str(deep / "missing_model.yaml"), *BASE[2:])
    assert_one_error(res, "model")
    assert "missing_model.yaml'" in res.stderr
    gemm = tmp_path / "g.csv"
    gemm.write_text(f"m,n,k,dtype,time_us\n{HUGE},4096,4096,bf16,10\n")
    res = run("calibrate", "--gpu", "h100-sxm5-80gb", "--gemm", str(gemm), "--out", str(tmp_path / "o.yaml"))
    assert_one_error(res, "m")
    assert "(5,002 characters)" in res.stderr and len(res.stderr) < 400  # the quoted number


def test_hpz_on_one_gpu_nodes_is_refused():
    """A review finding: a node of one GPU leaves hpZ a secondary group of one rank, which DeepSpeed reads
    as hpZ off (zero_hpz_partition_size 1), yet it was costed as hpZ (a full weight copy per GPU)."""
    res = run("estimate", *BASE[:4], "--gpus", "16", "--gpus-per-node", "1", "--global-batch", "16",
              "--zero-stage", "3", "--zeropp", "hpz", "--framework", "deepspeed")
    assert_one_error(res, "zeropp")
    assert "nodes of 2 or more GPUs" in res.stderr
    res = run("estimate", *BASE[:4], "--gpus", "16", "--gpus-per-node", "1", "--global-batch", "16",
              "--zero-stage", "3", "--zeropp", "qwz,qgz", "--framework", "deepspeed")
    assert res.returncode == 0, res.stderr
