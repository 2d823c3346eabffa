"""The shape of the configuration space: best throughput per TP x PP, and how the best
configuration scales with the GPU count."""
from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from perfmodel.report.colors import HEATMAP_CMAP, SERIES
from perfmodel.report.figures import new_figure


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
    for i in range(n_pp):
        for j in range(n_tp):
            v = values[i, j]
            text = f"{v:,.0f}" if np.isfinite(v) else "-"
            color = "white" if np.isfinite(v) and v < mid else "black"
            ax.text(j, i, text, ha="center", va="center", fontsize=8, color=color)
    ax.set_xticks(range(n_tp), [str(int(t)) for t in heatmap.columns])
    ax.set_yticks(range(n_pp), [str(int(p)) for p in heatmap.index])
    ax.set_xlabel("tensor-parallel size (tp)")
    ax.set_ylabel("pipeline-parallel size (pp)")
    ax.set_title("Best tokens/s per GPU for each TP x PP (other axes searched; '-' = none fits)",
                 loc="left", fontsize=10)
    if best_tp is not None and best_pp is not None and best_tp in heatmap.columns and best_pp in heatmap.index:
        j, i = list(heatmap.columns).index(best_tp), list(heatmap.index).index(best_pp)
        ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor=SERIES["capacity"], linewidth=2.5))
    fig.colorbar(image, ax=ax, label="best tokens/s per GPU")
    return fig


def _cmap():
    import matplotlib

    return matplotlib.colormaps[HEATMAP_CMAP].with_extremes(bad="#e6e6e6")


def scaling_figure(scaling: pd.DataFrame, current_gpus: int | None = None) -> Figure:
    """Total throughput (with ideal linear scaling from the smallest count) and MFU vs GPUs,
    each point the fastest configuration at that GPU count; a count with none (``status`` other than
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
    total = df["tokens_per_s"].to_numpy(dtype=float) / 1e6
    ax.plot(g, total, "o-", color=SERIES["throughput"], linewidth=2, label="throughput (best config)")
    ax.plot(g, total[0] * g / g[0], "--", color=SERIES["ideal"], linewidth=1.2, label="ideal linear scaling")
    for gi, ti, rec in zip(g, total, df.to_dict("records")):
        ax.annotate(f"tp{rec['tp']} pp{rec['pp']} dp{rec['dp']}" + (f" cp{rec['cp']}" if rec["cp"] > 1 else ""),
                    (gi, ti), textcoords="offset points", xytext=(4, -12), fontsize=7.5, color="#555555")
    if len(missing):
        mg = missing["n_gpus"].to_numpy(dtype=float)
        ax.plot(mg, np.zeros_like(mg), "x", color="#888888", markersize=9, markeredgewidth=2, clip_on=False,
                label="no feasible configuration")
        for gi, status in zip(mg, missing["status"]):
            ax.annotate(str(status), (gi, 0), textcoords="offset points", xytext=(4, 6), fontsize=7.5,
                        color="#888888")
    every = np.sort(scaling["n_gpus"].to_numpy(dtype=float))
    ax.set_xscale("log", base=2)
    ax.set_xticks(every, [f"{int(x):,}" for x in every])
    ax.set_xlim(every[0] / 1.35, every[-1] * 1.6)
    ax.set_xlabel("GPUs")
    ax.set_ylabel("throughput (million tokens/s, whole job)", color=SERIES["throughput"])
    ax.set_ylim(bottom=0)
    if current_gpus is not None:
        ax.axvline(current_gpus, color="#cccccc", linewidth=6, alpha=0.5, zorder=0)
    mfu_ax = ax.twinx()
    mfu_ax.plot(g, df["mfu"].to_numpy(dtype=float) * 100, "s-", color=SERIES["mfu"], linewidth=1.6, label="MFU")
    mfu_ax.set_ylabel("MFU (%)", color=SERIES["mfu"])
    mfu_ax.set_ylim(0, max(60.0, float(df["mfu"].max() * 100 * 1.15)))
    ax.set_title("Scaling with the GPU count (fastest configuration at each count)", loc="left", fontsize=11)
    lines = ax.get_lines()[:2 + bool(len(missing))] + mfu_ax.get_lines()
    ax.legend(lines, [ln.get_label() for ln in lines], loc="upper left", fontsize=8.5)
    return fig
