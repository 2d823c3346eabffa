"""The shape of the configuration space: best throughput per TP x PP, and how the best
configuration scales with the GPU count."""
from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from perfmodel.report.colors import HEATMAP_CMAP, SERIES
from perfmodel.report.figures import layout_label, new_figure


def heatmap_figure(heatmap: pd.DataFrame, best_tp: int | None = None, best_pp: int | None = None) -> Figure:
    """Best feasible tokens/s/GPU for each (tp, pp); grey where nothing fits or is valid."""
    n_pp, n_tp = heatmap.shape
    fig, (ax,) = new_figure(max(6.0, 1.1 * n_tp + 3.0), max(3.8, 0.55 * n_pp + 1.8))
    ax.grid(False)
    values = heatmap.to_numpy(dtype=float)
    masked = np.ma.masked_invalid(values)
    cmap = _cmap()
    image = ax.imshow(masked, cmap=cmap, aspect="auto", origin="lower")
    finite = values[np.isfinite(values)]
    mid = (finite.min() + finite.max()) / 2 if finite.size else 0.0
    valid = {(int(pp), int(tp)) for pp, tp in heatmap.attrs.get("valid", [])}
    for i in range(n_pp):
        for j in range(n_tp):
            v = values[i, j]
            blank = "no fit" if (int(heatmap.index[i]), int(heatmap.columns[j])) in valid else "-"
            text = f"{v:,.0f}" if np.isfinite(v) else blank
            color = "white" if np.isfinite(v) and v < mid else "black"
            ax.text(j, i, text, ha="center", va="center", fontsize=8, color=color)
    ax.set_xticks(range(n_tp), [str(int(t)) for t in heatmap.columns])
    ax.set_yticks(range(n_pp), [str(int(p)) for p in heatmap.index])
    ax.set_xlabel("tensor-parallel size (tp)")
    ax.set_ylabel("pipeline-parallel size (pp)")
    ax.set_title("Best tokens/s per GPU for each TP x PP (other axes searched)\n"
                 "'no fit': none fits in memory; '-': no valid layout", loc="left", fontsize=10)
    if best_tp is not None and best_pp is not None and best_tp in heatmap.columns and best_pp in heatmap.index:
        j, i = list(heatmap.columns).index(best_tp), list(heatmap.index).index(best_pp)
        ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor=SERIES["capacity"], linewidth=2.5))
    fig.colorbar(image, ax=ax, label="best tokens/s per GPU")
    return fig


def _cmap():
    import matplotlib

    return matplotlib.colormaps[HEATMAP_CMAP].with_extremes(bad="#e6e6e6")


def scaling_figure(scaling: pd.DataFrame, current_gpus: int | None = None) -> Figure:
    """Tokens/s per GPU against the GPU count, each point the fastest configuration at that count (flat is
    linear scaling: the dashed line holds the reference count's per-GPU rate, the job's own count where it
    has a configuration, else the smallest that has one); MFU on the right-hand scale of the same curve
    (the model's FLOPs per token do not change with the count). A count with none (``status`` other than
    ok: nothing valid, or nothing fits) is a grey cross on the axis, labelled with its status."""
    fig, (ax,) = new_figure(9, 4.6)
    ok = (scaling["status"] == "ok") if "status" in scaling else pd.Series(True, index=scaling.index)
    if not ok.any():
        ax.text(0.5, 0.5, "no configuration fits at any GPU count of the scaling curve", ha="center", va="center",
                transform=ax.transAxes, color="#555555")
        ax.set_axis_off()
        return fig
    df = scaling[ok].sort_values("n_gpus")
    missing = scaling[~ok].sort_values("n_gpus")
    g = df["n_gpus"].to_numpy(dtype=float)
    per_gpu = df["tokens_per_s"].to_numpy(dtype=float) / g
    ax.plot(g, per_gpu, "o-", color=SERIES["throughput"], linewidth=2, label="tokens/s per GPU (best config)")
    ref = int(np.flatnonzero(g == current_gpus)[0]) if current_gpus is not None and current_gpus in g else 0
    ax.axhline(per_gpu[ref], linestyle="--", color=SERIES["ideal"], linewidth=1.2,
               label=f"linear scaling from {int(g[ref]):,} GPUs")
    top = max(float(np.nanmax(per_gpu)) * 1.3, 1.0) if np.isfinite(per_gpu).any() else 1.0
    for k, (gi, yi, rec) in enumerate(zip(g, per_gpu, df.to_dict("records"))):
        layout = layout_label(rec)
        total = float(rec["tokens_per_s"])
        text = f"{layout}\n{total / 1e6:,.2f} M tok/s" if total >= 1e6 else f"{layout}\n{total / 1e3:,.0f} k tok/s"
        # labels alternate above and below the curve, so neighbours do not run into each other
        ax.annotate(text, (gi, yi), textcoords="offset points", xytext=(0, 9 if k % 2 == 0 else -22),
                    ha="center", fontsize=7, color="#555555", linespacing=1.0,
                    bbox={"boxstyle": "round,pad=0.1", "facecolor": "white", "edgecolor": "none", "alpha": 0.8})
    if len(missing):
        mg = missing["n_gpus"].to_numpy(dtype=float)
        ax.plot(mg, np.zeros_like(mg), "x", color="#888888", markersize=9, markeredgewidth=2, clip_on=False,
                label="no feasible configuration")
        for gi, status in zip(mg, missing["status"]):
            ax.annotate(str(status), (gi, 0), textcoords="offset points", xytext=(0, 8), ha="center", fontsize=7.5,
                        color="#888888")
    every = np.sort(scaling["n_gpus"].to_numpy(dtype=float))
    ax.set_xscale("log", base=2)
    ax.set_xticks(every, [f"{int(x):,}" for x in every])
    ax.set_xticks([], minor=True)
    ax.set_xlim(every[0] / 1.4, every[-1] * 1.4)
    ax.set_xlabel("GPUs (log scale)")
    ax.set_ylabel("tokens/s per GPU", color=SERIES["throughput"])
    ax.set_ylim(0, top)
    # the job's own count marked where the curve's axis holds it (a --scaling-gpus range may not)
    if current_gpus is not None and every[0] / 1.4 <= current_gpus <= every[-1] * 1.4:
        ax.axvspan(current_gpus / 1.04, current_gpus * 1.04, color="#cccccc", alpha=0.5, zorder=0,
                   label=f"this job: {int(current_gpus):,} GPUs")
    # MFU is tokens/s per GPU times a constant (the model's FLOPs per token over the GPU's peak); no MFU scale
    # where it is unknown (a GPU profile without a 16-bit peak: NaN) or the rate is zero
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = df["mfu"].to_numpy(dtype=float) / per_gpu
    ratios = ratios[np.isfinite(ratios) & (ratios > 0)]
    if ratios.size:
        mfu_per_token = float(np.median(ratios)) * 100.0
        mfu_ax = ax.secondary_yaxis("right", functions=(lambda y: y * mfu_per_token, lambda m: m / mfu_per_token))
        mfu_ax.set_ylabel("MFU (%)")
    ax.set_title("Scaling with the GPU count (fastest configuration at each count; label: layout, whole-job "
                 "throughput)", loc="left", fontsize=10)
    fig.legend(loc="outside lower center", ncol=4, fontsize=8, frameon=False)
    return fig
