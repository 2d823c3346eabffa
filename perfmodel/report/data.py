"""What a report shows, computed once: the search, its TP x PP map, a scaling curve, and the
predictions for measured runs. Plots and HTML only read a ``ReportData``."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from perfmodel.calibration_profile import DEFAULT_PROFILE_PATH, Calibration, load_calibration
from perfmodel.search.engine import BEST_COLUMNS, SearchResult, df_all_best, run_search
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
    """Every GPU count of the scaling curve (``scaling_frame``): the fastest configuration (n_gpus,
    tokens_per_s, tokens_per_s_per_gpu, mfu, ...), or a status and the reason why it has none."""
    runs: pd.DataFrame | None = None
    """Measured vs predicted tokens/s/GPU per run (``runs_frame``), when runs were given."""
    runs_source: str | None = None

    @property
    def top_candidates(self) -> pd.DataFrame:
        return self.result.candidates.head(self.top)


def default_scaling_gpus(n_gpus: int) -> list[int]:
    """gpus/8 .. 2 x gpus in powers of two (n/8, n/4, n/2, n, 2n), those that are whole numbers. A count
    that is not a whole number of nodes is costed as any is: its last node part-used."""
    return sorted(n_gpus * f // 8 for f in (1, 2, 4, 8, 16) if n_gpus * f % 8 == 0)


#: ``scaling_frame``'s columns: ``df_all_best``'s, then why a count has no configuration
SCALING_COLUMNS = (*BEST_COLUMNS, "status", "reason")
SCALING_INTS = ("n_gpus", "tp", "pp", "dp", "cp", "vpp", "micro_batch", "zero_stage")


def scaling_frame(result: SearchResult) -> pd.DataFrame:
    """One row per GPU count searched, ascending: the fastest feasible configuration (``df_all_best``,
    status ``ok``), or, with blank metrics, ``invalid`` (no structurally valid configuration; a factor of the
    count no parallel size can take, else the rules most configurations were rejected for) or ``no fit``
    (none fits in memory; the least any needs)."""
    best = df_all_best(result.evaluated).set_index("n_gpus")
    rows = []
    for ev in result.evaluated:
        if ev.n_gpus in best.index:
            rows.append({"n_gpus": ev.n_gpus, **best.loc[ev.n_gpus].to_dict(), "status": "ok", "reason": ""})
        elif ev.n_valid == 0:
            why = result.no_layout_reason(ev)
            rows.append({"n_gpus": ev.n_gpus, "status": "invalid", "reason": "no structurally valid configuration"
                         + (f" ({why})" if why else "")})
        else:
            rows.append({"n_gpus": ev.n_gpus, "status": "no fit", "reason": "nothing fits in memory (the least of "
                         f"{ev.n_valid:,} configurations needs {ev.least_memory_gib:.1f} GiB per GPU)"})
    frame = pd.DataFrame(rows, columns=SCALING_COLUMNS).sort_values("n_gpus", kind="stable").reset_index(drop=True)
    return frame.astype({k: "Int64" for k in SCALING_INTS})


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
    table = table.reindex(index=all_pp, columns=all_tp).astype(float)
    # the (pp, tp) cells with a structurally valid configuration: a blank one of them has none that fits
    table.attrs["valid"] = sorted(set(zip(ev.configs["pp"].tolist(), ev.configs["tp"].tolist())))
    return table


def runs_frame(runs: pd.DataFrame, calibration: Calibration) -> pd.DataFrame:
    """Measured vs predicted tokens/s/GPU for every run, with its status and reason; ``scored``: the
    run was predicted and has a measured throughput (the runs the error statistics cover)."""
    from perfmodel.validate import measured_tokens_per_s_per_gpu, predict_runs, run_sources

    pred = predict_runs(runs, calibration)
    measured = measured_tokens_per_s_per_gpu(runs)
    out = pd.DataFrame({
        "run_id": runs["run_id"].astype(str).to_numpy(),
        "source": run_sources(runs).to_numpy(),
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
    # a predicted run left out of the statistics says why, as the page counts it
    unmeasured = (out["status"] == "ok") & ~out["scored"] & (out["reason"] == "")
    out.loc[unmeasured, "reason"] = "not scored: no measured throughput (tokens/s, step time, TFLOP/s or MFU)"
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
    counts = list(scaling_gpus) if scaling_gpus else default_scaling_gpus(cluster.n_gpus)
    scaling = scaling_frame(run_search(model, cluster, job, cal, gpu_counts=counts, top=1))
    return ReportData(
        model=model, cluster=cluster, job=job, calibration=cal, calibration_source=source,
        result=result, top=top, heatmap=tp_pp_heatmap(result), scaling=scaling,
        runs=runs_frame(runs, cal) if runs is not None else None, runs_source=runs_source,
    )
