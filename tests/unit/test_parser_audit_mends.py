"""Three input-audit findings about nccl-tests outputs and training logs, each now one ``path:line:``
error naming the field and the rule (InputError; the CLI's exit 2):

- a data row whose ``type`` is not an nccl-tests data type was accepted, its size = count x type size
  check skipped;
- a row's error (time vs algbw, size vs count, redop) named the table's first row, not the row's own line;
- a Megatron arguments block printing both ``bf16 ... True`` and ``fp16 ... True`` was read as bf16
  (now refused by the switch check that maps the block to the run's configuration, calibrate/log_config.py).
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from perfmodel.calibrate.parsers.nccl_tests import parse_nccl_tests, parse_nccl_tests_all
from perfmodel.calibrate.parsers.training_logs import parse_training_log
from perfmodel.cli import app
from perfmodel.errors import InputError

PREAMBLE = [
    "# nThread 1 nGpus 1 minBytes 1048576 maxBytes 4194304 step: 2(factor) warmup iters: 5 iters: 20",
    "#",
    "#                                                              out-of-place                       in-place",
    "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw"
    " #wrong",
    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)",
]
FIRST_ROW_LINE = len(PREAMBLE) + 1  # 1-based line of the first data row
SIZES = (1048576, 2097152, 4194304, 8388608)
TYPE_BYTES = {"float": 4, "bfloat16": 2, "half": 2, "int8": 1, "double": 8, "int64": 8, "f8e4m3": 1}


def row(size: int, *, dtype: str = "float", count: int | None = None, redop: str = "sum", time_us: float = 40.0,
        algbw: float | None = None, wrong: int = 0) -> str:
    """An all_reduce row whose count (size / type size) and algbw (size / time) agree unless overridden."""
    count = size // TYPE_BYTES.get(dtype, 4) if count is None else count
    bw = size / (time_us * 1e3)
    shown = bw if algbw is None else algbw
    busbw = 2 * 7 / 8 * bw
    return (f"{size:12d}  {count:12d}  {dtype:>8}  {redop:>6}  -1  {time_us:7.2f}  {shown:6.2f}  {busbw:6.2f}  "
            f"{wrong:5d}  {time_us:7.2f}  {bw:6.2f}  {busbw:6.2f}  0")


def nccl_file(tmp_path: Path, rows: list[str], name: str = "all_reduce_perf.txt") -> Path:
    path = tmp_path / name
    path.write_text("\n".join([*PREAMBLE, *rows, "# Out of bounds values : 0 OK", "# Avg bus bandwidth    : 1.0"])
                    + "\n")
    return path


def good_rows(**kw) -> list[str]:
    return [row(s, **kw) for s in SIZES]


# --- 1. nccl-tests: a type nccl-tests does not print is refused at its row --------------------------------

def test_nccl_unknown_type_in_one_row_is_refused_at_that_row(tmp_path):
    rows = good_rows()
    rows[2] = row(SIZES[2], dtype="bogus")
    path = nccl_file(tmp_path, rows)
    with pytest.raises(InputError) as exc:
        parse_nccl_tests(path)
    assert str(exc.value).startswith(f"{path}:{FIRST_ROW_LINE + 2}: type: 'bogus' is not an nccl-tests data type")
    assert exc.value.field == "type" and "float" in exc.value.rule and "bfloat16" in exc.value.rule


def test_nccl_table_of_unknown_type_is_refused_not_left_unchecked(tmp_path):
    # every row 'bogus': before, the size = count x type size check was skipped and the table fitted
    path = nccl_file(tmp_path, good_rows(dtype="bogus"))
    with pytest.raises(InputError, match=rf"{re.escape(str(path))}:{FIRST_ROW_LINE}: type: 'bogus' is not an "
                                         r"nccl-tests data type \(known: "):
        parse_nccl_tests(path)


@pytest.mark.parametrize("dtype", sorted(TYPE_BYTES))
def test_nccl_known_types_still_parse(tmp_path, dtype):
    r = parse_nccl_tests(nccl_file(tmp_path, good_rows(dtype=dtype)))
    assert r.op == "all_reduce" and len(r.rows) == len(SIZES) and r.rows["dtype"].eq(dtype).all()
    assert r.first_line == FIRST_ROW_LINE


# --- 2. nccl-tests: a row's error names the row's own line --------------------------------------------

@pytest.mark.parametrize("i, bad, message", [
    (3, {"algbw": 999.99}, r"out-of-place time: .*time and algbw disagree"),  # time and algbw disagree
    (2, {"count": SIZES[2] // 4 + 1}, r"size: size is not count x type size"),  # size and count disagree
])
def test_nccl_row_error_names_its_own_row(tmp_path, i, bad, message):
    rows = good_rows()
    rows[i] = row(SIZES[i], **bad)
    path = nccl_file(tmp_path, rows)
    with pytest.raises(InputError, match=rf"^{re.escape(str(path))}:{FIRST_ROW_LINE + i}: {message}"):
        parse_nccl_tests(path)


def test_nccl_redop_none_in_all_reduce_names_its_own_row(tmp_path):
    rows = good_rows()
    rows[1] = row(SIZES[1], redop="none")
    path = nccl_file(tmp_path, rows)
    with pytest.raises(InputError, match=rf"^{re.escape(str(path))}:{FIRST_ROW_LINE + 1}: redop: 'none'"):
        parse_nccl_tests(path)


def test_nccl_per_rank_ratio_change_names_its_own_row(tmp_path):
    # all_gather prints count per rank: size = count x 4 B x 8 ranks, but one row says 4 ranks
    rows = [row(s, count=s // 4 // 8, redop="none") for s in SIZES]
    rows[3] = row(SIZES[3], count=SIZES[3] // 4 // 4, redop="none")
    path = nccl_file(tmp_path, rows, name="all_gather_perf.txt")
    with pytest.raises(InputError, match=rf"^{re.escape(str(path))}:{FIRST_ROW_LINE + 3}: size: .*same whole rank "
                                         rf"count.*line {FIRST_ROW_LINE}\)"):
        parse_nccl_tests(path)


def test_nccl_row_line_survives_dropped_wrong_rows(tmp_path):
    # the first row fails nccl-tests' own check (#wrong > 0) and is dropped: later rows keep their lines
    rows = good_rows()
    rows[0] = row(SIZES[0], wrong=3)
    rows[2] = row(SIZES[2], algbw=999.99)
    path = nccl_file(tmp_path, rows)
    with pytest.raises(InputError, match=rf"^{re.escape(str(path))}:{FIRST_ROW_LINE + 2}: out-of-place time"):
        parse_nccl_tests(path)


def test_nccl_second_table_error_names_its_own_row(tmp_path):
    second = good_rows()
    second[1] = row(SIZES[1], algbw=999.99)
    path = tmp_path / "all_reduce_perf.txt"
    trailer = "# Avg bus bandwidth    : 1.0"
    text = [*PREAMBLE, *good_rows(), trailer, *PREAMBLE, *second, trailer]
    path.write_text("\n".join(text) + "\n")
    bad_line = 2 * len(PREAMBLE) + len(SIZES) + 1 + 2
    with pytest.raises(InputError, match=rf"^{re.escape(str(path))}:{bad_line}: out-of-place time"):
        parse_nccl_tests_all(path)


def test_nccl_valid_table_still_parses(tmp_path):
    results = parse_nccl_tests_all(nccl_file(tmp_path, good_rows()))
    assert len(results) == 1 and results[0].op == "all_reduce" and list(results[0].rows["size_bytes"]) == list(SIZES)


# --- 3. training logs: bf16 and fp16 both True in the arguments block ---------------------------------

ITERATION = ("[2026-11-30 01:0{i}:00] iteration        {i}/     100 | consumed samples:          {s} | "
             "elapsed time per iteration (ms): 5905.2 | learning rate: 3.000000E-04 | global batch size:   128 | "
             "lm loss: 9.1E+00 |")


def megatron_log(tmp_path: Path, bf16: str, fp16: str, prefix: str = "") -> Path:
    lines = [
        "using world size: 8, data-parallel size: 8",
        "------------------------ arguments ------------------------",
        "  accumulate_allreduce_grads_in_fp32 .............. True",
        f"  bf16 ............................................ {bf16}",
        "  ffn_hidden_size ................................. 11008",
        f"  fp16 ............................................ {fp16}",
        "  hidden_size ..................................... 4096",
        "-------------------- end of arguments ---------------------",
        *(ITERATION.format(i=i, s=128 * i) for i in range(1, 4)),
    ]
    path = tmp_path / "train.log"
    path.write_text("\n".join(prefix + ln for ln in lines) + "\n")
    return path


@pytest.mark.parametrize("prefix", ["", "[rank0]: "])
def test_log_with_bf16_and_fp16_both_true_is_refused(tmp_path, prefix):
    """Refused where the arguments block is mapped to the run's configuration (log_config's switch check)."""
    path = megatron_log(tmp_path, "True", "True", prefix)
    res = CliRunner().invoke(app, ["calibrate", "--gpu", "a100-sxm4-80gb", "--out", str(tmp_path / "c.yaml"),
                                   "--log", str(path)])
    line = _one_error_line(res)
    assert line.startswith(f"error: {path}:6: fp16: ") and f"bf16 True ({path}:4)" in line and "contradictory" in line


@pytest.mark.parametrize(("bf16", "fp16"), [("True", "False"), ("False", "True"), ("False", "False")])
def test_log_with_one_precision_switch_still_parses(tmp_path, bf16, fp16):
    log = parse_training_log(megatron_log(tmp_path, bf16, fp16))
    assert list(log["iteration"]) == [1, 2, 3] and log["framework"].eq("megatron-lm").all()


# --- the CLI: one error line, exit 2 ------------------------------------------------------------------

def _one_error_line(res) -> str:
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert res.exit_code == 2, res.output
    assert len(lines) == 1 and lines[0].startswith("error:") and "Traceback" not in res.output, res.output
    return lines[0]


def test_cli_refuses_unknown_nccl_type_with_exit_2(tmp_path):
    path = nccl_file(tmp_path, good_rows(dtype="bogus"))
    out = tmp_path / "c.yaml"
    res = CliRunner().invoke(app, ["calibrate", "--gpu", "h100-sxm5-80gb", "--gpus-per-node", "8", "--out", str(out),
                                   "--nccl-tests", str(path)])
    assert f"{path}:{FIRST_ROW_LINE}: type: " in _one_error_line(res) and not out.exists()


def test_cli_refuses_both_precision_switches_with_exit_2(tmp_path):
    path = megatron_log(tmp_path, "True", "True")
    out = tmp_path / "c.yaml"
    res = CliRunner().invoke(app, ["calibrate", "--gpu", "a100-sxm4-80gb", "--out", str(out), "--log", str(path)])
    line = _one_error_line(res)
    assert f"{path}:6: fp16: " in line and "bf16" in line and not out.exists()
