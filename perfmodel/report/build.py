"""Write a report: the HTML page, the same plots as PNG files and the candidates as CSV."""
from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from perfmodel.report.data import ReportData
from perfmodel.report.document import render
from perfmodel.report.figures import png_bytes
from perfmodel.report.plots_breakdown import memory_breakdown_figure, time_breakdown_figure
from perfmodel.report.plots_runs import runs_figure
from perfmodel.report.plots_space import heatmap_figure, scaling_figure

#: plot name -> PNG file name in the output folder
PNG_FILES = {
    "time": "time_breakdown.png",
    "memory": "memory_breakdown.png",
    "heatmap": "tp_pp_heatmap.png",
    "scaling": "scaling.png",
    "runs": "predicted_vs_measured.png",
}
HTML_FILE = "report.html"
CANDIDATES_CSV = "candidates.csv"
SCALING_CSV = "scaling.csv"
RUNS_CSV = "runs_predicted.csv"


@dataclass(frozen=True)
class ReportFiles:
    """What ``write_report`` wrote."""

    html: Path
    pngs: dict[str, Path]
    candidates_csv: Path
    scaling_csv: Path
    runs_csv: Path | None


def figures(data: ReportData) -> dict:
    """The report's matplotlib figures by plot name (``runs`` only when runs were given)."""
    top = data.top_candidates
    best = top.iloc[0]
    figs = {
        "time": time_breakdown_figure(top),
        "memory": memory_breakdown_figure(top, data.cluster.gpu.hbm_capacity_gib),
        "heatmap": heatmap_figure(data.heatmap, int(best["tp"]), int(best["pp"])),
        "scaling": scaling_figure(data.scaling, data.cluster.n_gpus),
    }
    if data.runs is not None and len(data.runs):
        figs["runs"] = runs_figure(data.runs)
    return figs


def _write_atomic(path: Path, content: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(content)
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; a report is meant to be shared
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_report(data: ReportData, out_dir: str | Path) -> ReportFiles:
    """Render every plot once, then write PNGs, CSVs and the HTML (which embeds the same PNGs)."""
    out = Path(out_dir)
    # every plot first: a plot that cannot be drawn leaves no folder behind
    images = {name: png_bytes(fig) for name, fig in figures(data).items()}
    out.mkdir(parents=True, exist_ok=True)
    pngs = {}
    for name, png in images.items():
        pngs[name] = out / PNG_FILES[name]
        _write_atomic(pngs[name], png)
    cand = out / CANDIDATES_CSV
    data.result.candidates.to_csv(cand, index_label="rank")
    scaling = out / SCALING_CSV
    data.scaling.to_csv(scaling, index=False)
    runs_csv = None
    if data.runs is not None:
        runs_csv = out / RUNS_CSV
        data.runs.to_csv(runs_csv, index=False)
    page = out / HTML_FILE
    _write_atomic(page, render(data, images).encode("utf-8"))
    return ReportFiles(page, pngs, cand, scaling, runs_csv)
