"""Where the time goes and what fills the memory, one stacked bar per top candidate."""
from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from perfmodel.report.colors import SERIES, memory_color, memory_label, time_color, time_label
from perfmodel.report.figures import candidate_label, new_figure
from perfmodel.step import MEMORY_PARTS, TIME_PARTS


def _labels(candidates: pd.DataFrame) -> list[str]:
    return [candidate_label(rec, i) for i, rec in enumerate(candidates.to_dict("records"), start=1)]


def _stack(ax, candidates: pd.DataFrame, parts, color, label) -> np.ndarray:
    """Horizontal stacked bars, best candidate on top; returns the bar totals. A part that is zero in
    every bar is not drawn (nor listed in the legend)."""
    y = np.arange(len(candidates))[::-1]
    left = np.zeros(len(candidates))
    for part in parts:
        width = candidates[part].to_numpy(dtype=float)
        if not np.any(width > 0):
            continue
        ax.barh(y, width, left=left, height=0.62, color=color(part), label=label(part),
                edgecolor="white", linewidth=0.5)
        left = left + width
    ax.set_yticks(y, _labels(candidates), fontsize=9)
    return left


def time_breakdown_figure(candidates: pd.DataFrame) -> Figure:
    """Stacked time per iteration: compute, recompute, exposed TP/CP/PP/DP comm, bubble, optimizer,
    overhead. The bars end at ``iteration_time_s`` (the total is the sum of its parts)."""
    fig, (ax,) = new_figure(11, 1.4 + 0.55 * len(candidates))
    totals = _stack(ax, candidates, TIME_PARTS, time_color, time_label)
    y = np.arange(len(candidates))[::-1]
    for yi, total, rec in zip(y, totals, candidates.to_dict("records")):
        ax.text(total, yi, f"  {total:.2f} s | {rec['tokens_per_s_per_gpu']:,.0f} tok/s/GPU | MFU {rec['mfu']:.1%}",
                va="center", fontsize=8.5)
    ax.set_xlim(0, totals.max() * 1.45 if totals.size else 1)
    ax.set_xlabel("time per iteration (s)")
    ax.set_title("Where the iteration time goes (exposed communication only)", loc="left", fontsize=11)
    fig.legend(loc="outside lower center", ncol=5, fontsize=8.5, frameon=False)
    return fig


def memory_breakdown_figure(candidates: pd.DataFrame, hbm_capacity_gib: float) -> Figure:
    """Stacked memory per GPU against the HBM capacity (a red line)."""
    fig, (ax,) = new_figure(11, 1.4 + 0.55 * len(candidates))
    totals = _stack(ax, candidates, MEMORY_PARTS, memory_color, memory_label)
    y = np.arange(len(candidates))[::-1]
    # the totals are written right of the capacity line (which would cross a label ending near it), with
    # one decimal of the share (79.4 of 79.6 GiB is 99.8%, not a full "100%")
    for yi, total in zip(y, totals):
        ax.text(max(total, hbm_capacity_gib), yi, f"  {total:.1f} GiB ({total / hbm_capacity_gib:.1%})",
                va="center", fontsize=8.5)
    ax.axvline(hbm_capacity_gib, color=SERIES["capacity"], linestyle="--", linewidth=1.5,
               label=f"HBM capacity {hbm_capacity_gib:g} GiB")
    ax.set_xlim(0, max(hbm_capacity_gib, totals.max() if totals.size else 0) * 1.3)
    ax.set_xlabel("memory per GPU (GiB)")
    ax.set_title("What fills GPU memory (per GPU, peak)", loc="left", fontsize=11)
    fig.legend(loc="outside lower center", ncol=6, fontsize=8.5, frameon=False)
    return fig
