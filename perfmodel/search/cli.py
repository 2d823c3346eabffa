"""``perfmodel recommend``: search the configuration space and print the best candidates.

Registered on the main app in ``perfmodel/cli.py``. Bad input ends in one ``error:`` line and
exit 2 (the helpers of ``perfmodel.cli``); no feasible configuration exits 1 (CONTRACT.md).

The option types come from ``perfmodel.cli_options``, shared with ``perfmodel estimate``.
"""
from __future__ import annotations

import json
from typing import Annotated, Optional

import typer

from perfmodel.cli_options import (  # noqa: E402
    BatchOpt, CalibrationOpt, FlashOpt, FrameworkOpt, GpnOpt, GpuOpt, JsonOpt, ModelOpt, NetworkOpt, PrecisionOpt,
    ScaleOutOpt, SeqOpt, parse_gpu_counts,
)
from perfmodel.cli_options import OptionalGpusOpt as GpusOpt  # noqa: E402


def _table(df, cols: list[tuple[str, str, str]]) -> str:
    """Fixed-width table: (header, column, format)."""
    cells = [[h for h, _, _ in cols]]
    for i, rec in enumerate(df.to_dict("records"), start=1):
        row = []
        for _, k, fmt in cols:
            v = i if k == "#" else rec[k]
            if k == "sp":
                v = "on" if v else "off"
            elif k == "cp_kind" and rec.get("cp", 1) == 1:
                v = "-"  # no context parallelism: no kind
            elif k == "zeropp" and str(v) == "":
                v = "-"  # no ZeRO++ part: a blank cell would shift a whitespace-split reading
            row.append(format(v, fmt) if fmt else str(v))
        cells.append(row)
    widths = [max(len(r[j]) for r in cells) for j in range(len(cols))]
    return "\n".join("  " + "  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in cells)


def recommend(
    model: ModelOpt,
    gpu: GpuOpt,
    global_batch: BatchOpt,
    gpus: GpusOpt = None,
    seq_len: SeqOpt = 2048,
    gpus_per_node: GpnOpt = None,
    scale_out_gbit_per_s: ScaleOutOpt = None,
    network: NetworkOpt = None,
    precision: PrecisionOpt = None,
    framework: FrameworkOpt = "megatron-lm",
    flash_attention: FlashOpt = None,
    calibration: CalibrationOpt = None,
    top: Annotated[int, typer.Option("--top", help="How many candidates to show.")] = 5,
    json_out: JsonOpt = False,
    objective: Annotated[
        str, typer.Option("--objective", help="throughput (tokens/s/GPU), time-to-train or cost.")
    ] = "throughput",
    train_tokens: Annotated[
        Optional[float], typer.Option("--train-tokens", help="Tokens to train (time-to-train, cost).")
    ] = None,
    usd_per_gpu_hour: Annotated[
        Optional[float], typer.Option("--usd-per-gpu-hour", help="Price of one GPU-hour (cost).")
    ] = None,
    gpus_range: Annotated[
        Optional[str], typer.Option("--gpus-range", help="Comma list of GPU counts, e.g. 256,512,1024: "
                                    "search each and print the GPUs-vs-throughput Pareto front.")
    ] = None,
    emit: Annotated[
        Optional[str], typer.Option("--emit", help="Print the winner as megatron flags, a deepspeed JSON "
                                    "config or a torchtitan TOML section.")
    ] = None,
):
    """Search tp/pp/dp/cp/vpp/micro-batch/SP/ZeRO/recompute for the fastest configuration that fits."""
    from pydantic import ValidationError

    from perfmodel.calibration_profile import load_calibration
    from perfmodel.catalog import load_model
    from perfmodel.cli import build_cluster, build_job, fail, nothing_usable
    from perfmodel.errors import InputError
    from perfmodel.notes import job_notes
    from perfmodel.search.emit import EMIT_TARGETS
    from perfmodel.search.emit import emit as emit_text
    from perfmodel.search.emit import emit_notes, megatron_overlap_hint
    from perfmodel.search.engine import OBJECTIVES, run_search
    from perfmodel.search.explain import describe, explain

    try:
        spec = load_model(model)
        counts = parse_gpu_counts(gpus_range, "gpus_range")
        if gpus is None and counts is None:
            raise InputError("gpus", "is required (or give --gpus-range)")
        if top <= 0:
            raise InputError("top", f"must be a positive integer (got {top})")
        if objective not in OBJECTIVES:
            raise InputError("objective", f"must be one of {', '.join(OBJECTIVES)} (got {objective!r})")
        if emit is not None and emit not in EMIT_TARGETS:
            raise InputError("emit", f"must be one of {', '.join(EMIT_TARGETS)} (got {emit!r})")
        if counts is not None and gpus is not None:
            counts = sorted(set(counts) | {gpus})
        base = gpus if gpus is not None else max(counts)
        cluster = build_cluster(gpu, base, gpus_per_node, scale_out_gbit_per_s, network)
        job = build_job(global_batch, seq_len, precision, framework, cluster.gpu, flash_attention)
        cal = load_calibration(calibration)
        res = run_search(spec, cluster, job, cal, gpu_counts=counts, objective=objective,
                         train_tokens=train_tokens, usd_per_gpu_hour=usd_per_gpu_hour, top=max(top, 2),
                         progress=not json_out)  # with --json, stderr stays empty on success
    except (InputError, ValidationError) as exc:
        fail(exc)

    # --gpus with --gpus-range searches both: the header names every count searched
    where = f"{spec.name} on {','.join(map(str, counts)) if counts else gpus} x {cluster.gpu.name}"
    # what changes the answer without an error (the stack, the fabric): --json's "notes" list
    notes_out = job_notes(job, cluster, cal, spec)
    if res.n_feasible == 0:
        if json_out:
            typer.echo(json.dumps({**res.contract_json(top), "notes": notes_out}))
        why = res.why_none_feasible(cluster.gpu.hbm_capacity_gib)
        nothing_usable(f"no feasible configuration for {where} (global batch {global_batch}, seq len {seq_len}): {why}")

    best = res.candidates.iloc[0]
    # Blackwell or later: the GPU profile states peaks for its microscaling formats (mxfp8)
    best_row = {**best.to_dict(), "gpus_per_node": cluster.gpus_per_node,
                "nvlink_domain_gpus": cluster.nvlink_domain_gpus,
                "blackwell_or_later": "mxfp8" in cluster.gpu.peak_dense_tflop_per_s}
    emitted = emit_text(emit, spec, job, best_row) if emit else None
    notes = emit_notes(emit, spec, job, best_row, cluster) if emit else []
    if json_out:
        out = {**res.contract_json(top), "notes": notes_out}
        if emitted is not None:
            out["emit"] = {"target": emit, "text": emitted, "notes": notes}
        typer.echo(json.dumps(out, indent=2))
        return

    df = res.candidates.head(top)
    typer.echo(f"{where}, global batch {global_batch}, seq len {seq_len}, {job.precision}, {framework}")
    for note in notes_out:
        typer.echo(f"note: {note}")
    typer.echo(
        f"searched {res.n_evaluated:,} configurations in {res.search_time_s:.2f} s: {res.n_feasible:,} fit "
        f"(objective: {objective})"
    )
    cols = [("#", "#", "")]
    if counts is not None:
        cols.append(("gpus", "n_gpus", ""))
    cols += [("tp", "tp", ""), ("pp", "pp", ""), ("dp", "dp", ""), ("cp", "cp", ""), ("vpp", "vpp", ""),
             ("mb", "micro_batch", ""), ("sp", "sp", ""), ("zero", "zero_stage", ""), ("recompute", "recompute", "")]
    # the long-context and ZeRO++ dimensions, shown when any listed candidate uses them
    if (df["zeropp"].astype(str) != "").any():
        cols.append(("zero++", "zeropp", ""))
    if "cp_kind" in df and (df["cp"] > 1).any():
        cols.append(("cp kind", "cp_kind", ""))
    if "offload_fraction" in df and (df["offload_fraction"] > 0).any():
        cols.append(("offload", "offload_fraction", ".2f"))
    cols += [("step s", "iteration_time_s", ".3f"), ("tok/s/GPU", "tokens_per_s_per_gpu", ",.0f"),
             ("MFU", "mfu", ".1%"), ("GiB", "memory_gib", ".1f")]
    if train_tokens is not None:
        df = df.assign(time_to_train_h=df["time_to_train_s"] / 3600.0)
        cols.append(("train h", "time_to_train_h", ",.1f"))
    if usd_per_gpu_hour is not None and train_tokens is not None:
        cols.append(("cost $", "cost_usd", ",.0f"))
    typer.echo(_table(df, cols))
    typer.echo("time breakdown (s) and memory breakdown (GiB):")
    bcols = [("#", "#", "")] + [
        (k.removesuffix("_s"), k, ".3f") for k in (
            "compute_s", "recompute_s", "tp_comm_s", "cp_comm_s", "offload_s", "pp_comm_s", "bubble_s",
            "dp_comm_s", "optimizer_s", "overhead_s")
    ] + [(k.removesuffix("_gib"), k, ".1f") for k in (
        "weights_gib", "gradients_gib", "optimizer_gib", "activations_gib", "reserved_gib")]
    typer.echo(_table(df, bcols))
    typer.echo("why:")
    for line in explain(res, cluster.gpus_per_node, job.framework):
        typer.echo(f"  {line}")
    typer.echo("rejected: " + res.commonest_rejections(4))
    if res.pareto is not None and not res.pareto.empty:
        missing = res.infeasible_gpu_counts()
        if missing:
            typer.echo(f"no feasible configuration at {', '.join(map(str, missing))} GPUs (left out of the front)")
        typer.echo("Pareto front, GPUs vs total tokens/s (fastest configuration per GPU count):")
        typer.echo(_table(res.pareto, [
            ("gpus", "n_gpus", ""), ("tok/s", "tokens_per_s", ",.0f"), ("tok/s/GPU", "tokens_per_s_per_gpu", ",.0f"),
            ("MFU", "mfu", ".1%"), ("tp", "tp", ""), ("pp", "pp", ""), ("dp", "dp", ""), ("cp", "cp", ""),
            ("vpp", "vpp", ""), ("mb", "micro_batch", ""), ("sp", "sp", ""), ("zero", "zero_stage", ""),
            ("recompute", "recompute", ""),
            # the long-context and offload dimensions, where a point of the front uses them (as the top table)
            *([("cp kind", "cp_kind", "")] if (res.pareto["cp"] > 1).any() else []),
            *([("offload", "offload_fraction", ".2f")] if (res.pareto["offload_fraction"] > 0).any() else []),
            *([("zero++", "zeropp", "")] if (res.pareto["zeropp"].astype(str) != "").any() else []),
        ]))
    if emitted is not None:
        # the winner's GPU count where several were searched (--gpus-range)
        typer.echo(f"{emit} configuration for {describe({**best.to_dict(), '_multi': counts is not None})}:")
        typer.echo(emitted)
        hint = megatron_overlap_hint(job, best) if emit == "megatron" else None
        if hint:
            typer.echo(hint)
        for note in notes:
            typer.echo(f"# note: {note}")
