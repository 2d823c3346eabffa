"""Predict the measured runs of shared/data/runs/calibration_runs.csv.

Checks the CONTRACT of `validate` (one row per input row, in order, the PRED_CSV columns, only
configuration columns read). Accuracy is printed, not asserted (the model owner adds that test).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from perfmodel.calibrate.parsers.runs_csv import read_runs_csv
from perfmodel.catalog import load_gpu
from perfmodel.cli import app
from perfmodel.validate import PRED_COLUMNS, error_table, predict_runs

RUNS_CSV = Path(__file__).resolve().parents[3] / "shared" / "data" / "runs" / "calibration_runs.csv"
MEASURED = ["iteration_time_s", "tokens_per_s_per_gpu", "tflops_per_gpu", "mfu", "hfu"]
CONTRACT_COLUMNS = ["run_id", "status", "reason", "pred_iteration_time_s", "pred_tokens_per_s_per_gpu",
                    "pred_mfu", "pred_memory_gib", "fits"]

pytestmark = pytest.mark.skipif(not RUNS_CSV.is_file(), reason=f"{RUNS_CSV} not present")


@pytest.fixture(scope="module")
def runs() -> pd.DataFrame:
    return read_runs_csv(RUNS_CSV)


@pytest.fixture(scope="module")
def pred(runs) -> pd.DataFrame:
    return predict_runs(runs)


def test_contract_columns():
    assert PRED_COLUMNS == CONTRACT_COLUMNS


def test_one_row_per_input_row_in_order(runs, pred):
    assert len(pred) == len(runs)
    assert list(pred.columns) == CONTRACT_COLUMNS
    assert pred["run_id"].tolist() == runs["run_id"].tolist()


def test_most_rows_are_predicted(runs, pred):
    ok = (pred["status"] == "ok").mean()
    print(f"\nstatus counts: {pred['status'].value_counts().to_dict()}, ok fraction {ok:.3f}")
    assert ok >= 0.95
    assert set(pred["status"]) <= {"ok", "unsupported", "invalid"}
    # every non-ok row says why, naming a field ("field: rule")
    not_ok = pred[pred["status"] != "ok"]
    assert (not_ok["reason"].str.len() > 0).all()
    assert not_ok["reason"].str.contains(":").all()


def test_ok_rows_have_finite_positive_predictions(runs, pred):
    ok = pred[pred["status"] == "ok"]
    for col in ("pred_iteration_time_s", "pred_tokens_per_s_per_gpu", "pred_mfu", "pred_memory_gib"):
        values = ok[col].to_numpy(dtype=float)
        assert np.isfinite(values).all(), col
        assert (values > 0).all(), col
    # MFU is counted against the dense bf16 peak: it stays below the peak of the GEMM precision
    # used (fp8 / fp4 recipes may exceed 1 against bf16)
    for i in ok.index:
        gpu = load_gpu(runs.at[i, "gpu"])
        precision = runs.at[i, "precision"]
        precision = precision if isinstance(precision, str) else "bf16"
        ratio = gpu.peak_flop_per_s(precision) / gpu.peak_flop_per_s("bf16")
        assert ok.at[i, "pred_mfu"] < ratio, (runs.at[i, "run_id"], precision, ok.at[i, "pred_mfu"])
    assert pred.loc[pred["status"] != "ok", "pred_tokens_per_s_per_gpu"].isna().all()


def test_measured_columns_are_never_read(runs, pred):
    blank = runs.copy()
    for col in MEASURED:
        blank[col] = np.nan
    again = predict_runs(blank)
    pd.testing.assert_frame_equal(pred, again)
    # and scrambling them (not just blanking) changes nothing either
    rng = np.random.default_rng(0)
    scrambled = runs.copy()
    for col in MEASURED:
        scrambled[col] = rng.uniform(1e-3, 1e6, len(runs))
    pd.testing.assert_frame_equal(pred, predict_runs(scrambled))


def test_row_order_independence(runs, pred):
    """Each row's prediction depends on that row only: shuffling rows permutes the predictions."""
    perm = np.random.default_rng(1).permutation(len(runs))
    shuffled = predict_runs(runs.iloc[perm].reset_index(drop=True))
    expected = pred.iloc[perm].reset_index(drop=True)
    pd.testing.assert_frame_equal(shuffled, expected)


def test_print_accuracy(runs, pred):
    """No threshold here: print the current error so regressions are visible in -s output."""
    table, summary = error_table(runs, pred)
    with pd.option_context("display.width", 160, "display.max_rows", 200):
        print("\n" + table.round(1).to_string())
    print(summary)
    assert summary["rows"] == len(runs)
    assert summary["scored"] > 0
    assert np.isfinite(summary["mape_pct"])


def test_validate_cli_writes_contract_csv(tmp_path, runs):
    out = tmp_path / "sub" / "pred.csv"
    res = CliRunner().invoke(app, ["validate", str(RUNS_CSV), "--out", str(out)])
    assert res.exit_code == 0, res.stderr
    assert "MAPE" in res.stdout
    written = pd.read_csv(out)
    assert list(written.columns) == CONTRACT_COLUMNS
    assert written["run_id"].astype(str).tolist() == runs["run_id"].astype(str).tolist()
    ok = written["status"] == "ok"
    assert ok.mean() >= 0.95
    assert np.isfinite(written.loc[ok, "pred_tokens_per_s_per_gpu"]).all()


def test_validate_cli_on_a_subset_with_blank_optional_cells(tmp_path):
    """Blank optional cells get defaults, never an error (CONTRACT)."""
    raw = pd.read_csv(RUNS_CSV, dtype=str, keep_default_na=False).head(40)
    for col in ("recompute", "precision", "vpp", "sp", "micro_batch", "zero_stage", "gpus_per_node",
                "scale_out_gbit_per_s_per_node", "network", "vocab_size", "n_kv_heads", "tied_embeddings",
                *MEASURED):
        raw[col] = ""
    raw["framework"] = "a-framework-nobody-knows"
    src = tmp_path / "runs.csv"
    raw.to_csv(src, index=False)
    out = tmp_path / "pred.csv"
    res = CliRunner().invoke(app, ["validate", str(src), "--out", str(out)])
    assert res.exit_code == 0, res.stderr
    written = pd.read_csv(out)
    assert len(written) == 40
    assert set(written["status"]) <= {"ok", "unsupported", "invalid"}
