"""Figure plumbing shared by the plots: Agg figures without pyplot (no global state, no
display needed), PNG bytes, and the short label of a candidate configuration."""
from __future__ import annotations

import io
from typing import Mapping

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

DPI = 110
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def new_figure(width_in: float, height_in: float, ncols: int = 1) -> tuple[Figure, list]:
    """A figure on the Agg canvas with ``ncols`` axes side by side."""
    fig = Figure(figsize=(width_in, height_in), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, ncols, squeeze=False)[0]
    for ax in axes:
        ax.grid(True, alpha=0.3, linewidth=0.6)
        ax.set_axisbelow(True)
    return fig, list(axes)


def png_bytes(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    return buf.getvalue()


def layout_label(rec: Mapping) -> str:
    """``tp2 pp4 dp16 cp4-ulysses``: a configuration's parallel sizes (cp, with its kind, where it splits the
    sequence)."""
    text = f"tp{int(rec['tp'])} pp{int(rec['pp'])} dp{int(rec['dp'])}"
    if int(rec.get("cp", 1) or 1) > 1:
        text += f" cp{int(rec['cp'])}-" + ("ulysses" if rec.get("cp_kind") == "ulysses" else "ring")
    return text


def candidate_label(rec: Mapping, rank: int | None = None) -> str:
    """``#1 tp4 pp4 dp32 vpp5 mb1 sp zero1`` (recompute only when on)."""
    parts = [layout_label(rec)]
    if int(rec.get("vpp", 1)) > 1:
        parts.append(f"vpp{int(rec['vpp'])}")
    parts.append(f"mb{int(rec['micro_batch'])}")
    if bool(rec.get("sp")) and int(rec["tp"]) > 1:
        parts.append("sp")
    parts.append(f"zero{int(rec['zero_stage'])}")
    if rec.get("zeropp"):
        parts.append(f"zero++({rec['zeropp']})")
    if rec.get("recompute", "none") != "none":
        parts.append(f"rc-{rec['recompute']}")
    if float(rec.get("offload_fraction") or 0) > 0:
        parts.append(f"offload{float(rec['offload_fraction']):.0%}")
    label = " ".join(parts)
    return f"#{rank} {label}" if rank is not None else label
