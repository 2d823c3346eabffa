"""The report's "inputs" tables: model, cluster, job, and the calibration with its fit quality
as its provenance records it (``perfmodel calibrate`` / ``calibration/refit.py`` write it)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from perfmodel.calibration_profile import REPO_ROOT, Calibration
from perfmodel.errors import InputError, read_text_file
from perfmodel.notes import mfu_peak
from perfmodel.specs import ClusterSpec, JobSpec, ModelSpec
from perfmodel.structured_text import load_yaml

Rows = list[tuple[str, str]]


def model_rows(model: ModelSpec) -> Rows:
    return [
        ("name", model.name),
        ("parameters", f"{model.n_params() / 1e9:,.1f} B"),
        ("layers", str(model.n_layers)),
        ("hidden size", str(model.hidden_size)),
        ("FFN hidden size", f"{model.ffn_hidden_size} ({model.mlp})"),
        ("attention heads (KV heads)", f"{model.n_heads} ({model.n_kv_heads})"),
        ("vocabulary", f"{model.vocab_size:,}"),
    ]


def cluster_rows(cluster: ClusterSpec) -> Rows:
    gpu = cluster.gpu
    mfu_precision, mfu_tflop = mfu_peak(gpu)
    nodes = cluster.n_nodes  # the last one may be part-used
    part = "" if cluster.n_gpus % cluster.gpus_per_node == 0 or cluster.n_gpus < cluster.gpus_per_node else \
        f", the last with {cluster.n_gpus % cluster.gpus_per_node}"
    return [
        ("GPU", f"{gpu.display_name} ({gpu.name})"),
        ("GPUs", f"{cluster.n_gpus:,} ({nodes:,} node{'s' if nodes > 1 else ''} x {cluster.gpus_per_node}{part})"),
        ("HBM per GPU", f"{gpu.hbm_capacity_gib:g} GiB, {gpu.hbm_bandwidth_gb_per_s:,.0f} GB/s"),
        (f"dense 16-bit ({mfu_precision}) peak", f"{mfu_tflop:,.0f} TFLOP/s (MFU is relative to it, whatever "
                                                 "the training precision)"),
        ("NVLink per GPU", f"{gpu.intra_node_bandwidth_gb_per_s:,.0f} GB/s (domain {cluster.nvlink_domain_gpus} GPUs)"),
        ("scale-out per node", f"{cluster.scale_out_gbit_per_s_per_node:,.0f} Gbit/s "
                               f"({cluster.scale_out_gbit_per_s_per_node / cluster.gpus_per_node:,.0f} per GPU)"),
        ("network", cluster.network or "not stated"),
    ]


def job_rows(job: JobSpec) -> Rows:
    return [
        ("global batch", f"{job.global_batch:,} sequences ({job.global_batch * job.seq_len / 1e6:,.2f} M tokens)"),
        ("sequence length", f"{job.seq_len:,} tokens"),
        ("precision", job.precision),
        ("framework", job.framework),
    ]


def _collectives_quality(ref: str) -> str | None:
    """Median of the per-file median |relative error| of a collectives fit the profile points to."""
    path = Path(ref) if Path(ref).is_absolute() else REPO_ROOT / ref
    # a description line of the report, never its failure: an unreadable or odd file just goes unmentioned
    try:
        prov = (load_yaml(read_text_file(path, "calibration.provenance.collectives"), "collectives", str(path))
                or {}).get("provenance", {})
        errs = [float(v) for v in (prov.get("file_median_abs_error") or {}).values()]
    except (InputError, AttributeError, TypeError, ValueError):
        return None
    if not errs or not all(np.isfinite(errs)):
        return None
    return f"{len(errs)} nccl-tests files, median |error| {np.median(errs):.1%} (worst file {max(errs):.1%})"


def calibration_rows(cal: Calibration, source: str) -> Rows:
    """Where the calibration comes from and how well it fitted its inputs."""
    prov = cal.provenance or {}
    rows: Rows = [("profile", source)]
    if prov.get("created") or prov.get("date"):
        rows.append(("created", str(prov.get("created") or prov.get("date"))))
    inputs = prov.get("inputs") or []
    if inputs:
        desc = ", ".join(f"{i.get('kind', '?')}: {Path(str(i.get('path', '?'))).name} ({i.get('points', '?')} points)"
                         for i in inputs[:6])
        more = f" and {len(inputs) - 6} more" if len(inputs) > 6 else ""
        rows.append(("fitted on", desc + more))
    # a profile written by calibrate keeps its base profile's provenance: figures about inputs of a kind
    # this profile was not itself fitted on describe the base, before this calibration changed it
    kinds = {str(i.get("kind", "")) for i in inputs}
    own_nccl = [float(i["median_abs_err_pct_ge_1MiB"]) for i in inputs
                if i.get("kind") == "nccl-tests" and i.get("median_abs_err_pct_ge_1MiB") is not None]
    if own_nccl:
        rows.append(("collectives fit quality", f"{len(own_nccl)} nccl-tests file{'s' * (len(own_nccl) > 1)}, median |error| "
                     f"{np.median(own_nccl):.2f}% (worst file {max(own_nccl):.2f}%), sizes >= 1 MiB"))
    inherited = " (of the base profile, before this calibration)"
    mape = prov.get("runs_mape_pct_by_source") or {}
    if mape:
        vals = np.array([float(v) for v in mape.values()])
        worst = max(mape, key=lambda k: float(mape[k]))
        rows.append(("runs fit quality" + ("" if (not inputs or "runs" in kinds) else inherited),
                     f"tokens/s/GPU MAPE macro-averaged over {len(vals)} sources {vals.mean():.1f}%, "
                     f"median source {np.median(vals):.1f}%, worst {worst} {float(mape[worst]):.1f}%"))
    errs = prov.get("file_median_abs_error") or {}
    label = "collectives fit quality" + (inherited if own_nccl else "")
    if errs:
        e = np.array([float(v) for v in errs.values()])
        rows.append((label, f"{e.size} files, median |error| {np.median(e):.1%}"))
    elif isinstance(prov.get("collectives"), str):
        quality = _collectives_quality(prov["collectives"])
        if quality:
            rows.append((label, quality))
    if len(rows) == 1:
        rows.append(("fit quality", "not recorded in this profile's provenance"))
    return rows

