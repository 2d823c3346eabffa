"""Robustness review: --out never replaces a link or a special file, calibrate never overwrites its
inputs, impossible measurements are invalid rows, and the parsers say what they drop or cannot read.
Each test fails without its fix."""
from __future__ import annotations

import csv
import gzip
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from perfmodel.errors import InputError, write_file_atomic

ROOT = Path(__file__).resolve().parents[2]
RUNS = ROOT / "calibration" / "data" / "runs" / "calibration_runs.csv"
NCCL = ROOT / "tests" / "fixtures" / "valid" / "broadcast_perf_8ranks.txt"
#: an H100 all-reduce table the collective fit uses (so a calibrate run would write a profile)
ALL_REDUCE = ROOT / "tests" / "fixtures" / "calibrate_review" / "ts_all_reduce.txt"
MEGATRON_LOG = ROOT / "tests" / "fixtures" / "parsers" / "megatron_args_llama2_7b.log"
GPU = ["--gpu", "h100-sxm5-80gb"]


def run(*args, cwd=ROOT):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "perfmodel.cli", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env=env)


def one_error(res, *words):
    """Exit 2 and one ``error:`` line holding ``words``."""
    assert res.returncode == 2, (res.returncode, res.stderr)
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), res.stderr
    for w in words:
        assert w in lines[0], lines[0]
    return lines[0]


def small_runs(tmp_path: Path, n: int = 2, name: str = "runs.csv", **changes) -> Path:
    """The first ``n`` rows of the shipped runs CSV (run ids kept), with ``changes`` applied to every row."""
    with open(RUNS, newline="") as fh:
        lines = [ln for ln in fh if not ln.startswith("#")]
    rows = list(csv.DictReader(lines))[:n]
    for r in rows:
        r.update(changes)
    path = tmp_path / name
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return path


# ---- 1. --out: links are written through, special files refused ------------------------------------

def test_write_file_atomic_writes_through_a_symlink(tmp_path):
    target = tmp_path / "real" / "pred.csv"
    target.parent.mkdir()
    target.write_text("old")
    link = tmp_path / "link.csv"
    link.symlink_to(target)
    write_file_atomic(link, b"new")
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_bytes() == b"new"
    assert not list(target.parent.glob(".*.tmp")) and not list(tmp_path.glob(".*.tmp"))


def test_write_file_atomic_refuses_a_fifo(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match="not a regular file"):
        write_file_atomic(fifo, b"x")
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_validate_out_through_links_and_special_files(tmp_path):
    runs = small_runs(tmp_path)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    one_error(run("validate", runs, "--out", fifo), "out", "not a regular file")
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    # a link to a special file (as /proc/self/fd/1 is): refused, the link stays
    link = tmp_path / "so"
    link.symlink_to(fifo)
    one_error(run("validate", runs, "--out", link), "not a regular file")
    assert link.is_symlink()
    # a link to a regular file: written through, still a link
    pred = tmp_path / "pred.csv"
    good = tmp_path / "good"
    good.symlink_to(pred)
    res = run("validate", runs, "--out", good)
    assert res.returncode == 0, res.stderr
    assert good.is_symlink() and pred.read_text().startswith("run_id,status")


def test_calibrate_out_refuses_a_fifo(tmp_path):
    fifo = tmp_path / "p.yaml"
    os.mkfifo(fifo)
    one_error(run("calibrate", *GPU, "--nccl-tests", ALL_REDUCE, "--out", fifo), "out", "not a regular file")
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


# ---- 2. calibrate --out is never one of its inputs; an input is given once --------------------------

def test_calibrate_out_is_not_an_input(tmp_path):
    keep = tmp_path / "keep.txt"
    keep.write_bytes(ALL_REDUCE.read_bytes())
    one_error(run("calibrate", *GPU, "--nccl-tests", "keep.txt", "--out", "keep.txt", cwd=tmp_path),
              "out", "--nccl-tests input")
    assert keep.read_bytes() == ALL_REDUCE.read_bytes()
    runs = small_runs(tmp_path)
    one_error(run("calibrate", *GPU, "--runs", runs, "--out", f"{tmp_path}/./runs.csv"), "--runs input")
    assert runs.read_text().startswith("run_id,")


def test_calibrate_same_input_twice(tmp_path):
    keep = tmp_path / "keep.txt"
    keep.write_bytes(ALL_REDUCE.read_bytes())
    one_error(run("calibrate", *GPU, "--nccl-tests", "keep.txt", "--nccl-tests", "./keep.txt", "--out", "p.yaml",
                  cwd=tmp_path), "nccl-tests", "given twice")
    assert not (tmp_path / "p.yaml").exists()


# ---- 3. impossible measurements are invalid rows -------------------------------------------------------

@pytest.mark.parametrize("changes,words", [
    ({"mfu": "45", "tflops_per_gpu": ""}, ("mfu", "fraction")),  # (the row measures TFLOP/s and HFU only)
    ({"tflops_per_gpu": "5000"}, ("tflops_per_gpu", "peak")),
    ({"tokens_per_s_per_gpu": "0"}, ("tokens_per_s_per_gpu", "> 0")),
    ({"iteration_time_s": "0", "tokens_per_s_per_gpu": ""}, ("iteration_time_s", "> 0")),
    ({"n_experts": "-2"}, ("n_experts", ">= 0")),
    # expert parallelism: a whole number >= 1 (it was read and ignored), and > 1 only beside experts
    ({"ep": "0"}, ("ep", "whole number >= 1")),
    ({"ep": "-1"}, ("ep", "whole number >= 1")),
    ({"ep": "8"}, ("ep", "mixture-of-experts")),
    ({"cp": "3", "n_gpus": "192", "seq_len": "2048"}, ("cp", "must divide seq_len")),
])
def test_impossible_measurement_is_invalid(tmp_path, changes, words):
    from perfmodel.calibrate.parsers.runs_csv import read_runs_csv
    from perfmodel.validate import error_table, predict_runs

    df = read_runs_csv(small_runs(tmp_path, n=1, **changes))
    pred = predict_runs(df)
    assert pred["status"].iloc[0] == "invalid", pred["reason"].iloc[0]
    for w in words:
        assert w in pred["reason"].iloc[0]
    assert error_table(df, pred)[1]["scored"] == 0


@pytest.mark.parametrize("changes", [{"mfu": "45"}, {"hfu": "3"},
                                     {"tflops_per_gpu": "5000", "tokens_per_s_per_gpu": "100"}])
def test_an_implausible_cell_beside_the_measured_throughput_costs_nothing(tmp_path, changes):
    """The row's ground truth is its first measured column in the schema's order (TFLOP/s, or tokens/s where
    given): a percent typed in its MFU or HFU column, or a cluster total in a TFLOP/s column that a measured
    tokens/s precedes, is read by nothing, so the row is still scored."""
    from perfmodel.calibrate.parsers.runs_csv import read_runs_csv
    from perfmodel.validate import error_table, predict_runs

    df = read_runs_csv(small_runs(tmp_path, n=1, **changes))
    pred = predict_runs(df)
    assert pred["status"].iloc[0] == "ok", pred["reason"].iloc[0]
    assert error_table(df, pred)[1]["scored"] == 1


# ---- 4. columns outside the runs schema are named ---------------------------------------------------

def test_misspelled_runs_columns_are_noted(tmp_path, capsys):
    from perfmodel.calibrate.parsers.runs_csv import read_runs_csv

    path = small_runs(tmp_path)
    text = path.read_text().split("\n", 1)
    header = text[0].replace("zero_stage", "zero-stage").replace("recompute", "recompte")
    path.write_text(header + "\n" + text[1])
    read_runs_csv(path)
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("note:")]
    assert len(err) == 1
    assert "'zero-stage' (did you mean 'zero_stage'?)" in err[0]
    assert "'recompte' (did you mean 'recompute'?)" in err[0]


def test_schema_columns_give_no_note(tmp_path, capsys):
    from perfmodel.calibrate.parsers.runs_csv import read_runs_csv

    read_runs_csv(small_runs(tmp_path))
    assert "note:" not in capsys.readouterr().err


# ---- 5. calibrate --runs that fits nothing writes nothing ---------------------------------------------

def test_calibrate_runs_fitting_nothing_exits_1(tmp_path):
    out = tmp_path / "p.yaml"
    res = run("calibrate", *GPU, "--runs", small_runs(tmp_path), "--out", out)
    assert res.returncode == 1, res.stderr
    assert "no profile written" in res.stderr and "Traceback" not in res.stderr
    assert not out.exists()


# ---- 6. gzip-compressed logs ------------------------------------------------------------------------

def test_gzipped_log_reads_like_the_plain_one(tmp_path):
    from perfmodel.calibrate.parsers import parse_training_log

    gz = tmp_path / "t.log.gz"
    gz.write_bytes(gzip.compress(MEGATRON_LOG.read_bytes()))
    plain = parse_training_log(MEGATRON_LOG)
    assert parse_training_log(gz).equals(plain)
    cut = tmp_path / "cut.log.gz"
    cut.write_bytes(gz.read_bytes()[:60])
    with pytest.raises(InputError, match="gzip-compressed"):
        parse_training_log(cut)


# ---- 7. nccl-tests rows that failed their own check -------------------------------------------------

def _with_wrong(tmp_path: Path, n_wrong: int | None) -> Path:
    """The broadcast fixture with the in-place #wrong of the first ``n_wrong`` rows (all when None) set to 3."""
    out, k = [], 0
    for line in NCCL.read_text().splitlines():
        tokens = line.split()
        if tokens and tokens[0].isdigit() and (n_wrong is None or k < n_wrong):
            line = line[: line.rstrip().rfind(" ")] + " 3"
            k += 1
        out.append(line)
    path = tmp_path / "broadcast_perf.txt"
    path.write_text("\n".join(out) + "\n")
    return path


def test_nccl_rows_with_wrong_results_are_dropped(tmp_path, capsys):
    from perfmodel.calibrate.parsers import parse_nccl_tests_all

    full = sum(len(t.rows) for t in parse_nccl_tests_all(NCCL))
    capsys.readouterr()
    tables = parse_nccl_tests_all(_with_wrong(tmp_path, 3))
    assert sum(len(t.rows) for t in tables) == full - 3
    assert (tables[0].rows["ip_wrong"].fillna(0) == 0).all()
    notes = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("note:")]
    assert len(notes) == 1 and "3 of" in notes[0] and "#wrong" in notes[0]
    with pytest.raises(InputError, match="correctness check"):
        parse_nccl_tests_all(_with_wrong(tmp_path, None))


def test_nccl_old_error_column_is_not_a_failure_count(capsys):
    from perfmodel.calibrate.parsers import parse_nccl_tests_all

    tables = parse_nccl_tests_all(ROOT / "tests" / "fixtures" / "parsers" / "nccl_error_header.txt")
    assert tables and "ip_wrong" in tables[0].rows
    assert "note:" not in capsys.readouterr().err


# ---- 8. a log cut mid-line ----------------------------------------------------------------------------

def test_truncated_last_log_line_is_ignored(tmp_path, capsys):
    from perfmodel.calibrate.parsers import parse_training_log

    lines = MEGATRON_LOG.read_text().rstrip("\n").split("\n")
    last = max(i for i, ln in enumerate(lines) if "elapsed time per iteration (ms):" in ln)
    full = parse_training_log(MEGATRON_LOG)
    cut_at = lines[last].index("elapsed time per iteration (ms):") + len("elapsed time per iteration (ms): ") + 1
    path = tmp_path / "cut.log"
    path.write_text("\n".join(lines[:last] + [lines[last][:cut_at]]))
    capsys.readouterr()
    log = parse_training_log(path)
    assert len(log) == len(full) - 1
    assert list(log["iteration_time_s"]) == list(full["iteration_time_s"].iloc[:-1])
    assert "last line ignored" in capsys.readouterr().err


# ---- 9. messages -------------------------------------------------------------------------------------

def test_out_under_a_file_says_so(tmp_path):
    small_runs(tmp_path)
    line = one_error(run("validate", "runs.csv", "--out", "runs.csv/p.csv", cwd=tmp_path), "out")
    assert "runs.csv is a file, not a folder" in line


def test_unwritable_folder_is_named_not_the_temporary_file(tmp_path, monkeypatch):
    import tempfile

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied", str(Path(kwargs["dir"]) / ".report.html.abc.tmp"))

    monkeypatch.setattr(tempfile, "mkstemp", refuse)
    with pytest.raises(PermissionError) as exc:
        write_file_atomic(tmp_path / "report.html", b"x")
    assert exc.value.filename == str(tmp_path)


def test_semicolon_csv_gets_a_hint(tmp_path):
    runs = small_runs(tmp_path)
    semi = tmp_path / "semi.csv"
    semi.write_text(runs.read_text().replace(",", ";"))
    one_error(run("validate", semi, "--out", tmp_path / "p.csv"), "';'-separated", "comma-separated")


def test_trace_events_not_a_list(tmp_path):
    trace = tmp_path / "t.json"
    trace.write_text('{"traceEvents": {}}')
    one_error(run("calibrate", *GPU, "--trace", trace, "--out", tmp_path / "p.yaml"), "traceEvents: must be a list")


@pytest.mark.parametrize("args,field", [
    (["recommend", "--model", "llama3-8b", *GPU, "--gpus-range", "8,,16", "--global-batch", "64"], "gpus_range"),
    (["estimate", "--model", "llama3-8b", *GPU, "--gpus", "8", "--global-batch", "64", "--zeropp", ","], "zeropp"),
    (["estimate", "--model", "llama3-8b", *GPU, "--gpus", "8", "--global-batch", "64", "--zero-stage", "3",
      "--zeropp", "qwz,,hpz"], "zeropp"),
])
def test_empty_list_items_are_errors(args, field):
    one_error(run(*args), field, "empty item")


def test_a_step_time_without_its_batch_is_not_the_ground_truth(tmp_path):
    """validate scores a step time only with its global batch, sequence and GPU count; without the batch the
    row's TFLOP/s is its ground truth, so an impossible TFLOP/s there still voids the row (final review)."""
    from perfmodel.calibrate.parsers.runs_csv import read_runs_csv
    from perfmodel.validate import predict_runs

    df = read_runs_csv(small_runs(tmp_path, n=1, tflops_per_gpu="5000", iteration_time_s="10", global_batch=""))
    pred = predict_runs(df)
    assert pred["status"].iloc[0] == "invalid" and "tflops_per_gpu" in pred["reason"].iloc[0]
