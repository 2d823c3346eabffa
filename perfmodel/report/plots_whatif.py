"""The what-if plot: tokens/s per GPU and MFU against the first swept variable, one series per
value of the second. Numeric variables are lines, categorical ones (GPU, calibration, ZeRO++)
grouped bars; points that are invalid or do not fit are left out (and named in the title)."""
from __future__ import annotations

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from perfmodel.report.colors import CATEGORICAL, HEATMAP_CMAP, SERIES, category_color
from perfmodel.report.figures import layout_label, new_figure

#: axis labels with units, per swept variable
AXIS_LABELS = {
    "gpus": "GPUs",
    "gpu": "GPU",
    "scale_out_gbit_per_s": "scale-out bandwidth per node (Gbit/s)",
    "seq_len": "sequence length (tokens)",
    "global_batch": "global batch (sequences)",
    "zeropp_on": "ZeRO++",
    "calibration": "calibration profile",
}
NUMERIC = {"gpus", "scale_out_gbit_per_s", "seq_len", "global_batch"}
PANELS = (("tokens_per_s_per_gpu", "tokens/s per GPU", 1.0), ("mfu", "MFU (%)", 100.0))
#: most x-tick labels and legend entries drawn: a longer sweep labels an evenly spaced subset (its first
#: and last value always among them) instead of overprinting them
MOST_LABELS = 12


def thinned(n: int, most: int = MOST_LABELS, positions=None) -> list[int]:
    """Indices of at most ``most`` of ``n`` items, the first and the last included: the item nearest each of
    ``most`` evenly spaced points of ``positions`` (ascending, where the items are drawn: log2 of the values
    on a log axis; default the index)."""
    if n <= most:
        return list(range(n))
    pos = np.arange(n, dtype=float) if positions is None else np.asarray(positions, dtype=float)
    targets = np.linspace(pos[0], pos[-1], most)
    picked = sorted({int(np.argmin(np.abs(pos - t))) for t in targets} | {0, n - 1})
    # nearest points may sit closer than half a step: keep the first, the last, and those clear of the last kept
    half = 0.5 * (pos[-1] - pos[0]) / (most - 1)
    keep = [0]
    for i in picked[1:-1]:
        if pos[i] - pos[keep[-1]] >= half and pos[-1] - pos[i] >= half:
            keep.append(i)
    return keep + [n - 1]


def _fmt(var: str, value) -> str:
    if var == "zeropp_on":
        return "ZeRO++ on" if bool(value) else "ZeRO++ off"
    if var in NUMERIC:  # a whole number without decimals, any other in full (100.2 is not 100)
        return f"{float(value):,.0f}" if float(value).is_integer() else f"{float(value):,}"
    return str(value)


def whatif_figure(df: pd.DataFrame, sweep: list[str] | None = None, context: str | None = None) -> Figure:
    """``context``: the job the sweep varies (model, GPUs, sequence, batch; the fixed configuration), a second
    title line."""
    sweep = list(sweep or df.attrs.get("sweep") or [])
    x_var = sweep[0]
    s_var = sweep[1] if len(sweep) > 1 else None
    fig, axes = new_figure(12, 4.6, ncols=2)
    ok = df[df["status"] == "ok"]
    series = list(dict.fromkeys(df[s_var])) if s_var else [None]
    numeric = x_var in NUMERIC
    xs = list(dict.fromkeys(df[x_var]))
    if numeric:
        xs = sorted(xs, key=float)
    width = 0.8 / max(len(series), 1)
    # more series than the categorical cycle has colours: numeric ones on a sequential map, low to high; named
    # ones (GPUs, profiles) in a longer qualitative cycle, so that no two share a colour
    colours = None
    if s_var in NUMERIC and len(series) > len(CATEGORICAL):
        order = np.argsort(np.argsort([float(v) for v in series]))
        colours = [matplotlib.colormaps[HEATMAP_CMAP](0.9 * o / (len(series) - 1)) for o in order]
    elif s_var and len(series) > len(CATEGORICAL):
        cycle = matplotlib.colormaps["tab20"].colors
        colours = [cycle[k % len(cycle)] for k in range(len(series))]
    # a numeric second variable with many values names an evenly spaced subset of them in its legend; named
    # categories are all named (nothing orders them, an unnamed one could not be told apart)
    named = set(range(len(series)))
    if s_var in NUMERIC and len(series) > MOST_LABELS:
        by_value = sorted(range(len(series)), key=lambda k: float(series[k]))
        named = {by_value[i] for i in thinned(len(series), positions=[float(series[k]) for k in by_value])}
    for ax, (col, label, scale) in zip(axes, PANELS):
        legend: list = []  # (handle, label) of the named series, in series order
        for k, sv in enumerate(series):
            sub = ok if sv is None else ok[ok[s_var] == sv]
            if numeric:  # a line joins the points in x order, whatever order the sweep gave
                sub = sub.sort_values(x_var, kind="stable", key=lambda col: col.astype(float))
            name = _fmt(s_var, sv) if s_var else "best config" if df.attrs.get("mode") == "best" else "fixed config"
            color = (colours[k] if colours is not None else category_color(k)) if s_var \
                else SERIES["throughput" if col != "mfu" else "mfu"]
            y = sub[col].to_numpy(dtype=float) * scale
            if numeric:
                (handle,) = ax.plot(sub[x_var].to_numpy(dtype=float), y, "o-", color=color, label=name, linewidth=2)
            else:
                pos = np.array([xs.index(v) for v in sub[x_var]]) + (k - (len(series) - 1) / 2) * width
                handle = bars = ax.bar(pos, y, width=width * 0.95, color=color, label=name)
                text = [f"{v:,.0f}" if col != "mfu" else f"{v:.1f}%" for v in y]
                # (the layouts only where the bars are few enough for their labels to stay apart)
                if col != "mfu" and df.attrs.get("mode") == "best" and len(xs) * len(series) <= 8:
                    text = [f"{t}\n{layout_label(r)}" for t, r in zip(text, sub.to_dict("records"))]
                ax.bar_label(bars, text, fontsize=7.5, padding=2)
            if k in named:
                legend.append((handle, name))
        if numeric:
            # a point with no configuration (invalid, or nothing fits) is a grey cross on the axis, as in report
            gone = df[(df["status"] != "ok")]
            if len(gone):
                (cross,) = ax.plot(gone[x_var].to_numpy(dtype=float), np.zeros(len(gone)), "x", color="#888888",
                                   markersize=8, markeredgewidth=2, clip_on=False,
                                   label="no configuration (invalid or no fit)")
                legend.append((cross, cross.get_label()))
            log_x = len(xs) > 2 and min(xs) > 0 and max(xs) / min(xs) >= 8
            if log_x:
                ax.set_xscale("log", base=2)
            values = np.array([float(v) for v in xs])
            shown = thinned(len(xs), positions=np.log2(values) if log_x else values)
            ax.set_xticks([float(xs[i]) for i in shown], [_fmt(x_var, xs[i]) for i in shown])
            ax.minorticks_off()
        else:  # named categories: every bar is labelled (rotated when many)
            ax.set_xticks(range(len(xs)), [_fmt(x_var, v) for v in xs],
                          rotation=30 if len(xs) > 6 else 0, ha="right" if len(xs) > 6 else "center")
        ax.set_xlabel(AXIS_LABELS.get(x_var, x_var))
        ax.set_ylabel(label)
        ax.set_ylim(bottom=0, top=(ax.get_ylim()[1] * 1.1))
        if s_var or not numeric or (df["status"] != "ok").any():
            title = AXIS_LABELS.get(s_var, "") if s_var else None
            if len(named) < len(series):
                title = f"{title} ({len(named)} of {len(series)} series named)"
            handles, labels = [h for h, _ in legend], [lab for _, lab in legend]
            ax.legend(handles, labels, fontsize=8.5 if len(labels) <= 6 else 7.5, title=title,
                      ncol=1 if len(labels) <= 6 else 2)
    dropped = len(df) - len(ok)
    note = (f" ({dropped} of {len(df)} points invalid or out of memory, "
            + ("crosses on the axis)" if numeric else "not drawn)")) if dropped else ""
    fig.suptitle(f"What if: {' x '.join(AXIS_LABELS.get(v, v) for v in sweep)} "
                 f"[{df.attrs.get('mode', '?')} configuration]{note}" + (f"\n{context}" if context else ""), fontsize=11)
    return fig
