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


#: inches a character of a label takes per point of font size (DejaVu Sans averages ~0.6 em)
CHAR_EM = 0.6


def label_inches(text: str, fontsize: float) -> float:
    """The width a one-line label takes, roughly (its longest line)."""
    return max(len(line) for line in str(text).split("\n")) * fontsize * CHAR_EM / 72.0


def spaced(positions, labels, axis_inches: float, fontsize: float = 10.0) -> list[int]:
    """Indices of the labels that keep clear of each other where drawn: ``positions`` ascending on a linear
    scale of the axis (log2 of the values on a log axis), the axis ``axis_inches`` wide; the first and the
    last always kept, a middle one only where it clears the last kept and the last label."""
    pos = np.asarray(positions, dtype=float)
    if len(pos) <= 2 or pos[-1] <= pos[0]:
        return list(range(len(pos)))
    at = (pos - pos[0]) / (pos[-1] - pos[0]) * axis_inches
    width = [label_inches(t, fontsize) + 0.08 for t in labels]
    keep = [0]
    for i in range(1, len(pos) - 1):
        if (at[i] - at[keep[-1]] >= (width[i] + width[keep[-1]]) / 2
                and at[-1] - at[i] >= (width[i] + width[-1]) / 2):
            keep.append(i)
    return keep + [len(pos) - 1]


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
    axis_inches = fig.get_figwidth() / len(axes) - 1.0  # each panel's width, less its labels
    log_x = False
    # more series than the categorical cycle has colours: numeric ones on a sequential map, low to high; named
    # ones (GPUs, profiles) in a longer qualitative cycle, so that no two share a colour
    colours = [category_color(k) for k in range(len(series))]
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
    first_legend: list = []
    for ax, (col, label, scale) in zip(axes, PANELS):
        legend: list = []  # (handle, label) of the named series, in series order
        for k, sv in enumerate(series):
            sub = ok if sv is None else ok[ok[s_var] == sv]
            if numeric:  # a line joins the points in x order, whatever order the sweep gave
                sub = sub.sort_values(x_var, kind="stable", key=lambda col: col.astype(float))
            name = _fmt(s_var, sv) if s_var else "best config" if df.attrs.get("mode") == "best" else "fixed config"
            color = colours[k] if s_var else SERIES["throughput" if col != "mfu" else "mfu"]
            y = sub[col].to_numpy(dtype=float) * scale
            if numeric:
                (handle,) = ax.plot(sub[x_var].to_numpy(dtype=float), y, "o-", color=color, label=name, linewidth=2)
            else:
                pos = np.array([xs.index(v) for v in sub[x_var]]) + (k - (len(series) - 1) / 2) * width
                handle = bars = ax.bar(pos, y, width=width * 0.95, color=color, label=name)
                text = [f"{v:,.0f}" if col != "mfu" else f"{v:.1f}%" for v in y]
                # (the layouts only where a bar is wide enough for its label: they are in the CSV)
                best = col != "mfu" and df.attrs.get("mode") == "best" and len(sub)
                layouts = [layout_label(r) for r in sub.to_dict("records")] if best else []
                bar_inches = axis_inches * width / max(len(xs), 1)
                if best and max(label_inches(t, 7.5) for t in layouts) <= bar_inches:
                    text = [f"{t}\n{lay}" for t, lay in zip(text, layouts)]
                ax.bar_label(bars, text, fontsize=7.5, padding=2)
            if k in named:
                legend.append((handle, name if len(sub) else f"{name} (none feasible)"))
        if numeric:
            # a point with no configuration (invalid, or nothing fits) is a cross at the foot of the panel, as in
            # report: in its series' colour, one row per series, so that two series' crosses at one x stay apart
            gone = df[(df["status"] != "ok")]
            if len(gone):
                foot = matplotlib.transforms.blended_transform_factory(ax.transData, ax.transAxes)
                for k, sv in enumerate(series):
                    mine = gone if sv is None else gone[gone[s_var] == sv]
                    if len(mine):
                        ax.plot(mine[x_var].to_numpy(dtype=float), np.full(len(mine), 0.03 + 0.045 * k), "x",
                                color=colours[k] if s_var else "#888888", markersize=8, markeredgewidth=2, transform=foot, clip_on=False)
                (cross,) = ax.plot([], [], "x", color="#888888", markersize=8, markeredgewidth=2,
                                   label="no configuration (invalid or no fit; colour: its series)" if s_var
                                   else "no configuration (invalid or no fit)")
                legend.append((cross, cross.get_label()))
            log_x = len(xs) > 2 and min(xs) > 0 and max(xs) / min(xs) >= 8
            if log_x:
                ax.set_xscale("log", base=2)
            values = np.array([float(v) for v in xs])
            where = np.log2(values) if log_x else values
            shown = thinned(len(xs), positions=where)
            # and of those, the labels that clear each other on the axis (close values on a log axis would not)
            shown = [shown[i] for i in spaced(where[shown], [_fmt(x_var, xs[j]) for j in shown], axis_inches)]
            ax.set_xticks([float(xs[i]) for i in shown], [_fmt(x_var, xs[i]) for i in shown])
            ax.minorticks_off()
        else:  # named categories: every bar is labelled (rotated when many)
            ax.set_xticks(range(len(xs)), [_fmt(x_var, v) for v in xs],
                          rotation=30 if len(xs) > 6 else 0, ha="right" if len(xs) > 6 else "center")
        ax.set_xlabel(AXIS_LABELS.get(x_var, x_var) + (" (log scale)" if numeric and log_x else ""))
        ax.set_ylabel(label)
        ax.set_ylim(bottom=0, top=(ax.get_ylim()[1] * 1.1))
        if ax is axes[0]:
            first_legend = legend
    # one legend for both panels (the same series), below them: inside a panel it covered lines
    # (a single series of bars needs none: the panels' labels say what the bars are)
    if s_var or (numeric and (df["status"] != "ok").any()):
        title = AXIS_LABELS.get(s_var, "") if s_var else None
        if len(named) < len(series):
            title = f"{title} ({len(named)} of {len(series)} series named)"
        handles, labels = [h for h, _ in first_legend], [lab for _, lab in first_legend]
        fig.legend(handles, labels, loc="outside lower center", fontsize=8.5 if len(labels) <= 6 else 7.5,
                   title=title, title_fontsize=9, ncol=min(len(labels), 6), frameon=False)
    dropped = len(df) - len(ok)
    note = (f" ({dropped} of {len(df)} points invalid or out of memory, "
            + ("crosses on the axis)" if numeric else "not drawn)")) if dropped else ""
    fig.suptitle(f"What if: {' x '.join(AXIS_LABELS.get(v, v) for v in sweep)} "
                 f"[{df.attrs.get('mode', '?')} configuration]{note}" + (f"\n{context}" if context else ""), fontsize=11)
    return fig
