"""``perfmodel report``: search a job and write the HTML report, PNG plots and CSVs to --out DIR."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from perfmodel.cli_options import (
    BatchOpt, CalibrationOpt, FlashOpt, FrameworkOpt, GpnOpt, GpuOpt, GpusOpt, ModelOpt, NetworkOpt, PrecisionOpt,
    ScaleOutOpt, SeqOpt, parse_gpu_counts,
)

#: the breakdown columns come with the top 50 candidates of a search (engine._attach_breakdowns)
MAX_TOP = 50


def report(
    model: ModelOpt,
    gpu: GpuOpt,
    gpus: GpusOpt,
    global_batch: BatchOpt,
    out: Annotated[str, typer.Option("--out", help="Folder for report.html, the PNG plots and the CSVs.")],
    seq_len: SeqOpt = 2048,
    gpus_per_node: GpnOpt = None,
    scale_out_gbit_per_s: ScaleOutOpt = None,
    network: NetworkOpt = None,
    precision: PrecisionOpt = None,
    framework: FrameworkOpt = "megatron-lm",
    flash_attention: FlashOpt = None,
    calibration: CalibrationOpt = None,
    top: Annotated[int, typer.Option("--top", help=f"Candidates in the table and breakdown plots (1..{MAX_TOP}).")] = 5,
    runs: Annotated[
        Optional[Path], typer.Option("--runs", help="Measured runs CSV (runs schema): adds predicted vs measured.")
    ] = None,
    scaling_gpus: Annotated[
        Optional[str], typer.Option("--scaling-gpus", help="GPU counts of the scaling curve, e.g. 128,256,512 "
                                    "(default: gpus/8 .. 2 x gpus in powers of two); a count with nothing feasible is "
                                    "listed with why.")
    ] = None,
):
    """Write an HTML report with plots, the plots as PNG and the candidates as CSV into --out.

    The page is self-contained (plots embedded, no network needed): inputs and calibration fit
    quality, top-k table, time and memory breakdowns, TP x PP map, scaling curve, and predicted
    vs measured when --runs is given."""
    from pydantic import ValidationError

    from perfmodel.catalog import load_model
    from perfmodel.cli import build_cluster, build_job, fail, nothing_usable
    from perfmodel.notes import job_notes
    from perfmodel.errors import InputError, from_validation_error, output_folder
    from perfmodel.calibrate.parsers.runs_csv import gpu_profile_paths
    from perfmodel.report import collect, write_report

    try:
        if not out.strip():  # an unset shell variable, not "here": say so rather than fill the current folder
            raise InputError("out", "must name a folder (got an empty value)")
        out = Path(out)
        output_folder(out)
        if not 1 <= top <= MAX_TOP:
            raise InputError("top", f"must be between 1 and {MAX_TOP} (got {top})")
        spec = load_model(model)
        cluster = build_cluster(gpu, gpus, gpus_per_node, scale_out_gbit_per_s, network)
        job = build_job(global_batch, seq_len, precision, framework, cluster.gpu, flash_attention)
        counts = parse_gpu_counts(scaling_gpus, "scaling_gpus")
        for n in counts or ():  # each count as a cluster of this kind (the last node may be part-used)
            try:
                cluster.resized(n)
            except ValidationError as exc:
                raise from_validation_error(exc, prefix="scaling_gpus") from None
        runs_df = None
        if runs is not None:
            from perfmodel.calibrate.parsers.runs_csv import read_runs_csv

            runs_df = read_runs_csv(runs)
        data = collect(spec, cluster, job, calibration_path=calibration, top=top, runs=runs_df,
                       runs_source=str(runs) if runs is not None else None, scaling_gpus=counts)
    except (InputError, ValidationError) as exc:
        fail(exc)
    if data.result.n_feasible == 0:
        nothing_usable(f"no feasible configuration for {spec.name} on {gpus} x {cluster.gpu.name} "
                       f"(global batch {global_batch}, seq len {seq_len}): "
                       f"{data.result.why_none_feasible(cluster.gpu.hbm_capacity_gib)}; nothing to report")
    try:
        gpu_files = gpu_profile_paths(runs_df) if runs_df is not None else []
        files = write_report(data, out, inputs=[p for p in (runs, calibration, model, gpu, *gpu_files) if p])
    except InputError as exc:  # a device, FIFO or socket where a file of the report goes
        fail(exc)
    except OSError as exc:
        # the file that could not be written (os.replace names the target second), else the folder
        where = exc.filename2 or exc.filename or out
        fail(InputError("out", f"cannot write the report ({exc.strerror})", where=str(where)))
    best = data.top_candidates.iloc[0]
    typer.echo(f"best: tp={best.tp} pp={best.pp} dp={best.dp} cp={best.cp} vpp={best.vpp} mb={best.micro_batch} "
               f"at {best.tokens_per_s_per_gpu:,.0f} tokens/s/GPU, MFU {best.mfu:.1%}")
    for note in job_notes(job, cluster, data.calibration, spec):
        typer.echo(f"note: {note}")
    typer.echo(f"wrote {files.html}")
    for path in [*files.pngs.values(), files.candidates_csv, files.scaling_csv, files.runs_csv]:
        if path is not None:
            typer.echo(f"      {path}")
