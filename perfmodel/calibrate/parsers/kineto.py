"""PyTorch-profiler (Kineto) Chrome-trace JSON -> GPU kernel time per category.

Format: REFERENCES.md §3b (HTA test data). ``ts``/``dur`` are µs. Kernel classes follow the
names seen in public profiles: NCCL (``ncclKernel_*``, ``ncclDevKernel_*``), GEMM (cuBLAS
``*gemm*``, ``nvjet_*``, CUTLASS), attention (FlashAttention 2/3/4, mem-efficient ``fmha``,
cuDNN ``sdpa``). Implicit-GEMM convolutions (``sm80_xmma_fprop_implicit_gemm``) count as
gemm: same tensor-core kernels. Kernel times are summed over streams, so with overlap the
total can exceed wall time.
"""
from __future__ import annotations

import gzip
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pandas as pd

from perfmodel.calibrate.parsers.nccl_tests import busbw_factor
from perfmodel.errors import InputError

Category = Literal["gemm", "attention", "nccl", "memory", "other"]
CATEGORIES: tuple[Category, ...] = ("gemm", "attention", "nccl", "memory", "other")

_NCCL_RE = re.compile(r"^nccl|ncclKernel|ncclDevKernel", re.I)
_NCCL_COLL_RE = re.compile(r"nccl(?:Dev)?Kernel_(AllReduce|AllGather|ReduceScatter|SendRecv|"
                           r"Broadcast|Reduce|AllToAll)")
_ATTENTION_RE = re.compile(r"flash_fwd|flash_bwd|flash::|FlashAttn|FlashAttention|fmha|sdpa|"
                           r"flash_attn", re.I)
_GEMM_RE = re.compile(r"gemm|nvjet_", re.I)
_MEMORY_CATS = {"gpu_memcpy", "gpu_memset"}
_STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")

# Kernel-name spelling and torch ``Collective name`` spelling -> nccl-tests collective.
_COLLECTIVES = {
    "allreduce": "all_reduce", "allgather": "all_gather", "allgatherbase": "all_gather",
    "allgatherintotensor": "all_gather", "allgatherintotensorcoalesced": "all_gather",
    "reducescatter": "reduce_scatter", "reducescatterbase": "reduce_scatter",
    "reducescattertensor": "reduce_scatter", "reducescattertensorcoalesced": "reduce_scatter",
    "alltoall": "all_to_all", "alltoallbase": "all_to_all", "alltoallv": "all_to_all",
    "sendrecv": "send_recv", "send": "send_recv", "recv": "send_recv",
    "broadcast": "broadcast", "reduce": "reduce", "allreducecoalesced": "all_reduce",
}
# torch ScalarType names as printed in the ``dtype`` arg -> bytes per element.
_DTYPE_BYTES = {"float": 4, "double": 8, "half": 2, "bfloat16": 2, "long": 8, "int": 4,
                "short": 2, "char": 1, "byte": 1, "bool": 1, "float8_e4m3fn": 1,
                "float8_e5m2": 1, "complexfloat": 8, "complexdouble": 16}
NCCL_COLUMNS = ["collective", "bytes", "dtype", "group_size", "dur_s", "algbw_gb_per_s",
                "busbw_gb_per_s"]


def classify_kernel(name: str, cat: str = "kernel") -> tuple[Category, str | None]:
    """(category, collective) of one GPU event; collective only for NCCL kernels."""
    if cat in _MEMORY_CATS:
        return "memory", None
    if _NCCL_RE.search(name):
        m = _NCCL_COLL_RE.search(name)
        return "nccl", _COLLECTIVES.get(m.group(1).lower()) if m else None
    if _ATTENTION_RE.search(name):
        return "attention", None
    if _GEMM_RE.search(name) and "gemv" not in name.lower():
        return "gemm", None
    return "other", None


@dataclass(frozen=True)
class KinetoSummary:
    """What a calibrator needs from one rank's trace."""

    kernel_time_s: dict[str, float]
    """Summed GPU time per category (``CATEGORIES``), seconds."""
    kernel_count: dict[str, int]
    """GPU events per category."""
    nccl_time_s: dict[str, float]
    """Summed NCCL kernel time per collective (``unknown`` if the name does not say)."""
    step_time_s: dict[int, float]
    """Duration of each ``ProfilerStep#N`` annotation, by N, seconds."""
    device_name: str | None
    """``deviceProperties[0].name`` when the trace has it."""
    world_size: int | None
    """``distributedInfo.world_size`` when present."""
    nccl_collectives: pd.DataFrame
    """One row per NCCL kernel carrying torch's collective metadata; ``NCCL_COLUMNS``.
    ``bytes`` follows nccl-tests' size: total for all_gather (out elements) and
    reduce_scatter / all_to_all (in elements), the buffer for the others."""


def _load(path: Path) -> dict:
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8") as fh:
            doc = json.load(fh)
    except json.JSONDecodeError as e:
        raise InputError("trace", f"not JSON: {e.msg} (column {e.colno})",
                         f"{path}:{e.lineno}") from None
    except (OSError, UnicodeDecodeError) as e:  # gzip.BadGzipFile is an OSError
        raise InputError("trace", f"cannot read as (gzipped) JSON text: {e}", f"{path}:1") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise InputError("traceEvents", "missing: not a Chrome trace (expected an object with "
                         "a 'traceEvents' list)", f"{path}:1")
    return doc


def _collective_row(args: dict, dur_s: float) -> dict | None:
    coll = _COLLECTIVES.get(re.sub(r"[^a-z]", "", str(args.get("Collective name", "")).lower()))
    typesize = _DTYPE_BYTES.get(str(args.get("dtype", "")).lower())
    group = int(args.get("Group size") or 0)
    if coll is None or typesize is None or group < 1 or dur_s <= 0:
        return None
    n_in, n_out = int(args.get("In msg nelems", 0)), int(args.get("Out msg nelems", 0))
    nelems = n_out if coll == "all_gather" else n_in if coll in (
        "reduce_scatter", "all_to_all") else max(n_in, n_out)
    size_bytes = nelems * typesize
    algbw = size_bytes / dur_s / 1e9
    return {"collective": coll, "bytes": size_bytes, "dtype": args.get("dtype"),
            "group_size": group, "dur_s": dur_s, "algbw_gb_per_s": algbw,
            "busbw_gb_per_s": algbw * busbw_factor(coll, group)}


def parse_kineto_trace(path: str | Path) -> KinetoSummary:
    """Summarise a Chrome-trace JSON (or ``.json.gz``) written by ``torch.profiler``."""
    path = Path(path)
    doc = _load(path)
    time_s = dict.fromkeys(CATEGORIES, 0.0)
    count = dict.fromkeys(CATEGORIES, 0)
    nccl_time_s: dict[str, float] = {}
    steps: dict[int, float] = {}
    colls: list[dict] = []
    for ev in doc["traceEvents"]:
        if not isinstance(ev, dict) or ev.get("ph") != "X":
            continue
        cat, name = ev.get("cat", ""), ev.get("name", "")
        dur_s = float(ev.get("dur", 0.0)) * 1e-6
        if cat in ("user_annotation", "cpu_op"):
            m = _STEP_RE.match(name)
            if m:
                steps[int(m.group(1))] = dur_s
            continue
        if cat != "kernel" and cat not in _MEMORY_CATS:
            continue
        category, coll = classify_kernel(name, cat)
        time_s[category] += dur_s
        count[category] += 1
        if category == "nccl":
            args = ev.get("args") or {}
            row = _collective_row(args, dur_s) if "Collective name" in args else None
            key = row["collective"] if row else coll or "unknown"
            nccl_time_s[key] = nccl_time_s.get(key, 0.0) + dur_s
            if row:
                colls.append(row)
    props = doc.get("deviceProperties") or []
    dist = doc.get("distributedInfo") or {}
    return KinetoSummary(
        kernel_time_s=time_s, kernel_count=count, nccl_time_s=nccl_time_s, step_time_s=steps,
        device_name=props[0].get("name") if props and isinstance(props[0], dict) else None,
        world_size=dist.get("world_size"),
        nccl_collectives=pd.DataFrame(colls, columns=NCCL_COLUMNS))
