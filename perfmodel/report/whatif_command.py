"""``perfmodel whatif``: sweep one or two variables, print the table, write CSV + PNG to --out."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from perfmodel.cli_options import (
    BatchOpt, CalibrationOpt, FlashOpt, FrameworkOpt, GpnOpt, GpuOpt, GpusOpt, JsonOpt, ModelOpt, NetworkOpt,
    PrecisionOpt, ScaleOutOpt, SeqOpt, check_zeropp_option, given_on_command_line,
)

CASTS = {"gpus": int, "seq_len": int, "global_batch": int, "scale_out_gbit_per_s": float,
         "gpu": str, "calibration": str, "zeropp_on": str}


def parse_vary(items: list[str]) -> dict[str, list]:
    """``["gpu=h100-sxm5-80gb,h200-sxm-141gb", "gpus=256,512"]`` -> {name: [values]}."""
    from perfmodel.errors import InputError
    from perfmodel.whatif import VARIABLES

    out: dict[str, list] = {}
    for item in items:
        name, sep, values = item.partition("=")
        name = name.strip().replace("-", "_")
        if not sep or name not in VARIABLES:
            raise InputError("vary", f"must be NAME=V1,V2,... with NAME one of {', '.join(VARIABLES)} (got {item!r})")
        if name in out:
            raise InputError(f"vary.{name}", "given twice; list all its values in one --vary NAME=V1,V2,...")
        listed = [v.strip() for v in values.split(",")]
        if not all(listed):  # "8,,16" or "8,": a value left out is a typo, not one value fewer
            raise InputError(f"vary.{name}", f"has an empty item: give NAME=V1,V2,... (got {values!r})")
        try:
            out[name] = [CASTS[name](v) for v in listed]
        except ValueError:
            kind = "whole numbers" if CASTS[name] is int else "numbers"
            raise InputError(f"vary.{name}", f"values must be {kind} (got {values!r})") from None
    return out


#: options that describe the one configuration of --mode fixed
FIXED_ONLY = ("tp", "pp", "cp", "vpp", "micro_batch", "sp", "zero_stage", "recompute", "cp_kind", "zeropp",
              "offload_fraction")


def whatif_command(
    ctx: typer.Context,
    model: ModelOpt,
    gpu: GpuOpt,
    gpus: GpusOpt,
    global_batch: BatchOpt,
    vary: Annotated[list[str], typer.Option("--vary", help="NAME=V1,V2,... (once or twice); NAME: gpus, gpu, "
                                            "scale_out_gbit_per_s, seq_len, global_batch, zeropp_on, calibration.")],
    mode: Annotated[str, typer.Option("--mode", help="best (search at every point) or fixed (the --tp/--pp/... "
                                      "configuration, dp re-derived).")] = "best",
    seq_len: SeqOpt = 2048,
    gpus_per_node: GpnOpt = None,
    scale_out_gbit_per_s: ScaleOutOpt = None,
    network: NetworkOpt = None,
    precision: PrecisionOpt = None,
    framework: FrameworkOpt = "megatron-lm",
    flash_attention: FlashOpt = None,
    calibration: CalibrationOpt = None,
    tp: Annotated[int, typer.Option(help="Tensor-parallel size (mode fixed).")] = 1,
    pp: Annotated[int, typer.Option(help="Pipeline-parallel size (mode fixed).")] = 1,
    cp: Annotated[int, typer.Option(help="Context-parallel size (mode fixed).")] = 1,
    vpp: Annotated[int, typer.Option(help="Virtual pipeline stages (mode fixed).")] = 1,
    micro_batch: Annotated[int, typer.Option("--micro-batch", help="Sequences per micro-batch (mode fixed).")] = 1,
    sp: Annotated[bool, typer.Option("--sp/--no-sp", help="Sequence parallelism (mode fixed).")] = True,
    zero_stage: Annotated[Optional[int], typer.Option("--zero-stage", help="ZeRO stage 0..3 (mode fixed; default 1, "
                                                      "3 under torchtitan, which has ZeRO 0 or 3 only).")] = None,
    recompute: Annotated[str, typer.Option(help="Recompute mode (mode fixed).")] = "none",
    cp_kind: Annotated[str, typer.Option("--cp-kind", help="Context parallelism: ring or ulysses (mode fixed).")] = "ring",
    zeropp: Annotated[Optional[str], typer.Option("--zeropp", help="Comma list of qwz,hpz,qgz (mode fixed, "
                                                   "ZeRO-3).")] = None,
    offload_fraction: Annotated[float, typer.Option(
        "--offload-fraction", help="Share of warm-up activations offloaded to host, 0..1 (mode fixed).")] = 0.0,
    out: Annotated[Optional[str], typer.Option("--out", help="Folder for whatif.csv and whatif.png.")] = None,
    json_out: JsonOpt = False,
):
    """What would another GPU count, GPU, network, sequence length, batch, ZeRO++ or calibration buy?"""
    import pandas as pd
    from pydantic import ValidationError

    from perfmodel.calibration_profile import load_calibration
    from perfmodel.catalog import load_model
    from perfmodel.cli import build_cluster, build_job, fail, nothing_usable
    from perfmodel.errors import InputError, from_validation_error
    from perfmodel.estimate import check_model_split, check_precision
    from perfmodel.specs import ParallelSpec
    from perfmodel.whatif import check_mode, whatif

    try:
        if out is not None:
            if not out.strip():  # an unset shell variable, not "here" (as report): never fill the current folder
                raise InputError("out", "must name a folder (got an empty value)")
            out = Path(out)
        sweep = parse_vary(vary)
        spec = load_model(model)
        cluster = build_cluster(gpu, gpus, gpus_per_node, scale_out_gbit_per_s, network)
        job = build_job(global_batch, seq_len, precision, framework, cluster.gpu, flash_attention)
        if "gpu" not in sweep:  # every point runs on the base GPU: a precision it lacks is bad input
            check_precision(cluster.gpu, job.precision)
        par = None
        check_mode(mode)
        check_zeropp_option(zeropp)
        if mode != "fixed":  # the search picks the configuration at each point: a given one would be ignored
            given = [n for n in FIXED_ONLY if given_on_command_line(ctx, n)]
            if given:
                raise InputError(given[0], f"--{given[0].replace('_', '-')} describes the configuration of --mode "
                                 f"fixed; --mode {mode} searches the configuration at every point")
        if mode == "fixed":
            try:
                # a ZeRO stage left out is the stack's (whatif.default_zero_stage)
                stage = {} if zero_stage is None else {"zero_stage": zero_stage}
                par = ParallelSpec(tp=tp, pp=pp, cp=cp, vpp=vpp, micro_batch=micro_batch, sp=sp, **stage,
                                   recompute=recompute, cp_kind=cp_kind, zeropp=zeropp or "",
                                   offload_fraction=offload_fraction)
            except ValidationError as exc:
                raise from_validation_error(exc) from None
            # the configuration against the model itself (tp divides the heads, pp the layers):
            # bad input for every point, not an infeasible sweep
            check_model_split(spec, tp, pp, framework)
        cal = load_calibration(calibration)
        try:
            df = whatif(spec, cluster, job, sweep, mode=mode, parallel=par, calibration=cal,
                        gpu_precision=precision is None)
        except InputError as exc:  # the API's sweep.NAME is this command's --vary NAME
            if exc.field.startswith("sweep."):
                raise InputError("vary." + exc.field.removeprefix("sweep."), exc.rule, exc.where) from None
            raise
    except (InputError, ValidationError) as exc:
        fail(exc)
    feasible = bool((df["status"] == "ok").any())
    if out is not None and feasible:  # an all-infeasible sweep writes nothing (exit 1 below)
        from perfmodel.report.figures import png_bytes
        from perfmodel.report.plots_whatif import whatif_figure

        from perfmodel.errors import output_file, output_folder, refuse_replacing_inputs, write_file_atomic

        if out.exists() and not out.is_dir():
            fail(InputError("out", "is a file; give a folder for whatif.csv and whatif.png", where=str(out)))
        context = (f"{spec.name} on {cluster.n_gpus:,} x {cluster.gpu.name}, seq len {job.seq_len:,}, global batch "
                   f"{job.global_batch:,}, {job.framework}")
        if par is not None:  # the fixed configuration (dp re-derived at each point)
            context += (f"; fixed: tp{par.tp} pp{par.pp}" + (f" cp{par.cp}-{par.cp_kind}" if par.cp > 1 else "")
                        + (f" vpp{par.vpp}" if par.vpp > 1 else "") + f" mb{par.micro_batch} zero{par.zero_stage}"
                        + (f" zero++({par.zeropp})" if par.zeropp else "") + f" recompute {par.recompute}")
        files = {"whatif.png": png_bytes(whatif_figure(df, context=context)),
                 "whatif.csv": df.to_csv(index=False).encode("utf-8")}
        try:
            output_folder(out)
            # the calibration, model or GPU file, or a file a --vary point names (a calibration what-if)
            given = [calibration, model, gpu, *(str(v) for vals in sweep.values() for v in vals)]
            refuse_replacing_inputs(out, files, given)
            for name in files:  # a folder, device or FIFO in the way fails before anything is written
                if (out / name).is_dir():
                    raise InputError("out", "cannot write the what-if (Is a directory)", where=str(out / name))
                output_file(out / name)
        except InputError as exc:
            fail(exc)
        try:
            out.mkdir(parents=True, exist_ok=True)
            for name, content in files.items():
                write_file_atomic(out / name, content)
        except OSError as exc:
            fail(InputError("out", f"cannot write the what-if ({exc.strerror})",
                            where=str(exc.filename2 or exc.filename or out)))
    if json_out:  # stdout is the one JSON object; the notes are in it, not on stderr
        typer.echo(json.dumps({"mode": mode, "sweep": list(sweep), "notes": df.attrs["notes"],
                               "points": json.loads(df.to_json(orient="records"))}, indent=2))
    else:
        # the precision column where it differs between points (no --precision: each GPU's default)
        shown_precision = ["precision"] if "precision" in df and df["precision"].nunique() > 1 else []
        # the CP kind, ZeRO++ and offload columns where a point uses them
        extra = [k for k, used in (("cp_kind", (df["cp"].fillna(1) > 1).any()),
                                   ("zeropp", (df["zeropp"].fillna("").astype(str) != "").any()),
                                   ("offload_fraction", (df["offload_fraction"].fillna(0) > 0).any())) if used]
        # the node size and NIC bandwidth each point was costed with (a GPU swap takes the new GPU's
        # defaults for what was not stated), but a bandwidth that is itself swept
        cluster_cols = [k for k in ("gpus_per_node", "scale_out_gbit_per_s_per_node")
                        if not (k == "scale_out_gbit_per_s_per_node" and "scale_out_gbit_per_s" in sweep)]
        cols = list(sweep) + shown_precision + cluster_cols + [
            "tp", "pp", "dp", "cp", "vpp", "micro_batch", "zero_stage", "recompute", *extra, "tokens_per_s_per_gpu",
            "mfu", "memory_gib", "iteration_time_s", "status"]
        table = df[cols].round({"tokens_per_s_per_gpu": 0, "mfu": 3, "memory_gib": 1, "iteration_time_s": 3})
        # every column and row, however wide (to_string alone never elides; the options make sure)
        with pd.option_context("display.width", None, "display.max_columns", None, "display.max_rows", None):
            typer.echo(table.to_string(index=False))
        for note in df.attrs["notes"]:
            typer.echo(f"note: {note}")
        # why a point is not costed (reason), or what its stack cannot run (note): one line each
        for col, prefix in (("reason", ""), ("note", "note: ")):
            for _, row in df[df[col].fillna("").astype(str) != ""].iterrows():
                point = ", ".join(f"{k}={row[k]}" for k in sweep)
                typer.echo(f"  {point}: {prefix}{row[col]}")
        if out is not None and feasible:
            typer.echo(f"wrote {out / 'whatif.csv'} and {out / 'whatif.png'}")
    if not feasible:
        # each point's reason, in the sweep's order (once each), named by its point
        named = [f"{', '.join(f'{k}={row[k]}' for k in sweep)}: {row['reason']}"
                 for _, row in df.iterrows() if pd.notna(row.get("reason")) and str(row["reason"]).strip()]
        reasons = "; ".join(dict.fromkeys(named))[:300]
        nothing_usable(f"no point of the sweep is feasible{': ' + reasons if reasons else ''}")
