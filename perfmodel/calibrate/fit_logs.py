"""Fit a stack's kernel efficiency to the iteration times of its own training logs.

A Megatron-family log that prints its arguments block states the whole configuration it ran
(``perfmodel.calibrate.log_config``) and, line after line, how long each iteration took. Each such
log is one measured point: its median iteration time (robust to the warm-up iterations and to
stragglers). Per framework with logs, one parameter is fitted: ``kernel_efficiency``, the multiplier
on every kernel rate (how well this stack, on this cluster, runs its kernels), bounded to
``fit_runs.FRAMEWORK_PARAMS``. Residual: r = log(predicted / measured iteration time);
``scipy.optimize.least_squares`` with a soft-L1 loss (scale 0.05), so that with several logs one
odd run does not drag the others. Everything else (network, overlaps, bubble) keeps its calibrated
value: a log's time is one number and identifies one parameter.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from perfmodel.calibration_profile import Calibration
from perfmodel.calibrate.fit_runs import FRAMEWORK_PARAMS
from perfmodel.estimate import build_inputs, check_config
from perfmodel.step import stack_inputs, step_costs

#: frameworks whose logs print Megatron's arguments block (the iteration-line format names them)
MEGATRON_LOG_FRAMEWORKS = ("megatron-lm", "megatron-kwai", "megatron-deepspeed")
#: soft-L1 scale on log(predicted / measured): about 5% error before the loss turns linear
LOSS_SCALE = 0.05


@dataclass(frozen=True)
class LogPoint:
    """One log's configuration and its measured median iteration time."""

    path: Path
    framework: str
    specs: tuple  # (ModelSpec, ClusterSpec, ParallelSpec, JobSpec)
    measured_iteration_time_s: float
    iterations: int
    overrides: dict = field(default_factory=dict)
    """step inputs the log's own flags set (``log_config.megatron_log_overrides``)"""


def measured_iteration_time_s(log: pd.DataFrame, global_batch: int, seq_len: int, n_gpus: int) -> float:
    """Median logged iteration time; from tokens/s/GPU where a format logs only that. NaN if neither."""
    times = log["iteration_time_s"].dropna()
    if len(times):
        return float(times.median())
    tokens = log["tokens_per_s_per_gpu"].dropna()
    if len(tokens):
        return float(global_batch * seq_len / (float(tokens.median()) * n_gpus))
    return float("nan")


def _inputs(points: list[LogPoint], cal: Calibration) -> dict[str, np.ndarray]:
    rows = []
    for p in points:
        check_config(*p.specs)
        rows.append({**build_inputs(*p.specs, cal), **p.overrides})
    return stack_inputs(rows)


def predicted_iteration_time_s(points: list[LogPoint], cal: Calibration) -> np.ndarray:
    if not points:
        return np.zeros(0)
    return step_costs(_inputs(points, cal))["iteration_time_s"]


def fit_logs(points: list[LogPoint], cal: Calibration) -> tuple[Calibration, pd.DataFrame]:
    """Each framework's kernel_efficiency fitted to its logs; the calibration with them and a table
    of every log: measured, predicted before and after, errors (%), the fitted value and whether it
    was applied. A fit that ends on a bound of kernel_efficiency is not applied: the logs' time is
    not a matter of kernel speed (a wrong --gpu or network, or a cost the model lacks), and writing
    the bound would skew every estimate of that stack."""
    lo, hi, _ = FRAMEWORK_PARAMS["kernel_efficiency"]
    before = predicted_iteration_time_s(points, cal)
    fitted: dict[str, dict[str, float]] = {}
    for fw in sorted({p.framework for p in points}):
        idx = [i for i, p in enumerate(points) if p.framework == fw]
        x = _inputs([points[i] for i in idx], cal)
        meas = np.array([points[i].measured_iteration_time_s for i in idx])
        start = float(np.clip(x["kernel_efficiency"][0], lo, hi))

        def residual(k, x=x, meas=meas):
            return np.log(step_costs({**x, "kernel_efficiency": np.full_like(meas, k[0])})["iteration_time_s"] / meas)

        res = least_squares(residual, [start], bounds=([lo], [hi]), loss="soft_l1", f_scale=LOSS_SCALE)
        fitted[fw] = {"kernel_efficiency": float(res.x[0])}
    def at_bound(fw: str) -> bool:
        return not lo + 1e-6 < fitted[fw]["kernel_efficiency"] < hi - 1e-6

    frameworks = {**cal.frameworks}
    for fw, vals in fitted.items():
        if not at_bound(fw):
            frameworks[fw] = {**frameworks.get(fw, {}), **vals}
    cal = cal.model_copy(update={"frameworks": frameworks})
    after = predicted_iteration_time_s(points, cal)
    meas = np.array([p.measured_iteration_time_s for p in points])
    table = pd.DataFrame({
        "path": [str(p.path) for p in points],
        "framework": [p.framework for p in points],
        "iterations": [p.iterations for p in points],
        "measured_iteration_time_s": meas,
        "predicted_before_s": before,
        "predicted_after_s": after,
        "err_before_pct": 100.0 * (before / meas - 1.0),
        "err_after_pct": 100.0 * (after / meas - 1.0),
        "kernel_efficiency": [fitted[p.framework]["kernel_efficiency"] for p in points],
        "at_bound": [at_bound(p.framework) for p in points],
        "applied": [not at_bound(p.framework) for p in points],
        "fits_memory": [bool(f) for f in step_costs(_inputs(points, cal))["fits"]] if points else [],
    })
    return cal, table
