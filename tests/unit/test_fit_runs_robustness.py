"""The runs fit does not depend on how often a run is listed, nor on which of its two basins a single
start happens to reach (perfmodel/calibrate/fit_runs.py; reviewer's scale audit: the shipped runs listed
twice unlocked 8 more parameters, megatron-deepspeed's kernel rate moved 0.954 -> 1.127)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from perfmodel.calibrate import fit_runs as fr
from perfmodel.calibrate.parsers.runs_csv import read_runs_csv

RUNS = Path(__file__).resolve().parents[2] / "calibration" / "data" / "runs" / "calibration_runs.csv"


@pytest.fixture(scope="module")
def runs() -> pd.DataFrame:
    return read_runs_csv(RUNS)


def _distinct_megatron_rows(runs: pd.DataFrame, n: int) -> pd.DataFrame:
    rows = runs[runs.framework == "megatron-lm"].drop_duplicates(
        subset=["n_layers", "hidden_size", "gpu", "n_gpus", "tp", "pp", "dp", "micro_batch", "global_batch",
                "seq_len"])
    return rows.head(n).reset_index(drop=True)


def test_a_repeated_run_unlocks_no_parameter(runs):
    three = _distinct_megatron_rows(runs, 3)
    twice = pd.concat([three, three.assign(run_id=three.run_id + "-again")], ignore_index=True)
    assert len(twice) >= fr.MIN_ROWS_FRAMEWORK  # six rows, three configurations
    assert "megatron-lm.kernel_efficiency" not in fr.fit_runs(twice).params
    five = _distinct_megatron_rows(runs, fr.MIN_ROWS_FRAMEWORK)
    assert "megatron-lm.kernel_efficiency" in fr.fit_runs(five).params  # five configurations do


def test_an_unmeasured_copy_listed_first_does_not_hide_the_measured_one(runs):
    five = _distinct_megatron_rows(runs, fr.MIN_ROWS_FRAMEWORK)
    blank = five.assign(run_id=five.run_id + "-blank", iteration_time_s=np.nan, tokens_per_s_per_gpu=np.nan,
                        tflops_per_gpu=np.nan, mfu=np.nan, hfu=np.nan)
    assert "megatron-lm.kernel_efficiency" in fr.fit_runs(pd.concat([blank, five], ignore_index=True)).params


def test_first_of_each_configuration_keeps_one_row_per_configuration():
    inputs = {"tp": np.array([8, 8, 4, 8]), "pp": np.array([1, 1, 1, 1]), "seq_len": 4096.0}
    stack = np.array(["nemo", "nemo", "nemo", "megatron-lm"])
    first = fr._first_of_each_configuration(inputs, [stack], 4)
    assert first.tolist() == [True, False, True, True]


def test_the_fit_keeps_the_better_of_two_starts():
    """A residual with a shallow basin at the first start (an overhead of 12 ms) and the true minimum at
    ten times it: the fit returns the true one."""
    names = [("framework", "x", "p2p_overhead_s")]

    def residual(x):
        return np.array([100.0 * (x[0] - 0.012) * (x[0] - 0.1), 0.05 * (x[0] - 0.1)])

    one = fr.least_squares(residual, np.array([0.01]), bounds=([0.0], [1.0]), x_scale="jac", diff_step=1e-3)
    assert one.x[0] == pytest.approx(0.012, abs=2e-3)  # a single start stays in the shallow basin
    best = fr._least_squares_from_starts(residual, names, [0.01], [0.0], [1.0])
    assert best.x[0] == pytest.approx(0.1, abs=1e-3) and best.cost < one.cost
