"""`perfmodel validate` bad input: exit 2 with one `error:` line naming what is wrong, no traceback."""
from __future__ import annotations

import pandas as pd
from typer.testing import CliRunner

from perfmodel.calibrate.parsers.runs_csv import SCHEMA_COLUMNS
from perfmodel.cli import app

runner = CliRunner()

ROW = {
    "run_id": "t-001", "n_layers": "32", "hidden_size": "4096", "ffn_hidden_size": "11008", "n_heads": "32",
    "n_kv_heads": "32", "vocab_size": "32000", "seq_len": "4096", "mlp": "swiglu", "gpu": "h100-sxm5-80gb",
    "n_gpus": "8", "tp": "1", "pp": "1", "dp": "8", "global_batch": "128", "framework": "megatron-lm",
}


def write_runs(path, rows):
    df = pd.DataFrame([{c: r.get(c, "") for c in SCHEMA_COLUMNS} for r in rows])
    df.to_csv(path, index=False)
    return path


def assert_one_error_line(res, *words):
    assert res.exit_code == 2, (res.exit_code, res.stdout, res.stderr, repr(res.exception))
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("error:")
    for w in words:
        assert w in lines[0]
    assert "Traceback" not in res.stderr + res.stdout


def test_small_runs_csv_round_trip(tmp_path):
    src = write_runs(tmp_path / "runs.csv", [ROW, dict(ROW, run_id="t-002", tp="3", dp="8")])
    out = tmp_path / "pred.csv"
    res = runner.invoke(app, ["validate", str(src), "--out", str(out)])
    assert res.exit_code == 0, res.stderr
    pred = pd.read_csv(out)
    assert pred["run_id"].tolist() == ["t-001", "t-002"]
    assert pred["status"].tolist() == ["ok", "invalid"]  # row 2: tp*pp*dp != n_gpus and tp !| heads
    assert pred.loc[1, "reason"].split(":")[0] in ("tp", "dp")  # perfmodel.rules: GPUS is about dp


def test_missing_required_column(tmp_path):
    src = tmp_path / "runs.csv"
    src.write_text("a,b\n1,2\n")
    res = runner.invoke(app, ["validate", str(src), "--out", str(tmp_path / "p.csv")])
    assert_one_error_line(res, "run_id")


def test_non_numeric_cell_makes_that_row_invalid(tmp_path):
    """One bad cell does not reject the file: the row is 'invalid' with the cell named (CONTRACT)."""
    import pandas as pd

    src = write_runs(tmp_path / "runs.csv", [dict(ROW, tp="abc"), ROW])
    out = tmp_path / "p.csv"
    runner.invoke(app, ["validate", str(src), "--out", str(out)])
    pred = pd.read_csv(out)
    assert list(pred["status"]) == ["invalid", "ok"]
    assert "tp" in pred["reason"].iloc[0] and "abc" in pred["reason"].iloc[0]


def test_empty_file(tmp_path):
    src = tmp_path / "runs.csv"
    src.write_text("")
    res = runner.invoke(app, ["validate", str(src), "--out", str(tmp_path / "p.csv")])
    assert_one_error_line(res)


def test_missing_runs_csv_file(tmp_path):
    res = runner.invoke(app, ["validate", str(tmp_path / "nope.csv"), "--out", str(tmp_path / "p.csv")])
    assert_one_error_line(res, "nope.csv")


def test_directory_as_runs_csv(tmp_path):
    res = runner.invoke(app, ["validate", str(tmp_path), "--out", str(tmp_path / "p.csv")])
    assert_one_error_line(res)
