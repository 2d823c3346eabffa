"""The command line: thin typer commands over the library.

Bad input of any kind ends in one ``error: <field>: <rule>`` line on stderr and exit code 2
(CONTRACT.md); a run that worked but found nothing usable exits 1.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from pydantic import ValidationError

from perfmodel.errors import (
    InputError, NothingUsable, flush_notes, from_validation_error, hold_notes, one_line, release_notes,
)
from perfmodel.limits import MAX_COUNT, MAX_GPUS

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Analytical performance model and parallelism tuner for LLM training.",
    pretty_exceptions_enable=False,
)

from perfmodel.cli_options import (  # noqa: E402  (shared with perfmodel.search.cli)
    BatchOpt, CalibrationOpt, FlashOpt, FrameworkOpt, GpnOpt, GpuOpt, GpusOpt, JsonOpt, ModelOpt, NetworkOpt,
    PrecisionOpt, ScaleOutOpt, SeqOpt, check_zeropp_option, given_on_command_line,
)


def fail(exc: Exception) -> None:
    """Print one error line and exit 2."""
    if isinstance(exc, ValidationError):
        exc = from_validation_error(exc)
    typer.echo(f"error: {one_line(exc)}", err=True)
    raise typer.Exit(2)


def nothing_usable(message: str) -> None:
    """A run that worked but found nothing usable: the inputs' notes, then one error line, exit 1."""
    flush_notes()
    typer.echo(f"error: {one_line(message)}", err=True)
    raise typer.Exit(1)




def build_cluster(gpu: str, gpus: int, gpus_per_node, scale_out, network):
    from perfmodel.catalog import load_gpu
    from perfmodel.specs import ClusterSpec

    if gpus <= 0:
        raise InputError("gpus", f"must be a positive integer (got {gpus})")
    if gpus > MAX_GPUS:
        raise InputError("gpus", f"must be at most {MAX_GPUS:,} (got {gpus:,})")
    if gpus_per_node is not None and gpus_per_node <= 0:
        raise InputError("gpus_per_node", f"must be a positive integer (got {gpus_per_node})")
    if scale_out is not None and not (0 < scale_out < float("inf")):
        raise InputError("scale_out_gbit_per_s", f"must be a positive finite number (got {scale_out})")
    # the node size left out: the GPU's, at most the job's GPUs; the network name and node size checked there
    return ClusterSpec.build(load_gpu(gpu), gpus, gpus_per_node, scale_out, network=network)


def build_job(global_batch, seq_len, precision, framework, gpu=None, flash_attention=None):
    """The job; a precision left out (None) is bf16, or fp16 on a GPU without bf16 tensor cores."""
    from perfmodel.specs import JobSpec

    if precision is None:
        precision = gpu.default_precision if gpu is not None else "bf16"

    for name, value in (("global_batch", global_batch), ("seq_len", seq_len)):
        if value > MAX_COUNT:
            raise InputError(name, f"must be at most {MAX_COUNT:,} (got {value:,})")
    if framework is not None and not framework.strip():
        raise InputError("framework", "must name a training stack (e.g. megatron-lm); an unknown name runs with "
                         "the generic profile, an empty one is a mistake")

    try:
        return JobSpec(global_batch=global_batch, seq_len=seq_len, precision=precision, framework=framework,
                       flash_attention=flash_attention)
    except ValidationError as exc:
        raise from_validation_error(exc) from None


def _fmt_table(rows: list[tuple[str, str]]) -> str:
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"  {k:<{width}}  {v}" for k, v in rows)


@app.command()
def estimate(
    ctx: typer.Context,
    model: ModelOpt,
    gpu: GpuOpt,
    gpus: GpusOpt,
    global_batch: BatchOpt,
    seq_len: SeqOpt = 2048,
    gpus_per_node: GpnOpt = None,
    scale_out_gbit_per_s: ScaleOutOpt = None,
    network: NetworkOpt = None,
    tp: Annotated[int, typer.Option(help="Tensor-parallel size.")] = 1,
    pp: Annotated[int, typer.Option(help="Pipeline-parallel size.")] = 1,
    dp: Annotated[Optional[int], typer.Option(help="Data-parallel size (default: gpus/(tp*pp*cp)).")] = None,
    cp: Annotated[int, typer.Option(help="Context-parallel size.")] = 1,
    vpp: Annotated[int, typer.Option(help="Virtual pipeline stages per rank.")] = 1,
    micro_batch: Annotated[Optional[int], typer.Option("--micro-batch", help="Sequences per micro-batch (default 1).")] = None,
    sp: Annotated[bool, typer.Option("--sp/--no-sp", help="Sequence parallelism (with tp > 1).")] = True,
    zero_stage: Annotated[Optional[int], typer.Option(
        "--zero-stage", help="ZeRO stage 0..3 (default 1; 3 under torchtitan, whose sharding is FSDP).")] = None,
    zeropp: Annotated[Optional[str], typer.Option("--zeropp", help="Comma list of qwz,hpz,qgz (ZeRO-3).")] = None,
    recompute: Annotated[str, typer.Option(help="none, selective, full or balanced.")] = "none",
    cp_kind: Annotated[str, typer.Option("--cp-kind", help="Context parallelism: ring or ulysses.")] = "ring",
    offload_fraction: Annotated[
        float, typer.Option("--offload-fraction", help="Share of warm-up activations offloaded to host (0..1).")
    ] = 0.0,
    precision: PrecisionOpt = None,
    framework: FrameworkOpt = "megatron-lm",
    flash_attention: FlashOpt = None,
    calibration: CalibrationOpt = None,
    deepspeed_config: Annotated[
        Optional[Path],
        typer.Option("--deepspeed-config", help="DeepSpeed config JSON: sets zero stage, ZeRO++ (qwZ/hpZ/qgZ), "
                     "micro-batch, accumulation and bf16/fp16 (an option given beside it must agree); the framework "
                     "defaults to deepspeed."),
    ] = None,
    json_out: JsonOpt = False,
):
    """Predict one configuration: step time, throughput, MFU and memory, with breakdowns."""
    from perfmodel.calibration_profile import load_calibration
    from perfmodel.catalog import load_model
    from perfmodel.estimate import check_model_split, derive_dp, estimate as run_estimate
    from perfmodel.notes import mfu_peak_text
    from perfmodel.rules import GPUS, default_zero_stage
    from perfmodel.specs import ParallelSpec
    from perfmodel.specs.parallel import zeropp_text

    hpz_size = None
    ds_notes: list[str] = []  # what the DeepSpeed config states that is skipped or filled in
    try:
        if gpus <= 0:
            raise InputError("gpus", f"must be a positive integer (got {gpus})")
        for name, value in (("tp", tp), ("pp", pp), ("dp", dp), ("cp", cp), ("vpp", vpp), ("micro_batch", micro_batch)):
            if value is not None and value <= 0:
                raise InputError(name, f"must be a positive integer (got {value})")
        check_zeropp_option(zeropp)
        if deepspeed_config is not None:
            from perfmodel.deepspeed_config import (
                RECOMPUTE_NOTE, check_hpz_partition, check_options_agree, load_deepspeed_config, precision_notes,
            )

            from perfmodel.rules import NO_ZEROPP_STACKS, ZEROPP_STACKS

            ds = load_deepspeed_config(deepspeed_config)
            # a DeepSpeed config is read by DeepSpeed's engine: the stack is one that trains through it
            if not given_on_command_line(ctx, "framework"):
                framework = "deepspeed"
            elif framework.lower() in NO_ZEROPP_STACKS:
                raise InputError("framework", f"{framework} does not train through DeepSpeed's engine, which reads "
                                 f"--deepspeed-config; give one that does ({', '.join(sorted(ZEROPP_STACKS))})")
            check_options_agree(ds, zero_stage=zero_stage, zeropp=zeropp, precision=precision)
            ds_notes += [*ds.notes, *precision_notes(ds, precision)]
            if not given_on_command_line(ctx, "recompute"):
                ds_notes.append(RECOMPUTE_NOTE + (" (the activation_checkpointing block only tunes it)"
                                                  if ds.activation_checkpointing else ""))
            if ds.autotp_size is not None:
                if given_on_command_line(ctx, "tp") and tp != ds.autotp_size:
                    raise InputError("tp", f"--tp {tp} contradicts deepspeed_config.tensor_parallel.autotp_size "
                                     f"({ds.autotp_size}); give one or the other")
                tp = ds.autotp_size
                sp = sp if given_on_command_line(ctx, "sp") else False  # AutoTP shards the layers, not the sequence
                if gpus % tp:
                    raise InputError("deepspeed_config.tensor_parallel.autotp_size", f"must divide the GPU count "
                                     f"(autotp_size={tp}, gpus={gpus})")
            elif framework.strip().lower() == "deepspeed" and given_on_command_line(ctx, "tp") and tp > 1:
                # DeepSpeed alone shards the layers only through AutoTP (autotp_size defaults to 0: off)
                raise InputError("tp", f"--tp {tp} contradicts the config, which has no tensor_parallel.autotp_size: "
                                 "DeepSpeed alone runs no tensor parallelism without it; add \"tensor_parallel\": "
                                 f"{{\"autotp_size\": {tp}}} or give the stack whose model code splits the layers "
                                 "(--framework megatron-deepspeed)")
            if ds.sequence_parallel_size is not None:  # DeepSpeed-Ulysses over that many ranks
                if given_on_command_line(ctx, "cp") and cp != ds.sequence_parallel_size:
                    raise InputError("cp", f"--cp {cp} contradicts deepspeed_config.sequence_parallel_size "
                                     f"({ds.sequence_parallel_size}); give one or the other")
                if given_on_command_line(ctx, "cp_kind") and cp_kind.strip().lower() != "ulysses":
                    raise InputError("cp_kind", f"--cp-kind {cp_kind} contradicts deepspeed_config."
                                     "sequence_parallel_size (DeepSpeed-Ulysses); give one or the other")
                cp, cp_kind = ds.sequence_parallel_size, "ulysses"
                if gpus % (tp * cp):
                    raise InputError("deepspeed_config.sequence_parallel_size", f"times the tensor-parallel size must "
                                     f"divide the GPU count (sequence_parallel_size={cp}, tp={tp}, gpus={gpus})")
            zero_stage, zeropp, hpz_size = ds.zero_stage, ",".join(sorted(ds.zeropp)), ds.hpz_partition_size
            # an fp8 / fp4 --precision is the matmuls' on top of the config's 16-bit mixed precision
            precision = precision if precision not in (None, "bf16", "fp16") else (ds.precision or precision)
            layout = {"tp": tp, "pp": pp, "dp": dp, "cp": cp, "n_gpus": gpus}
            if dp is not None and GPUS.broken(layout):  # before the config's batch check blames its keys
                raise InputError(GPUS.field, GPUS.message(layout))
            dp_ds = dp if dp is not None else derive_dp(gpus, tp, pp, cp)
            ds = ds.filled(global_batch, micro_batch)  # the Trainer's "auto" batch keys, from the command line
            resolved = ds.batch(dp_ds)
            if resolved is not None:
                implied, resolved_micro, _ = resolved
                if micro_batch is not None and micro_batch != resolved_micro:
                    raise InputError("micro_batch", f"--micro-batch {micro_batch} contradicts the config's batch keys "
                                     f"(micro-batch {resolved_micro} at dp {dp_ds}); give one or the other")
                micro_batch = resolved_micro
                if implied != global_batch:
                    key = "train_batch_size" if ds.train_batch_size is not None else (
                        "gradient_accumulation_steps" if ds.gradient_accumulation_steps is not None
                        else "train_micro_batch_size_per_gpu")
                    world = (f"; DeepSpeed's train_batch_size counts the tensor-parallel ranks too (no mpu), "
                             f"which see the same sequences: {implied * ds.autotp_size} / autotp_size {ds.autotp_size}"
                             if ds.autotp_size and ds.train_batch_size is not None else "")
                    raise InputError(
                        f"deepspeed_config.{key}",
                        f"micro-batch * accumulation * dp ({implied}) must equal --global-batch ({global_batch}){world}",
                    )
            check_hpz_partition(hpz_size, gpus, dp_ds * cp, tp)
            if not given_on_command_line(ctx, "sp") and (framework.lower() == "deepspeed" or cp_kind == "ulysses"):
                sp = False  # DeepSpeed's AutoTP shards the layers, not the sequence; Ulysses excludes Megatron's SP
        if sp and tp == 1 and given_on_command_line(ctx, "sp"):
            raise InputError("sp", "sequence parallelism splits the sequence over the tensor-parallel ranks: "
                             "it needs --tp > 1 (got --sp with tp 1)")
        zero_stage = default_zero_stage(framework) if zero_stage is None else zero_stage
        zeropp = zeropp or ""
        micro_batch = 1 if micro_batch is None else micro_batch
        spec = load_model(model)
        cluster = build_cluster(gpu, gpus, gpus_per_node, scale_out_gbit_per_s, network)
        job = build_job(global_batch, seq_len, precision, framework, cluster.gpu, flash_attention)
        if micro_batch <= 0:
            raise InputError("micro_batch", f"must be a positive integer (got {micro_batch})")
        check_model_split(spec, tp, pp, framework)
        dp_value = dp if dp is not None else derive_dp(gpus, tp, pp, cp)
        try:
            par = ParallelSpec(
                tp=tp, pp=pp, dp=dp_value, cp=cp, vpp=vpp, micro_batch=micro_batch, sp=sp,
                zero_stage=zero_stage, zeropp=zeropp, recompute=recompute, cp_kind=cp_kind,
                offload_fraction=offload_fraction,
            )
        except ValidationError as exc:
            raise from_validation_error(exc) from None
        if deepspeed_config is not None:
            # a DeepSpeed config describes a run its engine must start: what the stack cannot run is a
            # contradiction here, not the what-if estimate costs it as otherwise
            from perfmodel.notes import capability_notes

            cannot = capability_notes(spec, cluster, par, job)
            if cannot:
                raise InputError("deepspeed_config", cannot[0].replace("; it is costed as a what-if", "") +
                                 ", and a DeepSpeed config describes a run its engine must start")
        cal = load_calibration(calibration)
        est = run_estimate(spec, cluster, par, job, cal, hpz_partition_size=hpz_size)
    except (InputError, ValidationError) as exc:
        fail(exc)
    if json_out:
        out = est.to_dict()
        out["notes"] = [*out.get("notes", []), *ds_notes]
        if hpz_size is not None:
            out.setdefault("config", {})["zero_hpz_partition_size"] = hpz_size
        typer.echo(json.dumps(out, indent=2))
        return
    typer.echo(
        f"{spec.name} on {gpus} x {cluster.gpu.name}: tp={par.tp} pp={par.pp} dp={par.dp} cp={par.cp} "
        f"vpp={par.vpp} mb={par.micro_batch} sp={par.sp and par.tp > 1} zero={par.zero_stage} recompute={par.recompute}"
        + (f" zero++={zeropp_text(par.zeropp)}" if par.zeropp else "")
        + (f" hpz_partition={hpz_size}" if hpz_size and hpz_size > 1 else "")
    )
    typer.echo(_fmt_table([
        ("iteration time", f"{est.iteration_time_s:.3f} s"),
        ("tokens/s/GPU", f"{est.tokens_per_s_per_gpu:,.0f}"),
        ("MFU", f"{est.mfu:.1%} (of the {mfu_peak_text(cluster.gpu)}"
                + ("" if job.precision in ("bf16", "fp16") else f", not the {job.precision} one") + ")"),
        ("memory/GPU", f"{est.memory_gib:.1f} GiB of {cluster.gpu.hbm_capacity_gib:g} "
                       f"({'fits' if est.fits_gpu_memory else 'DOES NOT FIT'})"),
        # offloaded activations live in host memory, which fits holds to its own limit
        *([("host memory/GPU", f"{est.host_offload_gib:.1f} GiB offloaded of {est.host_memory_gib_per_gpu:g} "
                               f"({'fits' if est.fits_host_memory else 'DOES NOT FIT'})")]
          if par.offload_fraction > 0 else []),
    ]))
    typer.echo("time breakdown (s):")
    typer.echo(_fmt_table([(k.removesuffix("_s"), f"{v:.4f}") for k, v in est.time_breakdown_s.items()]))
    typer.echo("memory breakdown (GiB):")
    typer.echo(_fmt_table([(k.removesuffix("_gib"), f"{v:.2f}") for k, v in est.memory_breakdown_gib.items()]))
    for note in (*est.notes, *ds_notes):
        typer.echo(f"note: {note}")


def framework_note(framework: str | None, cal=None) -> str | None:
    """``perfmodel.notes.framework_note`` as the text output's ``note:`` line; None when there is none."""
    from perfmodel import notes

    note = notes.framework_note(framework, cal)
    return f"note: {note}" if note else None


@app.command()
def validate(
    runs_csv: Annotated[Path, typer.Argument(help="Runs CSV in the runs schema.")],
    out: Annotated[str, typer.Option("--out", help="Where to write the predictions CSV.")],
    calibration: CalibrationOpt = None,
):
    """Predict every row of a runs CSV and report the error against the measured throughput."""
    import pandas as pd

    from perfmodel.calibration_profile import load_calibration
    from perfmodel.calibrate.parsers.runs_csv import gpu_profile_paths, read_runs_csv
    from perfmodel.errors import file_path_option, output_file, same_file, write_file_atomic
    from perfmodel.validate import error_table, predict_runs

    try:
        out = file_path_option(out, "CSV")
        df = read_runs_csv(runs_csv)
        if out.is_dir():
            raise InputError("out", "is a folder; give a CSV file path", where=str(out))
        output_file(out)  # a device, FIFO or socket, or a file where a folder should be
        inputs = {"the runs CSV being validated": runs_csv, "the --calibration profile": calibration,
                  **{f"the GPU profile {g} that the runs CSV names": g for g in gpu_profile_paths(df)}}
        for what, src in inputs.items():
            if src is not None and same_file(out, src):
                raise InputError("out", f"is {what}; give another file for the predictions", where=str(out))
        pred = predict_runs(df, load_calibration(calibration))
    except (InputError, ValidationError) as exc:
        fail(exc)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        write_file_atomic(out, pred.to_csv(index=False).encode("utf-8"))
    except OSError as exc:
        fail(InputError("out", f"cannot write {out} ({exc.strerror or exc})"))
    table, summary = error_table(df, pred)
    with pd.option_context("display.width", 160, "display.max_rows", 200):
        typer.echo("tokens/s/GPU absolute percentage error per source (-: no row of it scored):")
        typer.echo(table.round(1).to_string(na_rep="-"))
    counts = f"rows {summary['rows']}, ok {summary['ok']} ({summary['ok_fraction']:.1%}), scored {summary['scored']}"
    if summary["scored"] == 0:
        typer.echo(f"{counts}; no row could be scored (see status and reason in {out})")
        if summary["ok"] == 0:
            first = pred["reason"].astype(str).value_counts().index[0] if len(pred) else ""
            nothing_usable(f"no row of {runs_csv} could be costed (most common reason: {first})")
        raise typer.Exit(0)
    typer.echo(
        f"{counts}; MAPE overall {summary['mape_pct']:.1f}%, macro-averaged over sources {summary['macro_mape_pct']:.1f}%"
    )


@app.command()
def calibrate(
    gpu: GpuOpt,
    out: Annotated[str, typer.Option("--out", help="Calibrated profile YAML to write.")],
    nccl_tests: Annotated[list[Path], typer.Option("--nccl-tests", help="nccl-tests output (repeatable).")] = [],
    trace: Annotated[list[Path], typer.Option("--trace", help="PyTorch-profiler trace JSON (repeatable).")] = [],
    log: Annotated[list[Path], typer.Option("--log", help="Training log (repeatable); a Megatron log with its arguments block fits its stack's kernel efficiency.")] = [],
    gemm: Annotated[list[Path], typer.Option("--gemm", help="GEMM benchmark CSV: m,n,k,dtype and time_s, time_ms or time_us (repeatable).")] = [],
    runs: Annotated[list[Path], typer.Option("--runs", help="Runs CSV in the runs schema (repeatable).")] = [],
    gpus_per_node: GpnOpt = None,
    scale_out_gbit_per_s: ScaleOutOpt = None,
    network: NetworkOpt = None,
    calibration: Annotated[Optional[Path], typer.Option(
        "--calibration", help="Calibrated profile to refine instead of the shipped one: what this run fits "
        "replaces its values, the rest stays.")] = None,
):
    """Fit the model to measured inputs and write a calibrated profile (--calibration FILE applies it)."""
    from perfmodel.calibrate.command import run_calibration
    from perfmodel.errors import file_path_option

    try:
        run_calibration(
            gpu=gpu, out=file_path_option(out, "YAML"), nccl_tests=nccl_tests, traces=trace, logs=log, gemms=gemm, runs=runs,
            gpus_per_node=gpus_per_node, scale_out_gbit_per_s=scale_out_gbit_per_s, network=network,
            echo=typer.echo, base_path=calibration,
        )
    except (InputError, ValidationError) as exc:
        fail(exc)
    except NothingUsable as exc:
        nothing_usable(str(exc))


from perfmodel.search.cli import recommend as _recommend  # noqa: E402

app.command("recommend")(_recommend)

from perfmodel.calibrate.comm import comm_command as _comm  # noqa: E402

app.command("comm")(_comm)

from perfmodel.report.command import report as _report  # noqa: E402

app.command("report")(_report)

from perfmodel.report.whatif_command import whatif_command as _whatif  # noqa: E402

app.command("whatif")(_whatif)


def _print_version(value: bool) -> None:
    if not value:
        return
    from perfmodel.calibration_profile import DEFAULT_PROFILE_PATH, load_calibration
    from perfmodel.shipped import data_root, package_version

    created = load_calibration(None).provenance.get("created")
    profile = ("no calibrated profile" if not DEFAULT_PROFILE_PATH.is_file() else
               f"calibrated profile {DEFAULT_PROFILE_PATH}" + (f" of {created}" if created else ""))
    typer.echo(f"perfmodel {package_version()} (GPU catalog {data_root() / 'hardware_profiles'}; {profile})")
    raise typer.Exit(0)


@app.callback()
def _root(version: Annotated[bool, typer.Option(
        "--version", callback=_print_version, is_eager=True,
        help="Print perfmodel's version, where its GPU catalog and calibrated profile are read from, and exit.")]
        = False) -> None:
    """Analytical performance model and parallelism tuner for LLM training."""


def main() -> None:
    """Entry point: every failure ends in one ``error:`` line (exit 2 for bad input), never a traceback.
    The inputs' ``note:`` lines (``errors.say_note``) are held until the command ends: a run refused for
    bad input prints its error line alone."""
    hold_notes()
    code = 1
    try:
        code = _run_app()
    finally:
        release_notes(say=code != 2)
    sys.exit(code)


def _run_app() -> int:
    """The command's exit code; its failures printed as one ``error:`` line."""
    # typer ships its own click; its UsageError is the base of typer.BadParameter
    usage_error = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")
    try:
        code = app(standalone_mode=False)
    except usage_error as exc:  # bad option value, missing option, unknown option
        param = getattr(exc, "param", None)
        # the option as the user types it (--global-batch -> global_batch), not the Python parameter
        opts = [o for o in (getattr(param, "opts", None) or []) if o.startswith("--")]
        name = opts[0][2:].replace("-", "_") if opts else (param.name if param is not None else "")
        field = f"{name}: " if name else ""
        message = " ".join(exc.format_message().split())
        if not message:  # no arguments at all: the help was printed
            return 0
        typer.echo(f"error: {field}{message}", err=True)
        return 2
    except typer.Exit as exc:
        return exc.exit_code
    except typer.Abort:
        typer.echo("error: aborted", err=True)
        return 1
    except InputError as exc:  # anything that escaped a command
        typer.echo(f"error: {exc}", err=True)
        return 2
    except OSError as exc:  # a file that cannot be read or written
        where = f"{exc.filename}: " if getattr(exc, "filename", None) else ""
        typer.echo(one_line(f"error: {where}file: cannot read or write ({exc.strerror or exc})"), err=True)
        return 2
    return code if isinstance(code, int) else 0


if __name__ == "__main__":
    main()
