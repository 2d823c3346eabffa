"""GEMM-timing and measured-runs CSV readers."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from perfmodel.calibrate.parsers import parse_gemm_csv, read_runs_csv
from perfmodel.calibrate.parsers.runs_csv import REQUIRED_COLUMNS, SCHEMA_COLUMNS
from perfmodel.errors import InputError

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "parsers"
needs_data = pytest.mark.skipif(not DATA.is_dir(), reason="shared data folder absent")


def test_gemm_upper_case_and_microseconds():
    df = parse_gemm_csv(FIXTURES / "gemm_ok.csv")
    assert df["m"].tolist() == [4096, 8192] and df["time_s"].tolist() == pytest.approx([2e-4, 1.6e-3])
    assert df["tflop_per_s"].iloc[0] == pytest.approx(2 * 4096**3 / 2e-4 / 1e12)


def test_gemm_milliseconds_and_extra_columns():
    df = parse_gemm_csv(FIXTURES / "gemm_ms.csv")
    assert df["time_s"].item() == pytest.approx(1e-5) and df["gpu"].item() == "h100"
    assert df["tflop_per_s"].item() == pytest.approx(2 * 1024**3 / 1e-5 / 1e12)


def test_gemm_missing_columns():
    with pytest.raises(InputError, match=r"gemm_missing_columns\.csv:1: .*\['k'\]"):
        parse_gemm_csv(FIXTURES / "gemm_missing_columns.csv")


def test_gemm_bad_cell_names_its_line():
    with pytest.raises(InputError, match=r"gemm_bad_cell\.csv:3: n: not a number: 'abc'"):
        parse_gemm_csv(FIXTURES / "gemm_bad_cell.csv")


def test_runs_missing_required_column(tmp_path):
    """Only the columns no row can be costed without are required: the layers, width, sequence length
    and GPU (and the run id). A file without its MLP width or global batch reads as blanks there
    (documented defaults); the reviewer's six-column CSV was refused for six columns the README fills."""
    df = read_runs_csv(FIXTURES / "runs_missing_columns.csv")  # no ffn_hidden_size, no global_batch
    assert df["ffn_hidden_size"].isna().all() and df["global_batch"].isna().all()
    path = tmp_path / "no_seq.csv"
    path.write_text("run_id,n_layers,hidden_size,n_gpus\nx-001,32,4096,8\n")
    with pytest.raises(InputError, match=r"no_seq\.csv:1: .*seq_len.*gpu"):
        read_runs_csv(path)


def test_runs_optional_columns_added(tmp_path):
    path = tmp_path / "runs.csv"
    row = {c: "1" for c in REQUIRED_COLUMNS} | {"run_id": "x-001", "gpu": "b200", "tp": "1",
                                                "framework": "torchtitan"}
    pd.DataFrame([row]).to_csv(path, index=False)
    df = read_runs_csv(path)
    assert list(df.columns) == SCHEMA_COLUMNS + ["_row_errors", "_truth_errors"]
    assert (df["_row_errors"] == "").all() and (df["_truth_errors"] == "").all()
    assert df["tp"].dtype == "int64" and df["mfu"].isna().all() and df["vpp"].isna().all()


@needs_data
def test_calibration_runs_csv():
    df = read_runs_csv(DATA / "runs" / "calibration_runs.csv")
    assert len(df) == 1532  # data/README.md: 1,532 measured training runs
    assert df["run_id"].is_unique and df["run_id"].str.startswith("hfpb-").mean() > 0.5
    assert df.loc[df["run_id"] == "sc21-t1-002", "tflops_per_gpu"].item() == 138
    usable = df.dropna(subset=["cp"])
    assert (usable["tp"] * usable["pp"] * usable["dp"] * usable["cp"] == usable["n_gpus"]).mean() > 0.9
    for col in ("n_layers", "hidden_size", "n_gpus", "tp", "pp", "dp", "global_batch"):
        assert pd.api.types.is_numeric_dtype(df[col]), col
