"""Write a report: the HTML page, the same plots as PNG files and the candidates as CSV."""
from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from perfmodel.errors import output_file, refuse_replacing_inputs, say_note, write_file_atomic
from perfmodel.report.data import ReportData
from perfmodel.report.document import render
from perfmodel.report.html import GENERATOR_META
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
    if data.runs is not None and data.runs["scored"].any():
        figs["runs"] = runs_figure(data.runs[data.runs["scored"]])
    # each PNG is also a file of its own: it names the job it shows (the runs plot, the runs given)
    for name, fig in figs.items():
        if name != "runs":
            fig.suptitle(job_context(data), x=0.01, ha="left", fontsize=9, color="#444444")
    return figs


def job_context(data: ReportData) -> str:
    """``llama3-70b on 512 x h100-sxm5-80gb, seq len 8,192, global batch 512 (megatron-lm)``."""
    c, j = data.cluster, data.job
    return (f"{data.model.name} on {c.n_gpus:,} x {c.gpu.name}, seq len {j.seq_len:,}, global batch "
            f"{j.global_batch:,}" + (f" ({j.framework})" if j.framework else ""))


def _csv_bytes(df, **kwargs) -> bytes:
    return df.to_csv(**kwargs).encode("utf-8")


#: the files a report wrote, named in its page's head: a later report removes those of them it does not write
_FILES_META = '<meta name="perfmodel-report-files" content="{}">'
_FILES_META_RE = re.compile(r'<meta name="perfmodel-report-files" content="([^"]*)">')


def _earlier_report_files(html: Path) -> set[str]:
    """The files the report whose page is ``html`` wrote (none where it is not a perfmodel report's page)."""
    try:
        with html.open("rb") as fh:
            head = fh.read(4096).decode("utf-8", errors="replace")
    except OSError:
        return set()
    m = _FILES_META_RE.search(head) if GENERATOR_META in head else None
    return set(m.group(1).split()) if m else set()


def write_report(data: ReportData, out_dir: str | Path, inputs: Sequence[str | Path] = ()) -> ReportFiles:
    """Render every plot and table once, then write PNGs, CSVs and the HTML (which embeds the same PNGs),
    each file atomically; files of an earlier report in the folder that this one does not write (the
    runs plot and table of a report with ``--runs``) are removed, so the folder holds one report (only those
    the earlier report.html names as its own: a user's file of the same name stays).
    A file of the report that is one of ``inputs`` (the runs CSV, the calibration, a model or GPU file)
    is refused before anything is written or removed."""
    out = Path(out_dir)
    refuse_replacing_inputs(out, (*PNG_FILES.values(), CANDIDATES_CSV, SCALING_CSV, RUNS_CSV, HTML_FILE), inputs)
    # everything in memory first: a plot that cannot be drawn leaves no folder behind
    images = {name: png_bytes(fig) for name, fig in figures(data).items()}
    cand = data.result.candidates
    # rank from 1 as in the page; objective columns that this search did not compute are left out
    cand = cand.dropna(axis=1, how="all").set_axis(range(1, len(cand) + 1))
    files: dict[str, bytes] = {PNG_FILES[name]: png for name, png in images.items()}
    files[CANDIDATES_CSV] = _csv_bytes(cand, index_label="rank")
    files[SCALING_CSV] = _csv_bytes(data.scaling, index=False)
    if data.runs is not None:
        files[RUNS_CSV] = _csv_bytes(data.runs, index=False)
    names = " ".join(sorted([*files, HTML_FILE]))
    files[HTML_FILE] = render(data, images).replace(
        GENERATOR_META, GENERATOR_META + _FILES_META.format(names), 1).encode("utf-8")
    out.mkdir(parents=True, exist_ok=True)
    for name in files:  # a folder, device or FIFO in the way of a file fails the report before anything is written
        if (out / name).is_dir():
            raise IsADirectoryError(21, "Is a directory", str(out / name))
        output_file(out / name)
    # an earlier report's files that this one does not write go, so the folder holds one report; only those
    # its page says it wrote: a file of the user's that shares a name with one is not ours to remove
    earlier = _earlier_report_files(out / HTML_FILE)
    # (the page is written after its files: one changed since then is the user's now, and stays)
    page_written = (out / HTML_FILE).stat().st_mtime if earlier else 0.0
    for name in (*PNG_FILES.values(), RUNS_CSV):
        if name in earlier and name not in files and (out / name).is_file():
            if (out / name).stat().st_mtime > page_written:
                say_note(f"{out / name}: changed since the earlier report wrote it, so left in place (this report "
                         "does not write it)")
                continue
            (out / name).unlink()
    for name, content in files.items():
        write_file_atomic(out / name, content)
    pngs = {name: out / PNG_FILES[name] for name in images}
    return ReportFiles(out / HTML_FILE, pngs, out / CANDIDATES_CSV, out / SCALING_CSV,
                       out / RUNS_CSV if data.runs is not None else None)
