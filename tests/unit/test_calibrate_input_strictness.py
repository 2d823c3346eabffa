"""calibrate's inputs read strictly (a review of 2026-12-02: ~480 corrupted variants of every input kind).
Each case below was accepted before, exit 0 with a silently wrong fit, or crashed with a traceback."""
from __future__ import annotations

import json
import warnings
from pathlib import Path

import pandas as pd
import pytest
import yaml

from cli_helpers import run_cli

ROOT = Path(__file__).resolve().parents[2]
POLARIS_N2 = ROOT / "tests" / "fixtures" / "calibrate_review" / "old_rank_all_reduce_polaris_n2.txt"
ARGS_LOG = ROOT / "tests" / "fixtures" / "parsers" / "megatron_args_llama2_7b.log"
GEMM_OK = ROOT / "tests" / "fixtures" / "parsers" / "gemm_ok.csv"
RUNS = ROOT / "calibration" / "data" / "runs" / "calibration_runs.csv"
A100 = ["--gpu", "a100-sxm4-40gb"]


def _calibrate(monkeypatch, capsys, tmp_path, *args):
    out = tmp_path / "p.yaml"
    code, _, err = run_cli(monkeypatch, capsys, "calibrate", *args, "--out", str(out))
    return code, err, out


def _one_error(code, err, *words):
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error:"), err
    for w in words:
        assert w in lines[0], lines[0]


def _runs_head(tmp_path, n=3, name="runs.csv", **cells) -> Path:
    rows = pd.read_csv(RUNS, dtype=str, keep_default_na=False).head(n)
    for col, value in cells.items():
        rows.loc[0, col] = value
    path = tmp_path / name
    rows.to_csv(path, index=False)
    return path


def _polaris(tmp_path, edit, name="n2.txt") -> Path:
    path = tmp_path / name
    path.write_text(edit(POLARIS_N2.read_text()))
    return path


def test_a_csv_cell_over_the_csv_modules_limit_is_one_error_line(monkeypatch, capsys, tmp_path):
    """A 200 KB notes cell crashed the reader with _csv.Error (a traceback, exit 1)."""
    runs = _runs_head(tmp_path, notes="x" * 200_000)
    code, err, out = _calibrate(monkeypatch, capsys, tmp_path, "--gpu", "h100-sxm5-80gb", "--runs", str(runs))
    _one_error(code, err, "csv row: has a cell longer than 131,072 characters")
    assert not out.exists()


def test_a_runs_row_with_gpus_per_node_0_warns_nothing_from_numpy(tmp_path):
    from perfmodel.calibrate.fit_runs import fit_runs
    from perfmodel.calibrate.parsers.runs_csv import read_runs_csv

    df = read_runs_csv(_runs_head(tmp_path, gpus_per_node="0"))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        fit_runs(df)


def test_an_unknown_recompute_granularity_is_refused_not_costed_as_none(monkeypatch, capsys, tmp_path):
    log = tmp_path / "run.log"
    log.write_text(ARGS_LOG.read_text().replace("recompute_granularity ........................... None",
                                                "recompute_granularity ........................... banana"))
    code, err, _ = _calibrate(monkeypatch, capsys, tmp_path, "--gpu", "h100-sxm5-80gb", "--log", str(log))
    _one_error(code, err, "recompute_granularity: must be full, selective or None", "'banana'")


def test_a_file_of_two_gpu_models_is_refused(monkeypatch, capsys, tmp_path):
    """Only the first rank's (or device's) model was checked against --gpu."""
    nccl = _polaris(tmp_path, lambda t: t.replace("device 3 [0xc7] NVIDIA A100-SXM4-40GB",
                                                  "device 3 [0xc7] NVIDIA H100 80GB HBM3", 1))
    code, err, _ = _calibrate(monkeypatch, capsys, tmp_path, *A100, "--nccl-tests", str(nccl))
    _one_error(code, err, "Rank lines: name more than one GPU model")
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps({"deviceProperties": [{"name": "NVIDIA H200"}, {"name": "NVIDIA A100-SXM4-80GB"}],
                                 "traceEvents": []}))
    code, err, _ = _calibrate(monkeypatch, capsys, tmp_path, "--gpu", "h200-sxm-141gb", "--trace", str(trace))
    _one_error(code, err, "deviceProperties: name more than one GPU model")


def test_one_message_size_cannot_fit_a_bandwidth_and_a_latency(monkeypatch, capsys, tmp_path):
    """One 16 MiB row fitted both exactly (any pair meets one time): a NIC efficiency far from the sweep's."""
    def keep_one(text):
        return "\n".join(ln for ln in text.splitlines()
                         if not ln.strip()[:1].isdigit() or int(ln.split()[0]) in (4, 16777216)) + "\n"

    code, err, out = _calibrate(monkeypatch, capsys, tmp_path, *A100, "--nccl-tests", str(_polaris(tmp_path, keep_one)))
    _one_error(code, err, "nccl_tests: one message size of 1 MiB or more (16,777,216 bytes)")
    assert not out.exists()


@pytest.mark.parametrize("edit,words", [
    # a byte count with digit separators was skipped as text, one point fewer
    (lambda t: t.replace("     1048576        262144", "   1,048,576        262144"), ("size: must be a whole number",)),
    # the units line says ms; the times were read as us
    (lambda t: t.replace("(us)  (GB/s)", "(ms)  (GB/s)"), ("time unit", "'(ms)'")),
    # busbw 100x algbw's factor: was not checked
    (lambda t: t.replace("481.1    2.18    3.81", "481.1    2.18  381.00"), ("out-of-place busbw", "disagree")),
    # a FAILED check trailer beside rows that count no wrong value
    (lambda t: t.replace("# Out of bounds values : 0 OK", "# Out of bounds values : 12 FAILED"),
     ("Out of bounds values: 12 FAILED",)),
])
def test_edited_nccl_tests_tables_are_refused(monkeypatch, capsys, tmp_path, edit, words):
    code, err, _ = _calibrate(monkeypatch, capsys, tmp_path, *A100, "--nccl-tests", str(_polaris(tmp_path, edit)))
    _one_error(code, err, *words)


def test_a_fabric_name_with_a_line_break_is_refused(monkeypatch, capsys, tmp_path):
    code, err, _ = _calibrate(monkeypatch, capsys, tmp_path, *A100, "--gpus-per-node", "4", "--nccl-tests",
                              str(POLARIS_N2), "--network", "IB\nNDR")
    _one_error(code, err, "network: must be printable text")


def test_a_row_whose_target_column_is_blank_is_predicted_but_scored_on_nothing(tmp_path):
    """Without its tokens/s column a row targeting tokens/s was scored (and fitted) on its TFLOP/s, silently: its
    inputs are fine, so it is still predicted, and says why it is not scored."""
    from perfmodel.calibrate.parsers.runs_csv import read_runs_csv
    from perfmodel.validate import error_table, predict_runs

    rows = pd.read_csv(RUNS, dtype=str, keep_default_na=False).head(3).drop(columns=["tokens_per_s_per_gpu"])
    rows["target"] = "tokens_per_s_per_gpu"
    rows["tflops_per_gpu"] = "100"
    path = tmp_path / "r.csv"
    rows.to_csv(path, index=False)
    df = read_runs_csv(path)
    pred = predict_runs(df)
    assert (pred["status"] == "ok").all() and pred["pred_tokens_per_s_per_gpu"].notna().all()
    assert pred["reason"].iloc[0] == ("not scored: target: names tokens_per_s_per_gpu, which is blank in this row "
                                      "(the CSV has no such column)")
    assert error_table(df, pred)[1]["scored"] == 0


def test_a_step_time_and_a_throughput_that_disagree_are_not_scored(tmp_path):
    from perfmodel.calibrate.parsers.runs_csv import read_runs_csv
    from perfmodel.validate import error_table, predict_runs

    rows = pd.read_csv(RUNS, dtype=str, keep_default_na=False)
    rows = rows[(rows["iteration_time_s"] != "") & (rows["tokens_per_s_per_gpu"] != "")].head(2).copy()
    assert len(rows) == 2
    ok_path = tmp_path / "ok.csv"
    rows.to_csv(ok_path, index=False)
    df = read_runs_csv(ok_path)
    assert error_table(df, predict_runs(df))[1]["scored"] == 2  # the shipped ones agree
    rows.iloc[0, rows.columns.get_loc("iteration_time_s")] = "1e300"
    bad = tmp_path / "bad.csv"
    rows.to_csv(bad, index=False)
    df = read_runs_csv(bad)
    pred = predict_runs(df)
    assert list(pred["status"]) == ["ok", "ok"] and pred["reason"].iloc[0].startswith("not scored: iteration_time_s: gives")
    assert error_table(df, pred)[1]["scored"] == 1


def test_an_empty_calibration_file_is_said(monkeypatch, capsys, tmp_path):
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    code, out, err = run_cli(monkeypatch, capsys, "estimate", "--model", "llama3-8b", "--gpu", "h100-sxm5-80gb",
                             "--gpus", "8", "--global-batch", "8", "--calibration", str(empty))
    assert code == 0 and "holds no fitted values, so datasheet numbers only are used" in err


def test_gemm_columns_read_whatever_their_case_and_a_contradicting_repeat_is_refused(monkeypatch, capsys, tmp_path):
    upper = tmp_path / "upper.csv"
    upper.write_text("M,N,K,DTYPE,TIME_US\n4096,4096,4096,bf16,200.0\n8192,8192,8192,bf16,1600\n")
    code, err, out = _calibrate(monkeypatch, capsys, tmp_path, "--gpu", "h100-sxm5-80gb", "--gemm", str(upper))
    assert code == 0 and out.is_file(), err
    twice = tmp_path / "twice.csv"
    twice.write_text(GEMM_OK.read_text() + "8192,8192,8192,bf16,3300000\n")
    code, err, _ = _calibrate(monkeypatch, capsys, tmp_path, "--gpu", "h100-sxm5-80gb", "--gemm", str(twice))
    _one_error(code, err, "time_us: the shape 8192x8192x8192 bf16 is measured", "apart")


def test_a_windows_line_end_copy_of_an_input_is_the_same_input(monkeypatch, capsys, tmp_path):
    crlf = tmp_path / "crlf.txt"
    crlf.write_bytes(POLARIS_N2.read_bytes().replace(b"\n", b"\r\n"))
    code, err, _ = _calibrate(monkeypatch, capsys, tmp_path, *A100, "--gpus-per-node", "4", "--nccl-tests",
                              str(POLARIS_N2), "--nccl-tests", str(crlf))
    _one_error(code, err, "has the same content as")


def test_a_trace_event_that_is_not_an_object_is_refused(monkeypatch, capsys, tmp_path):
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps({"traceEvents": ["x", 3]}))
    code, err, _ = _calibrate(monkeypatch, capsys, tmp_path, "--gpu", "h200-sxm-141gb", "--trace", str(trace))
    _one_error(code, err, "traceEvents[0]: must be an event object")


@pytest.mark.parametrize("old,new,words", [
    ("iteration        1/     100", "iteration      600/     100", ("iteration: 600 of 100",)),
    ("elapsed time per iteration (ms): 11820.4", "elapsed time per iteration (ms): 1e300",
     ("iteration_time_s: must be at most 86,400 s",)),
])
def test_an_impossible_iteration_line_is_refused(monkeypatch, capsys, tmp_path, old, new, words):
    log = tmp_path / "run.log"
    text = ARGS_LOG.read_text()
    assert old in text
    log.write_text(text.replace(old, new, 1))
    code, err, _ = _calibrate(monkeypatch, capsys, tmp_path, "--gpu", "h100-sxm5-80gb", "--log", str(log))
    _one_error(code, err, *words)


def test_the_clean_inputs_still_fit(monkeypatch, capsys, tmp_path):
    """The fixtures the edits start from fit as before (the checks refuse only the edits)."""
    code, err, out = _calibrate(monkeypatch, capsys, tmp_path, *A100, "--gpus-per-node", "4", "--nccl-tests",
                                str(POLARIS_N2))
    assert code == 0 and "nvlink_efficiency" in yaml.safe_dump(yaml.safe_load(out.read_text())), err
