"""What a report shows, computed once: the search, its TP x PP map, a scaling curve, and the
predictions for measured runs. Plots and HTML only read a ``ReportData``."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from perfmodel.calibration_profile import DEFAULT_PROFILE_PATH, Calibration, load_calibration
from perfmodel.search.engine import SearchResult, df_all_best, run_search
from perfmodel.specs import ClusterSpec, JobSpec, ModelSpec


@dataclass(frozen=True)
class ReportData:
    """Everything one report shows."""

    model: ModelSpec
    cluster: ClusterSpec
    job: JobSpec
    calibration: Calibration
    calibration_source: str
    """Path of the calibrated profile, or a note that the shipped default was used."""
    result: SearchResult
    """The search on ``cluster``: ``result.candidates`` is every feasible candidate, best first."""
    top: int
    """How many candidates the table and the breakdown plots show."""
    heatmap: pd.DataFrame
    """Best feasible tokens/s/GPU per (pp row, tp column); NaN where nothing fits or is valid."""
    scaling: pd.DataFrame
    """The fastest configuration per GPU count: n_gpus, tokens_per_s, tokens_per_s_per_gpu, mfu, ..."""
    runs: pd.DataFrame | None = None
    """Measured vs predicted tokens/s/GPU per run (``runs_frame``), when runs were given."""
    runs_source: str | None = None

    @property
    def top_candidates(self) -> pd.DataFrame:
        return self.result.candidates.head(self.top)


def default_scaling_gpus(n_gpus: int, gpus_per_node: int) -> list[int]:
    """n/8 .. 2n in powers of two: whole nodes, and the job's own count."""
    counts = {n_gpus * f // 8 for f in (1, 2, 4, 16)}
    return sorted({c for c in counts if c >= gpus_per_node and c % gpus_per_node == 0} | {n_gpus})


def tp_pp_heatmap(result: SearchResult) -> pd.DataFrame:
    """Best feasible tokens/s/GPU for each (tp, pp) of the searched GPU count."""
    ev = result.evaluated[0]
    fits = ev.metrics["fits"]
    frame = pd.DataFrame({
        "tp": ev.configs["tp"][fits], "pp": ev.configs["pp"][fits],
        "tokens_per_s_per_gpu": ev.metrics["tokens_per_s_per_gpu"][fits],
    })
    all_tp = np.unique(ev.configs["tp"]) if ev.configs["tp"].size else np.array([1])
    all_pp = np.unique(ev.configs["pp"]) if ev.configs["pp"].size else np.array([1])
    table = frame.pivot_table(index="pp", columns="tp", values="tokens_per_s_per_gpu", aggfunc="max")
    return table.reindex(index=all_pp, columns=all_tp).astype(float)


def runs_frame(runs: pd.DataFrame, calibration: Calibration) -> pd.DataFrame:
    """Measured vs predicted tokens/s/GPU for every run, with its status and reason; ``scored``: the
    run was predicted and has a measured throughput (the runs the error statistics cover)."""
    from perfmodel.validate import measured_tokens_per_s_per_gpu, predict_runs, source_slug

    pred = predict_runs(runs, calibration)
    measured = measured_tokens_per_s_per_gpu(runs)
    out = pd.DataFrame({
        "run_id": runs["run_id"].astype(str).to_numpy(),
        "source": source_slug(runs["run_id"]).to_numpy(),
        "model_name": runs.get("model_name", pd.Series([""] * len(runs))).astype(str).to_numpy(),
        "gpu": runs["gpu"].astype(str).to_numpy(),
        "n_gpus": runs["n_gpus"].to_numpy(),
        "status": pred["status"].to_numpy(),
        "reason": pred["reason"].fillna("").astype(str).to_numpy(),
        "measured_tokens_per_s_per_gpu": measured,
        "pred_tokens_per_s_per_gpu": pred["pred_tokens_per_s_per_gpu"].to_numpy(),
    })
    out["error_pct"] = (out["pred_tokens_per_s_per_gpu"] / out["measured_tokens_per_s_per_gpu"] - 1.0) * 100.0
    out["scored"] = (out["status"] == "ok") & np.isfinite(out["error_pct"]) & (out["measured_tokens_per_s_per_gpu"] > 0)
    return out


def collect(
    model: ModelSpec,
    cluster: ClusterSpec,
    job: JobSpec,
    *,
    calibration_path: str | Path | None = None,
    top: int = 5,
    runs: pd.DataFrame | None = None,
    runs_source: str | None = None,
    scaling_gpus: Sequence[int] | None = None,
) -> ReportData:
    """Search the job, map TP x PP, sweep the GPU count and predict ``runs`` (if any)."""
    cal = load_calibration(calibration_path)
    source = str(calibration_path) if calibration_path is not None else (
        f"shipped default ({DEFAULT_PROFILE_PATH.parent.name}/{DEFAULT_PROFILE_PATH.name})"
        if DEFAULT_PROFILE_PATH.is_file() else "none (built-in constants)")
    result = run_search(model, cluster, job, cal, top=None)
    counts = list(scaling_gpus) if scaling_gpus else default_scaling_gpus(cluster.n_gpus, cluster.gpus_per_node)
    scaling = df_all_best(run_search(model, cluster, job, cal, gpu_counts=counts, top=1).evaluated)
    return ReportData(
        model=model, cluster=cluster, job=job, calibration=cal, calibration_source=source,
        result=result, top=top, heatmap=tp_pp_heatmap(result), scaling=scaling,
        runs=runs_frame(runs, cal) if runs is not None else None, runs_source=runs_source,
    )
