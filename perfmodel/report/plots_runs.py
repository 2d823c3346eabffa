"""Predicted vs measured throughput for the runs a user gave, with error bands."""
from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, MaxNLocator, NullFormatter

from perfmodel.report.colors import SERIES, category_color
from perfmodel.report.figures import new_figure

#: relative-error bands drawn around the diagonal
BANDS = (0.10, 0.25)
MAX_SOURCES = 9


def runs_figure(runs: pd.DataFrame) -> Figure:
    """Left: predicted vs measured tokens/s/GPU (log-log) with +-10% / +-25% bands, one colour per
    source. Right: the distribution of the signed error (%)."""
    fig, (ax, hist) = new_figure(12, 5.2, ncols=2)
    meas = runs["measured_tokens_per_s_per_gpu"].to_numpy(dtype=float)
    pred = runs["pred_tokens_per_s_per_gpu"].to_numpy(dtype=float)
    lo = float(min(meas.min(), pred.min())) * 0.7 if len(runs) else 1.0
    hi = float(max(meas.max(), pred.max())) * 1.4 if len(runs) else 10.0
    x = np.geomspace(lo, hi, 50)
    for band, alpha in zip(BANDS, (0.22, 0.10)):
        ax.fill_between(x, x * (1 - band), x * (1 + band), color=SERIES["throughput"], alpha=alpha, linewidth=0,
                        label=f"+/-{band:.0%}")
    ax.plot(x, x, color=SERIES["ideal"], linewidth=1, label="predicted = measured")
    counts = runs["source"].value_counts()
    shown = list(counts.index[:MAX_SOURCES])
    for i, src in enumerate(shown):
        sel = runs["source"] == src
        ax.scatter(meas[sel], pred[sel], s=16, color=category_color(i), label=f"{src} ({sel.sum()})",
                   alpha=0.8, edgecolors="none")
    other = ~runs["source"].isin(shown)
    if other.any():
        ax.scatter(meas[other], pred[other], s=14, color="#999999", label=f"other ({other.sum()})", alpha=0.6)
    log_note = ""
    # log axes where the padded range (0.7x the least to 1.4x the most) spans 1.5 decades (the data about 16x);
    # over less, log ticks are all minor ones (3x10^3 4x10^3 ... run together)
    if hi / lo >= 10.0 ** 1.5:
        ax.set_xscale("log")
        ax.set_yscale("log")
        log_note = " (log scale)"
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 1 else f"{v:g}"))
            axis.set_minor_formatter(NullFormatter())
    else:
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel(f"measured tokens/s per GPU{log_note}")
    ax.set_ylabel(f"predicted tokens/s per GPU{log_note}")
    ape = np.abs(runs["error_pct"].to_numpy(dtype=float))
    within = [np.mean(ape <= b * 100) for b in BANDS] if ape.size else [np.nan, np.nan]
    if ape.size:
        macro = runs.assign(ape=ape).groupby("source")["ape"].mean()
        # two lines: one would run into the right-hand panel's title
        ax.set_title(f"{len(runs)} run{'s' * (len(runs) != 1)}: MAPE {np.mean(ape):.1f}% pooled, {macro.mean():.1f}% "
                     f"over {len(macro)} source{'s' * (len(macro) != 1)}\n{within[0]:.0%} within 10%, "
                     f"{within[1]:.0%} within 25%", loc="left", fontsize=10)
    else:
        ax.set_title("no scored runs", loc="left", fontsize=10)
    ax.legend(fontsize=7.5, loc="upper left")
    err = np.clip(runs["error_pct"].to_numpy(dtype=float), -100, 100)
    hist.hist(err, bins=np.arange(-100, 105, 5), color=SERIES["throughput"], alpha=0.85)
    for band in BANDS:
        for sign in (-1, 1):
            hist.axvline(sign * band * 100, color=SERIES["ideal"], linestyle="--", linewidth=1)
    hist.set_xlabel("prediction error (%) = predicted / measured - 1 (clipped at +/-100)")
    hist.set_ylabel("runs")
    hist.yaxis.set_major_locator(MaxNLocator(integer=True))
    hist.set_title("Error distribution (dashed: +/-10%, +/-25%)", loc="left", fontsize=10)
    return fig
