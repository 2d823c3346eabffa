"""The generic profile (a framework the model has no profile for, or a blank framework cell) runs at the
median kernel efficiency of the stacks a runs fit measured, not at the uncalibrated 1.0; where the fit saw
enough rows of unknown stacks, it fits the generic value itself."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from perfmodel.calibrate.fit_runs import fit_runs
from perfmodel.calibration_profile import Calibration, load_calibration
from perfmodel.validate import predict_runs

RUNS = Path(__file__).resolve().parents[2] / "calibration" / "data" / "runs" / "calibration_runs.csv"


@pytest.fixture(scope="module")
def runs() -> pd.DataFrame:
    d = pd.read_csv(RUNS)
    return d[d.run_id.str.startswith(("kwai", "bloom-chron", "mlm20", "sc21-t1"))].reset_index(drop=True)


def test_the_generic_kernel_efficiency_is_the_median_of_the_fitted_stacks(runs):
    fit = fit_runs(runs, Calibration())
    fitted = {k: v for k, v in fit.params.items() if k.endswith(".kernel_efficiency") and not k.startswith("generic.")}
    assert len(fitted) >= 2
    median = float(np.median(list(fitted.values())))
    assert fit.calibration.frameworks["generic"]["kernel_efficiency"] == pytest.approx(median)
    assert fit.params["generic.kernel_efficiency"] == pytest.approx(median)
    # an unknown stack and a blank framework cell are predicted with it
    row = runs.iloc[[0]].copy()
    unknown = predict_runs(row.assign(framework="some-new-stack"), fit.calibration).pred_tokens_per_s_per_gpu
    blank = predict_runs(row.assign(framework=np.nan), fit.calibration).pred_tokens_per_s_per_gpu
    uncalibrated = predict_runs(row.assign(framework="some-new-stack"),
                                Calibration(frameworks={**fit.calibration.frameworks, "generic": {}}))
    assert unknown.iloc[0] == pytest.approx(blank.iloc[0])
    assert unknown.iloc[0] != pytest.approx(uncalibrated.pred_tokens_per_s_per_gpu.iloc[0])


def test_rows_of_unknown_stacks_fit_the_generic_value_themselves(runs):
    x = runs.copy()
    x.loc[x.run_id.str.startswith("mlm20"), "framework"] = "colossalai"  # 8 rows: enough for a stack's fit
    fit = fit_runs(x, Calibration())
    kernel = {k: v for k, v in fit.params.items() if k.endswith(".kernel_efficiency") and not k.startswith("generic.")}
    assert "generic.kernel_efficiency" in fit.params
    assert fit.params["generic.kernel_efficiency"] != pytest.approx(float(np.median(list(kernel.values()))))


def test_the_shipped_profile_carries_the_median():
    shipped = load_calibration(None)
    own = [v["kernel_efficiency"] for k, v in shipped.frameworks.items() if k != "generic" and "kernel_efficiency" in v]
    assert shipped.framework("an-unknown-stack").kernel_efficiency == pytest.approx(float(np.median(own)))


def test_a_fit_on_a_shipped_base_takes_the_median_of_every_stack_it_writes(runs):
    """A user's runs of one stack refit that stack on top of the shipped profile: the generic value is the
    median of all the stacks the written profile calibrates, not that one stack's value."""
    base = load_calibration(None)
    fit = fit_runs(runs[runs.run_id.str.startswith("kwai")].reset_index(drop=True), base)
    written = fit.calibration.frameworks
    others = [v["kernel_efficiency"] for k, v in written.items() if k != "generic" and "kernel_efficiency" in v]
    assert len(others) == len([k for k, v in base.frameworks.items() if k != "generic" and "kernel_efficiency" in v])
    assert written["generic"]["kernel_efficiency"] == pytest.approx(float(np.median(others)))
    assert written["generic"]["kernel_efficiency"] != pytest.approx(written["megatron-kwai"]["kernel_efficiency"])
