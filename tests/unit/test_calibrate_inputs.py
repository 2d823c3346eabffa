"""``perfmodel calibrate`` on bad measured inputs, through the real entry point (in process):
exactly one ``error: <file>:<line>: <field>: <rule>`` line on stderr, exit 2, no traceback and no
profile written (robustness probe findings on nccl-tests, Kineto, GEMM and log inputs)."""
from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest

from cli_helpers import run_cli

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "parsers"
NCCL_HEADER = ("#       size         count      type   redop    root     time   algbw   busbw #wrong"
               "     time   algbw   busbw #wrong\n")
NCCL_ROWS = [
    "     1048576        262144     float     sum      -1    123.2    8.51   15.95      0    121.3    8.64   16.21      0",
    "     4194304       1048576     float     sum      -1    168.6   24.87   46.64      0    167.7   25.02   46.91      0",
    "    67108864      16777216     float     sum      -1    601.5  111.57  209.19      0    604.2  111.07  208.26      0",
    "  1073741824     268435456     float     sum      -1   4607.6  233.04  436.95      0   4565.6  235.18  440.96      0",
]


def _nccl(tmp_path, row: int | None = None, cell: int | None = None, value: str = "", rows=NCCL_ROWS):
    """An all_reduce_perf table (16 ranks from busbw/algbw); data row ``row`` cell ``cell`` set to
    ``value``. The header is line 2, so data row i is on line i + 3."""
    body = [r.split() for r in rows]
    if row is not None:
        body[row][cell] = value
    path = tmp_path / "all_reduce_perf.txt"
    path.write_text("# nccl-tests all_reduce_perf\n" + NCCL_HEADER + "\n".join("  ".join(r) for r in body) + "\n")
    return path


def _file(tmp_path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _trace(tmp_path, event: dict | None = None, **top) -> Path:
    events = [] if event is None else [event]
    return _file(tmp_path, "trace.json", json.dumps({"traceEvents": events, **top}))


GEMM_EVENT = {"ph": "X", "cat": "kernel", "name": "sm90_gemm_bf16", "ts": 1, "dur": 10.0}
NCCL_EVENT = {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce", "ts": 1, "dur": 10.0,
              "args": {"Collective name": "allreduce", "dtype": "Float", "Group size": 8, "In msg nelems": 10}}
MEGATRON = " iteration       10/  100 | elapsed time per iteration (ms): {ms} |\n"

CASES = {
    # id: (option, input maker, expected "file:line: field" after "error: ")
    "nccl count N/A": ("--nccl-tests", lambda t: _nccl(t, 0, 1, "N/A"), "all_reduce_perf.txt:3: count"),
    "nccl root N/A": ("--nccl-tests", lambda t: _nccl(t, 1, 4, "N/A"), "all_reduce_perf.txt:4: root"),
    "nccl algbw N/A": ("--nccl-tests", lambda t: _nccl(t, 0, 6, "N/A"), "all_reduce_perf.txt:3: oop_algbw_gb_per_s"),
    "nccl time inf": ("--nccl-tests", lambda t: _nccl(t, 2, 5, "inf"), "all_reduce_perf.txt:5: oop_time_us"),
    "nccl time nan": ("--nccl-tests", lambda t: _nccl(t, 2, 5, "nan"), "all_reduce_perf.txt:5: oop_time_us"),
    "nccl time neg": ("--nccl-tests", lambda t: _nccl(t, 3, 5, "-5"), "all_reduce_perf.txt:6: oop_time_us"),
    "nccl time 0": ("--nccl-tests", lambda t: _nccl(t, 0, 5, "0"), "all_reduce_perf.txt:3: oop_time_us"),
    "trace dur str": ("--trace", lambda t: _trace(t, {**GEMM_EVENT, "dur": "abc"}), "trace.json:1: traceEvents[0].dur"),
    "trace dur null": ("--trace", lambda t: _trace(t, {**GEMM_EVENT, "dur": None}), "trace.json:1: traceEvents[0].dur"),
    "trace dur neg": ("--trace", lambda t: _trace(t, {**GEMM_EVENT, "dur": -1000}), "trace.json:1: traceEvents[0].dur"),
    "trace dur NaN": ("--trace", lambda t: _file(t, "trace.json", '{"traceEvents":[{"ph":"X","cat":"kernel",'
                                                 '"name":"gemm","dur":NaN}]}'), "trace.json:1: traceEvents[0].dur"),
    "trace name int": ("--trace", lambda t: _trace(t, {**GEMM_EVENT, "name": 5}), "trace.json:1: traceEvents[0].name"),
    "trace cat list": ("--trace", lambda t: _trace(t, {**GEMM_EVENT, "cat": ["kernel"]}), "trace.json:1: traceEvents[0].cat"),
    "trace group str": ("--trace", lambda t: _trace(t, {**NCCL_EVENT, "args": {**NCCL_EVENT["args"], "Group size": "eight"}}),
                        "trace.json:1: traceEvents[0].args.Group size"),
    "trace nelems str": ("--trace", lambda t: _trace(t, {**NCCL_EVENT, "args": {**NCCL_EVENT["args"], "In msg nelems": "many"}}),
                         "trace.json:1: traceEvents[0].args.In msg nelems"),
    "trace step dur": ("--trace", lambda t: _trace(t, {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1",
                                                       "dur": "x"}), "trace.json:1: traceEvents[0].dur"),
    "trace devprops": ("--trace", lambda t: _trace(t, GEMM_EVENT, deviceProperties={"name": "x"}),
                       "trace.json:1: deviceProperties"),
    "trace distinfo": ("--trace", lambda t: _trace(t, GEMM_EVENT, distributedInfo=[1]), "trace.json:1: distributedInfo"),
    "trace no events": ("--trace", lambda t: _trace(t), "trace.json:1: traceEvents"),
    "gemm m 0": ("--gemm", lambda t: _file(t, "g.csv", "m,n,k,dtype,time_us\n0,4096,4096,bf16,200\n"), "g.csv:2: m"),
    "gemm m neg": ("--gemm", lambda t: _file(t, "g.csv", "m,n,k,dtype,time_us\n-4096,4096,4096,bf16,200\n"), "g.csv:2: m"),
    "gemm m huge": ("--gemm", lambda t: _file(t, "g.csv", "m,n,k,dtype,time_us\n99999999999999999999,4096,4096,bf16,200\n"),
                    "g.csv:2: m"),
    "gemm m frac": ("--gemm", lambda t: _file(t, "g.csv", "m,n,k,dtype,time_us\n4096.5,4096,4096,bf16,200\n"), "g.csv:2: m"),
    "gemm dtype": ("--gemm", lambda t: _file(t, "g.csv", "m,n,k,dtype,time_us\n4096,4096,4096,int3,200\n"), "g.csv:2: dtype"),
    "gemm dtype blank": ("--gemm", lambda t: _file(t, "g.csv", "m,n,k,dtype,time_us\n4096,4096,4096,,200\n"), "g.csv:2: dtype"),
    "gemm too fast": ("--gemm", lambda t: _file(t, "g.csv", "m,n,k,dtype,time_us\n4096,4096,4096,bf16,0.0000001\n"),
                      "g.csv:2: time_us"),
    "gemm header only": ("--gemm", lambda t: _file(t, "g.csv", "m,n,k,dtype,time_us\n"), "g.csv:1: csv"),
    "log iteration huge": ("--log", lambda t: _file(t, "train.log", " iteration 99999999999999999999999/ 100 |"
                                                    " elapsed time per iteration (ms): 10 |\n"), "train.log:1: iteration"),
    "log step huge": ("--log", lambda t: _file(t, "train.log", "step: 99999999999999999999999  loss: 1.0  tps: 1,234\n"),
                      "train.log:1: iteration"),
    "log time inf": ("--log", lambda t: _file(t, "train.log", MEGATRON.format(ms="9" * 400)), "train.log:1: iteration_time_s"),
    "log time 0": ("--log", lambda t: _file(t, "train.log", MEGATRON.format(ms="0")), "train.log:1: iteration_time_s"),
}




def assert_one_error(code: int, err: str, expected: str, rc: int = 2) -> None:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == rc and len(lines) == 1, err
    assert "Traceback" not in err and lines[0].startswith("error: ")
    assert expected in lines[0], lines[0]


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_bad_input_is_one_error_line_and_no_profile(tmp_path, monkeypatch, capsys, case):
    option, make, expected = CASES[case]
    path = make(tmp_path)
    out = tmp_path / "profile.yaml"
    code, _, err = run_cli(monkeypatch, capsys, "calibrate", "--gpu", "h100-sxm5-80gb", option, str(path),
                           "--out", str(out))
    assert_one_error(code, err, f"error: {tmp_path}/{expected}: ")
    assert not out.exists() and not list(tmp_path.glob(".profile.yaml.*"))


def test_good_inputs_still_write_a_profile(tmp_path, monkeypatch, capsys):
    out = tmp_path / "profile.yaml"
    gemm = _file(tmp_path, "g.csv", "m,n,k,dtype,time_us\n4096,4096,4096,bf16,200\n8192,8192,8192,bf16,1500\n")
    code, stdout, err = run_cli(monkeypatch, capsys, "calibrate", "--gpu", "h100-sxm5-80gb", "--gpus-per-node", "8",
                                "--nccl-tests", str(_nccl(tmp_path)), "--trace", str(_trace(tmp_path, NCCL_EVENT)),
                                "--gemm", str(gemm), "--log", str(_file(tmp_path, "t.log", MEGATRON.format(ms="812"))),
                                "--out", str(out))
    assert code == 0 and err == "" and out.is_file(), err
    assert "matmul_efficiency_max" in stdout and "median iteration time 0.812 s" in stdout


def test_a_gpu_profile_file_calibrates_like_a_catalog_name(tmp_path, monkeypatch, capsys):
    """--gpu may be a profile YAML whose name is not in the catalog: the fits use that spec."""
    import yaml

    root = Path(__file__).resolve().parents[2]
    profile = yaml.safe_load((root / "hardware_profiles" / "h100-sxm5-80gb.yaml").read_text())
    gpu = _file(tmp_path, "my-gpu.yaml", yaml.safe_dump({**profile, "name": "my-gpu"}))
    gemm = _file(tmp_path, "g.csv", "m,n,k,dtype,time_us\n4096,4096,4096,FP8 e4m3,100\n8192,8192,8192,bf16,1500\n")
    out = tmp_path / "profile.yaml"
    code, stdout, err = run_cli(monkeypatch, capsys, "calibrate", "--gpu", str(gpu), "--gpus-per-node", "8", "--nccl-tests",
                                str(_nccl(tmp_path)), "--gemm", str(gemm), "--out", str(out))
    assert code == 0 and err == "" and out.is_file(), err
    fitted = yaml.safe_load(out.read_text())["gpus"]["my-gpu"]
    assert {"matmul_efficiency_max", "fp8_matmul_efficiency_max"} <= set(fitted)


def test_nccl_tests_without_fittable_sizes_is_nothing_usable(tmp_path, monkeypatch, capsys):
    # every size < 1 MiB: the fit has no points; this wrote a profile with "n/a" and exit 0
    small = [r.replace("1048576", "524288", 1).replace("262144", "131072").replace("123.2", "61.60")
             .replace("121.3", "60.65") for r in NCCL_ROWS[:1]]
    out = tmp_path / "profile.yaml"
    code, _, err = run_cli(monkeypatch, capsys, "calibrate", "--gpu", "h100-sxm5-80gb", "--gpus-per-node", "8",
                           "--nccl-tests", str(_nccl(tmp_path, rows=small)), "--out", str(out))
    assert_one_error(code, err, "error: nccl-tests: no table in", rc=1)
    assert not out.exists()


def test_unwritable_out_names_out_and_the_users_path(tmp_path, monkeypatch, capsys):
    # was "error: <dir>/.x.yaml.<random>.tmp: file: cannot read or write (...)"
    blocker = _file(tmp_path, "not_a_folder", "")
    out = blocker / "x.yaml"
    code, _, err = run_cli(monkeypatch, capsys, "calibrate", "--gpu", "h100-sxm5-80gb",
                           "--nccl-tests", str(_nccl(tmp_path)), "--out", str(out))
    # a file where the folder should be is named as such (mkdir only says "File exists")
    assert_one_error(code, err, f"error: {out}: out: {blocker} is a file, not a folder")
    assert ".tmp" not in err


def test_write_failure_leaves_neither_profile_nor_temporary_file(tmp_path, monkeypatch):
    from perfmodel.calibrate import command
    from perfmodel.errors import InputError

    def disk_full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(command, "dump_yaml", disk_full)
    out = tmp_path / "x.yaml"
    with pytest.raises(InputError, match=rf"^out: cannot write {out} \(No space left on device\)$"):
        command._write_atomic({"a": 1}, out)
    assert list(tmp_path.iterdir()) == []


def test_a_collective_the_fit_does_not_use_is_skipped_not_a_crash(tmp_path, monkeypatch, capsys):
    """broadcast_perf output parses but fits nothing: alone it is nothing usable (exit 1, one line),
    beside a usable table a warning."""
    bcast = Path(__file__).resolve().parents[1] / "fixtures" / "valid" / "broadcast_perf_8ranks.txt"
    out = tmp_path / "p.yaml"
    code, _, err = run_cli(monkeypatch, capsys, "calibrate", "--gpu", "h100-sxm5-80gb", "--gpus-per-node", "8", "--nccl-tests", str(bcast),
                           "--out", str(out))
    assert_one_error(code, err, "is one the fit uses", rc=1)
    assert not out.exists()
    code, _, err = run_cli(monkeypatch, capsys, "calibrate", "--gpu", "h100-sxm5-80gb", "--gpus-per-node", "8", "--nccl-tests", str(bcast),
                           "--nccl-tests", str(_nccl(tmp_path)), "--out", str(out))
    assert code == 0 and out.is_file() and err.startswith("warning: nccl-tests:") and "Traceback" not in err


def test_gemm_batch_column_counts_in_the_flops(tmp_path, monkeypatch, capsys):
    rows = "name,batch,m,n,k,dtype,time_ms\ng0,4,8192,8192,8192,bf16,5.93\ng1,1,8192,8192,8192,bf16,1.48\n"
    out = tmp_path / "p.yaml"
    code, stdout, err = run_cli(monkeypatch, capsys, "calibrate", "--gpu", "h100-sxm5-80gb", "--gemm",
                                str(_file(tmp_path, "b.csv", rows)), "--out", str(out))
    assert code == 0 and err == "", err
    # both rows run at ~742 TFLOP/s: they imply one efficiency (they would differ 4x if batch were ignored),
    # and under the step model's rate for it (x matmul_training_efficiency 0.85) both are 1/0.85 - 1 slow
    from perfmodel.calibrate.command import fit_gemm
    from perfmodel.calibrate.parsers import parse_gemm_csv

    effs, errs = fit_gemm(parse_gemm_csv(tmp_path / "b.csv"), "h100-sxm5-80gb", training_efficiency=1.0)
    assert errs.abs_err_pct.max() < 2.0  # 5.93 ms for 4 x 8192^3 against 4 x 1.48: 0.2% apart, and 5% of the rows above
    assert f"matmul_efficiency_max = {effs['matmul_efficiency_max']:.3f}" in stdout
