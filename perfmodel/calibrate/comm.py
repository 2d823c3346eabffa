"""``perfmodel comm``: one collective on a cluster, as nccl-tests would measure it.

The group is all G GPUs with stride 1 (nccl-tests' default placement: ranks fill a node, then
the next). ``size_bytes`` is nccl-tests' ``size`` column for the op; algbw = S / t and
busbw = algbw x op factor (2(n-1)/n all_reduce; (n-1)/n all_gather / reduce_scatter /
all_to_all; 1 send_recv), GB = 1e9 B (NVIDIA/nccl-tests doc/PERFORMANCE.md, REFERENCES.md §3a).

The hardware inputs come from ``perfmodel.estimate.cluster_arrays`` with the calibration
applied the same way ``estimate`` applies it (constants, per-GPU latencies, per-network
congestion). A calibration's ``networks[NAME]`` may also carry the collective fit's
per-fabric values (written by ``perfmodel.calibrate.fit_collectives``): ``nic_efficiency``,
``nvlink_efficiency``, ``scale_out_latency_us``, ``intra_node_latency_us``,
``ring_inter_node``, ``latency_log2_coeff``, ``ring_step_latency_us``, ``ll_latency_us``, ``ll_bandwidth_ratio``,
and op-specific ones prefixed ``all_gather.`` / ``reduce_scatter.`` / ``all_to_all.`` /
``send_recv.`` (all_reduce uses the plain keys); those override the global values for that fabric.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import numpy as np
import typer

from perfmodel.calibration_profile import NETWORK_OP_SPECIFIC, Calibration, load_calibration
from perfmodel.costs.comm import OPS, collective_time_s, op_factor
from perfmodel.errors import InputError
from perfmodel.limits import MAX_BYTES, MAX_GBIT_PER_S, MAX_GPUS, MIN_GBIT_PER_S
from perfmodel.specs.hardware import AcceleratorSpec, ClusterSpec, nodes_holding, nvlink_domain
from perfmodel.units import GB_BYTES, US_S

OP_SPECIFIC = NETWORK_OP_SPECIFIC


def network_key(network: str | None) -> str:
    return (network or "").strip().lower()


def collective_inputs(
    gpu: AcceleratorSpec,
    n_gpus: int,
    gpus_per_node: int,
    scale_out_gbit_per_s_per_node: float | None,
    network: str | None,
    op: str,
    calibration: Calibration,
) -> dict[str, float]:
    """SI inputs of ``collective_time_s`` for a whole-cluster group, calibration applied (the same
    ``Calibration.for_network`` and ``cluster_arrays`` the step model uses)."""
    from perfmodel.estimate import cluster_arrays  # estimate imports the step model; keep it lazy

    constants, spec, shape = calibration.for_network(gpu, network, op)
    cluster = ClusterSpec(
        gpu=spec,
        n_gpus=n_gpus,
        gpus_per_node=gpus_per_node,
        nvlink_domain_gpus=nvlink_domain(spec, gpus_per_node),
        scale_out_gbit_per_s_per_node=scale_out_gbit_per_s_per_node or spec.default_scale_out_gbit_per_s(gpus_per_node),
        scale_out_latency_us=spec.scale_out_latency_us,
        network=network,
    )
    congestion = calibration.network_values(network, op).get("congestion_nodes", calibration.congestion_nodes(network))
    return cluster_arrays(cluster, "bf16", constants, congestion, shape)


def collective_time(op: str, size_bytes, n_gpus: int, inputs: dict[str, float]):
    """nccl-tests time (s) of ``op`` on all ``n_gpus`` (stride 1) for the given inputs."""
    return collective_time_s(
        op,
        np.asarray(size_bytes, dtype=float),
        n_gpus,
        1,
        inputs["nvlink_domain_gpus"],
        inputs["nvlink_bytes_per_s"],
        inputs["nic_bytes_per_s_per_gpu"],
        inputs["intra_latency_s"],
        inputs["inter_latency_s"],
        ring_inter_node=bool(inputs["ring_inter_node"]),
        latency_log2_coeff=inputs["latency_log2_coeff"],
        ring_step_latency_s=inputs["ring_step_latency_s"],
        ll_latency_s=inputs["ll_latency_s"],
        ll_bandwidth_ratio=inputs["ll_bandwidth_ratio"],
        congestion_nodes=inputs["congestion_nodes"],
        congestion_max_nodes=inputs["congestion_max_nodes"],
        job_gpus=n_gpus,  # the group is the whole job: it straddles no domain boundary of its own
    )


def protocol_of(op: str, size_bytes: float, n_gpus: int, inputs: dict[str, float], time_s: float) -> str | None:
    """Which protocol the model ran the collective (of time ``time_s``) with, where the fabric has a fitted
    protocol switch (``ll_bandwidth_ratio`` > 0) and the group crosses NVLink domains:
    'low-latency (LL/LL128)' or 'Simple'; None otherwise."""
    if not inputs.get("ll_bandwidth_ratio", 0.0) > 0 or n_gpus <= inputs["nvlink_domain_gpus"]:
        return None  # no switch fitted, or the group stays inside one NVLink domain, where it does not apply
    simple = float(collective_time(op, size_bytes, n_gpus, {**inputs, "ll_bandwidth_ratio": 0.0}))
    return "low-latency (LL/LL128)" if time_s < simple else "Simple"


#: ops whose nccl-tests size is the whole gathered / scattered / exchanged buffer: nranks equal shares
#: (nccl-tests src/all_gather.cu, reduce_scatter.cu, alltoall.cu: count = size / type size / nranks)
SHARED_BUFFER_OPS = ("all_gather", "reduce_scatter", "all_to_all")


def check_request(op: str, size_bytes: float, n_gpus: int, gpus_per_node: int, scale_out) -> None:
    if op not in OPS:
        raise InputError("op", f"must be one of {', '.join(OPS)} (got {op!r})")
    if not 0 <= size_bytes <= MAX_BYTES:
        raise InputError("bytes", f"must be between 0 and {MAX_BYTES:,} (got {size_bytes})")
    if n_gpus < 2:
        raise InputError("gpus", f"a collective needs at least 2 GPUs (got {n_gpus})")
    if n_gpus > MAX_GPUS:
        raise InputError("gpus", f"must be at most {MAX_GPUS:,} (got {n_gpus:,})")
    if op in SHARED_BUFFER_OPS and size_bytes % n_gpus:
        below = size_bytes - size_bytes % n_gpus
        raise InputError("bytes", f"{op}'s nccl-tests size is the whole buffer, one equal share per rank: it must "
                         f"be a multiple of the {n_gpus} GPUs (got {size_bytes}; the nearest are "
                         f"{below} and {below + n_gpus})")
    if gpus_per_node <= 0:
        raise InputError("gpus_per_node", f"must be a positive integer (got {gpus_per_node})")
    if scale_out is not None and not (MIN_GBIT_PER_S <= scale_out <= MAX_GBIT_PER_S):
        raise InputError("scale_out_gbit_per_s", f"must be a number from {MIN_GBIT_PER_S:g} to {MAX_GBIT_PER_S:,.0f} "
                         f"(got {scale_out})")


def comm_result(
    op: str,
    size_bytes: float,
    n_gpus: int,
    gpus_per_node: int,
    gpu: str | AcceleratorSpec,
    scale_out_gbit_per_s_per_node: float | None = None,
    network: str | None = None,
    calibration: Calibration | None = None,
) -> dict[str, float]:
    """``{"time_s", "algbw_gb_per_s", "busbw_gb_per_s"}`` as nccl-tests defines them."""
    return _comm(op, size_bytes, n_gpus, gpus_per_node, gpu, scale_out_gbit_per_s_per_node, network, calibration)[0]


def _comm(op, size_bytes, n_gpus, gpus_per_node, gpu, scale_out_gbit_per_s_per_node, network, calibration):
    """(``comm_result``'s dict, the collective inputs it was costed with)."""
    from perfmodel.catalog import load_gpu
    from perfmodel.specs.hardware import check_network_name, check_node_size

    check_request(op, size_bytes, n_gpus, gpus_per_node, scale_out_gbit_per_s_per_node)
    check_network_name(network)
    spec = gpu if isinstance(gpu, AcceleratorSpec) else load_gpu(gpu)
    check_node_size(spec, gpus_per_node, scale_out_gbit_per_s_per_node)
    cal = calibration if calibration is not None else load_calibration(None)
    inputs = collective_inputs(spec, n_gpus, gpus_per_node, scale_out_gbit_per_s_per_node, network, op, cal)
    time_s = float(collective_time(op, size_bytes, n_gpus, inputs))
    algbw = size_bytes / time_s / GB_BYTES if time_s > 0 else 0.0
    out = {
        "time_s": time_s,
        "algbw_gb_per_s": algbw,
        "busbw_gb_per_s": algbw * float(op_factor(op, n_gpus)),
    }
    return out, inputs


def comm_command(
    op: Annotated[str, typer.Option("--op", help=f"Collective: {', '.join(OPS)}.")],
    size_bytes: Annotated[int, typer.Option("--bytes", help="nccl-tests 'size' for the op, bytes.")],
    gpus: Annotated[int, typer.Option("--gpus", help="GPUs in the group (all of the job).")],
    gpus_per_node: Annotated[int, typer.Option("--gpus-per-node", help="GPUs per node.")],
    gpu: Annotated[str, typer.Option("--gpu", help="Catalog GPU name or hardware-profile YAML.")],
    scale_out: Annotated[
        Optional[float], typer.Option("--scale-out-gbit-per-s", help="Total NIC bandwidth per node, Gbit/s.")
    ] = None,
    network: Annotated[Optional[str], typer.Option("--network", help="Scale-out fabric name (e.g. 'EFA').")] = None,
    calibration: Annotated[Optional[Path], typer.Option("--calibration", help="Calibrated profile YAML.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """One collective as nccl-tests would measure it: time, algbw and busbw."""
    from perfmodel.cli import fail

    try:
        cal = load_calibration(calibration)
        out, inputs = _comm(op, size_bytes, gpus, gpus_per_node, gpu, scale_out, network, cal)
    except InputError as exc:
        fail(exc)
        return
    from perfmodel.notes import network_note

    notes = [n for n in (network_note(network, cal),) if n]  # a fabric without a fit: said, never silent
    if as_json:
        # CONTRACT's three keys, and "notes" only where there is one to say
        typer.echo(json.dumps({**out, "notes": notes} if notes else out))
        return
    rows = [
        ("op", op),
        ("size", f"{size_bytes} B"),
        ("gpus", f"{gpus} ({nodes_holding(gpus, gpus_per_node)} node{'s' if gpus > gpus_per_node else ''} x "
                 f"{gpus_per_node})"),
        ("time", f"{out['time_s'] / US_S:.1f} us"),
        ("algbw", f"{out['algbw_gb_per_s']:.2f} GB/s"),
        ("busbw", f"{out['busbw_gb_per_s']:.2f} GB/s"),
    ]
    protocol = protocol_of(op, size_bytes, gpus, inputs, out["time_s"])
    if protocol:  # only fabrics whose nccl-tests logs showed a protocol switch have one
        rows.append(("protocol", protocol))
    width = max(len(k) for k, _ in rows)
    typer.echo("\n".join(f"  {k:<{width}}  {v}" for k, v in rows))
    for note in notes:
        typer.echo(f"note: {note}")
