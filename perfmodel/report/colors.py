"""One colour map for every plot: each breakdown part keeps its colour in every figure.

Time parts follow the order of ``perfmodel.step.TIME_PARTS`` (compute first, overheads last);
memory parts the order of ``MEMORY_PARTS`` (a unit test keeps them in step). Colours come from
the Tableau 10 palette: useful work in blues, exposed communication in oranges and greens, the
pipeline bubble in red, so the eye finds what is not compute.
"""
from __future__ import annotations

#: time breakdown part -> (label, colour)
TIME_STYLE: dict[str, tuple[str, str]] = {
    "compute_s": ("compute", "#4e79a7"),
    "recompute_s": ("recompute", "#a0cbe8"),
    "tp_comm_s": ("TP comm (exposed)", "#f28e2b"),
    "cp_comm_s": ("CP comm (exposed)", "#ffbe7d"),
    "offload_s": ("activation offload (exposed)", "#76b7b2"),
    "pp_comm_s": ("PP comm (exposed)", "#59a14f"),
    "bubble_s": ("pipeline bubble", "#e15759"),
    "dp_comm_s": ("DP comm (exposed)", "#8cd17d"),
    "optimizer_s": ("optimizer", "#b07aa1"),
    "overhead_s": ("overhead", "#9d7660"),
}

#: memory breakdown part -> (label, colour)
MEMORY_STYLE: dict[str, tuple[str, str]] = {
    "weights_gib": ("weights", "#4e79a7"),
    "gradients_gib": ("gradients", "#59a14f"),
    "optimizer_gib": ("optimizer states", "#b07aa1"),
    "activations_gib": ("activations", "#f28e2b"),
    "reserved_gib": ("runtime reserved", "#bab0ac"),
}

#: colours for metric series (throughput, MFU, measured/predicted) and reference lines
SERIES: dict[str, str] = {
    "throughput": "#4e79a7",
    "mfu": "#e15759",
    "ideal": "#9c9c9c",
    "capacity": "#d62728",
    "memory": "#f28e2b",
}

#: a qualitative cycle for categories (sources in the runs plot, lines in the what-if plot)
CATEGORICAL = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1",
               "#ff9da7", "#9c755f", "#bab0ac")

#: the sequential colour map of heatmaps
HEATMAP_CMAP = "viridis"

#: parts this map does not name yet (a new breakdown part) are drawn in greys, labelled by name
FALLBACK = ("#7f7f7f", "#c7c7c7", "#595959", "#a5a5a5")


def _style(styles: dict[str, tuple[str, str]], part: str, suffix: str) -> tuple[str, str]:
    if part in styles:
        return styles[part]
    extra = sorted(p for p in _SEEN.setdefault(suffix, set()) | {part})
    _SEEN[suffix].add(part)
    return part.removesuffix(suffix).replace("_", " "), FALLBACK[extra.index(part) % len(FALLBACK)]


_SEEN: dict[str, set[str]] = {}


def time_color(part: str) -> str:
    return _style(TIME_STYLE, part, "_s")[1]


def time_label(part: str) -> str:
    return _style(TIME_STYLE, part, "_s")[0]


def memory_color(part: str) -> str:
    return _style(MEMORY_STYLE, part, "_gib")[1]


def memory_label(part: str) -> str:
    return _style(MEMORY_STYLE, part, "_gib")[0]


def category_color(i: int) -> str:
    return CATEGORICAL[i % len(CATEGORICAL)]
