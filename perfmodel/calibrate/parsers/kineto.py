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
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pandas as pd

from perfmodel.calibrate.parsers.json_stream import NotAnObject, ObjectStream, StreamJSONError
from perfmodel.calibrate.parsers.nccl_tests import busbw_factor
from perfmodel.errors import InputError, is_gzip, require_regular_file
from perfmodel.limits import MAX_BYTES, MAX_GPUS

Category = Literal["gemm", "attention", "nccl", "memory", "other"]
CATEGORIES: tuple[Category, ...] = ("gemm", "attention", "nccl", "memory", "other")

_NCCL_RE = re.compile(r"^nccl|ncclKernel|ncclDevKernel", re.I)
_NCCL_COLL_RE = re.compile(r"nccl(?:Dev)?Kernel_(AllReduce|AllGather|ReduceScatter|SendRecv|"
                           r"Broadcast|Reduce|AllToAll)")
# (ROCm: aiter's ``fmha_*`` and Triton's ``attn_fwd`` / ``_attn_bwd`` kernels)
_ATTENTION_RE = re.compile(r"flash_fwd|flash_bwd|flash::|FlashAttn|FlashAttention|fmha|sdpa|"
                           r"flash_attn|(?:^|_)attn_(?:fwd|bwd)", re.I)
# (ROCm: Tensile / hipBLASLt GEMM kernels are named ``Cijk_<A layout>_<B layout>_...``)
_GEMM_RE = re.compile(r"gemm|nvjet_|^Cijk_", re.I)
_MEMORY_CATS = {"gpu_memcpy", "gpu_memset", "memcpy", "memset"}  # case-folded; the last two: PyTorch 1.8/1.9
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
GEMM_COLUMNS = ["op", "m", "n", "k", "batch", "dtype", "time_s", "event", "line"]
#: ATen matmul ops and the positions of their two matrix operands in ``Input Dims`` (record_shapes=True)
_GEMM_OPS = {"aten::mm": (0, 1), "aten::addmm": (1, 2), "aten::bmm": (0, 1), "aten::baddbmm": (1, 2),
             "aten::_scaled_mm": (0, 1)}
#: ``Input type`` spellings -> the GEMM dtypes perfmodel has peaks for
_GEMM_TYPES = {"c10::bfloat16": "bf16", "bfloat16": "bf16", "c10::half": "fp16", "half": "fp16", "float": "fp32",
               **{f"{pre}float8_{kind}": "fp8" for pre in ("c10::", "") for kind in ("e4m3fn", "e5m2", "e4m3fnuz",
                                                                                    "e5m2fnuz")}}


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
    gemm_ops: pd.DataFrame
    """One row per matmul call whose shapes the trace recorded (``record_shapes=True``): an ATen
    ``mm``/``addmm``/``bmm``/``baddbmm``/``_scaled_mm`` op with its ``Input Dims`` and ``Input type``,
    timed by the GPU kernels that carry its ``External id`` (``external id`` in PyTorch 1.8/1.9 traces;
    several kernels, split-K's reduction say, summed); ``GEMM_COLUMNS`` ((m, k) x (k, n), a batch of
    them; ``event``: the op's index in ``traceEvents``, ``line``: the line its ``{`` is on). Ops in another
    dtype or without kernels are left out."""


def _opener(path: Path):
    """gzip.open for a gzip stream (its magic bytes, whatever the suffix), else open."""
    try:
        gzipped = is_gzip(path)
    except OSError:
        gzipped = path.suffix == ".gz"  # the open below reports the error
    return gzip.open if gzipped else open


def _trace_error(path: Path, exc: Exception) -> InputError:
    """The InputError of a trace that cannot be read as a JSON object."""
    if isinstance(exc, NotAnObject):
        return InputError("traceEvents", "missing: not a Chrome trace (expected an object with a 'traceEvents' "
                          "list)", f"{path}:1")
    if isinstance(exc, StreamJSONError):
        return InputError("trace", f"not JSON: {exc.msg} (column {exc.colno})", f"{path}:{exc.lineno}")
    if isinstance(exc, RecursionError):
        return InputError("trace", "nested too deeply to be a Chrome trace", f"{path}:1")
    # gzip.BadGzipFile is an OSError; a cut gzip an EOFError
    return InputError("trace", f"cannot read as (gzipped) JSON text: {exc}", f"{path}:1")


def _check_events_member(meta: dict, streamed: bool, path: Path) -> None:
    """``traceEvents`` must be there, as a list (a list is streamed, not kept in ``meta``)."""
    if "traceEvents" in meta:
        kinds = {dict: "an object", str: "a string", bool: "a boolean", type(None): "null"}
        kind = kinds.get(type(meta["traceEvents"]), "a number")
        raise InputError("traceEvents", f"must be a list of events (got {kind})", f"{path}:1")
    if not streamed:
        raise InputError("traceEvents", "missing: not a Chrome trace (expected an object with "
                         "a 'traceEvents' list)", f"{path}:1")


def _field(ev: dict, key: str, types: tuple[type, ...], what: str, i: int, default=None):
    """``ev[key]`` when it has one of ``types`` (bool never counts as a number), ``default`` when
    absent; otherwise InputError naming ``traceEvents[i].key`` (the caller adds file:line)."""
    if key not in ev:
        return default
    value = ev[key]
    if isinstance(value, bool) or not isinstance(value, types):
        raise InputError(f"traceEvents[{i}].{key}", f"must be {what} (got {value!r:.80})")
    return value


#: longest event a profiler trace can hold: a day, in us (profiles cover steps, not days)
MAX_EVENT_US = 86400e6


def _duration_s(ev: dict, i: int) -> float:
    if "dur" not in ev:
        raise InputError(f"traceEvents[{i}].dur", "missing: a complete ('ph': 'X') event needs a "
                         "duration in us")
    dur = _field(ev, "dur", (int, float), "a number of us", i)
    # the start is not used, but every Chrome-trace event has one, a number of us
    _field(ev, "ts", (int, float), "a number of us (the event's start)", i)
    if not 0.0 <= dur <= MAX_EVENT_US:
        raise InputError(f"traceEvents[{i}].dur", f"must be a duration from 0 to {MAX_EVENT_US:g} us (a day; "
                         f"got {dur!r})")
    return float(dur) * 1e-6


def _whole_arg(args: dict, key: str, minimum: int, i: int, maximum: int = MAX_BYTES) -> int:
    """A whole-number arg (0 when absent) from ``minimum`` to ``maximum``; a float with a whole
    value is accepted."""
    value = args.get(key, 0)
    ok = (not isinstance(value, bool) and isinstance(value, (int, float))
          and math.isfinite(value) and value == int(value) and minimum <= value <= maximum)
    if not ok:
        raise InputError(f"traceEvents[{i}].args.{key}", f"must be a whole number from {minimum} to "
                         f"{maximum} (got {value!r:.80})")
    return int(value)


def _collective_row(args: dict, dur_s: float, i: int) -> dict | None:
    """nccl-tests-style size and bandwidths from torch's collective metadata; None when the
    metadata does not name a known collective, dtype and group (the kernel time still counts)."""
    for key in ("Collective name", "dtype"):
        if key in args and not isinstance(args[key], str):
            raise InputError(f"traceEvents[{i}].args.{key}", f"must be a string (got "
                             f"{args[key]!r:.80})")
    coll = _COLLECTIVES.get(re.sub(r"[^a-z]", "", args.get("Collective name", "").lower()))
    typesize = _DTYPE_BYTES.get(args.get("dtype", "").lower())
    group = _whole_arg(args, "Group size", 0, i, MAX_GPUS)
    n_in = _whole_arg(args, "In msg nelems", 0, i)
    n_out = _whole_arg(args, "Out msg nelems", 0, i)
    if coll is None or typesize is None or group < 1 or dur_s <= 0:
        return None
    nelems = n_out if coll == "all_gather" else n_in if coll in (
        "reduce_scatter", "all_to_all") else max(n_in, n_out)
    size_bytes = nelems * typesize
    algbw = size_bytes / dur_s / 1e9
    return {"collective": coll, "bytes": size_bytes, "dtype": args.get("dtype"),
            "group_size": group, "dur_s": dur_s, "algbw_gb_per_s": algbw,
            "busbw_gb_per_s": algbw * busbw_factor(coll, group)}


def _device_name(doc: dict, path: Path) -> str | None:
    props = doc.get("deviceProperties")
    if props is None:
        return None
    if not isinstance(props, list) or not all(isinstance(p, dict) for p in props):
        raise InputError("deviceProperties", f"must be a list of objects (got {props!r:.80})",
                         f"{path}:1")
    name = props[0].get("name") if props else None
    if name is not None and not isinstance(name, str):
        raise InputError("deviceProperties[0].name", f"must be a string (got {name!r:.80})",
                         f"{path}:1")
    models = sorted({p.get("name").strip() for p in props if isinstance(p.get("name"), str) and p.get("name").strip()})
    if len(models) > 1:  # the first device's model was all that was checked against --gpu
        raise InputError("deviceProperties", f"name more than one GPU model ({', '.join(models)}): a calibration is "
                         "of one GPU, so trace each apart", f"{path}:1")
    return name


def _world_size(doc: dict, path: Path) -> int | None:
    dist = doc.get("distributedInfo")
    if dist is None:
        return None
    if not isinstance(dist, dict):
        raise InputError("distributedInfo", f"must be an object (got {dist!r:.80})", f"{path}:1")
    world = dist.get("world_size")
    if world is not None and (isinstance(world, bool) or not isinstance(world, int) or world < 1):
        raise InputError("distributedInfo.world_size", f"must be a whole number >= 1 (got "
                         f"{world!r:.80})", f"{path}:1")
    return world


def parse_kineto_trace(path: str | Path) -> KinetoSummary:
    """Summarise a Chrome-trace JSON (or ``.json.gz``) written by ``torch.profiler``.

    Every complete (``"ph": "X"``) event's ``cat`` and ``name`` are strings; the events summarised
    (GPU kernels, memcpy/memset, ``ProfilerStep#N``) have a ``dur`` that is a finite number >= 0,
    ``args`` an object, and for an NCCL kernel collective metadata (group size, element counts)
    in whole numbers; a wrong-typed field raises InputError naming the file,
    the event's line and ``traceEvents[i].field``. A trace without any GPU kernel,
    memcpy/memset or ``ProfilerStep#N`` event has nothing to summarise and is an error too.

    The events are read one at a time (``json_stream.ObjectStream``): memory holds the summary, not the
    trace (a 400 MB trace would take ~2 GB as Python objects)."""
    path = Path(path)
    require_regular_file(path, "trace", f"{path}:1")
    meta: dict = {}
    time_s = dict.fromkeys(CATEGORIES, 0.0)
    count = dict.fromkeys(CATEGORIES, 0)
    nccl_time_s: dict[str, float] = {}
    steps: dict[int, float] = {}
    colls: list[dict] = []
    # External id -> (event index, op, dims, dtype, line)
    gemm_calls: dict[int, tuple[int, str, list, str, int]] = {}
    kernel_s_by_id: dict[int, float] = {}  # External id -> summed GPU time of its kernels
    n_events = 0
    try:
        # utf-8-sig: a byte-order mark (an editor's re-save) is not content, as for every other input
        with _opener(path)(path, "rt", encoding="utf-8-sig") as fh:
            stream = ObjectStream(fh)
            for key, value, line in stream.members("traceEvents"):
                if key is not None:
                    meta[key] = value
                    continue
                i, ev = value
                n_events += 1
                if not isinstance(ev, dict):  # the Trace Event Format's events are objects; a number is an edit
                    raise InputError(f"traceEvents[{i}]", f"must be an event object (got {ev!r:.60})",
                                     f"{path}:{line}")
                if ev.get("ph") != "X":
                    continue
                try:
                    _summarise_event(ev, i, line, time_s, count, nccl_time_s, steps, colls, gemm_calls,
                                     kernel_s_by_id)
                except InputError as exc:
                    raise InputError(exc.field, exc.rule, f"{path}:{line}") from None
    except (StreamJSONError, RecursionError, OSError, EOFError, UnicodeDecodeError) as exc:
        raise _trace_error(path, exc) from None
    _check_events_member(meta, stream.streamed, path)
    device_name, world_size = _device_name(meta, path), _world_size(meta, path)
    if not sum(count.values()) and not steps:
        raise InputError("traceEvents", f"no GPU kernel, memcpy/memset or ProfilerStep#N event among "
                         f"{n_events} events: nothing to summarise (record with "
                         "ProfilerActivity.CUDA and a schedule)", f"{path}:1")
    gemms = []
    for ext, (i, op, dims, dtype, line) in gemm_calls.items():
        if kernel_s_by_id.get(ext, 0.0) <= 0.0:
            continue
        try:
            shape = _gemm_shape(op, dims, i)
        except InputError as exc:
            raise InputError(exc.field, exc.rule, f"{path}:{line}") from None
        gemms.append({"op": op, **shape, "dtype": dtype, "time_s": kernel_s_by_id[ext], "event": i, "line": line})
    return KinetoSummary(
        kernel_time_s=time_s, kernel_count=count, nccl_time_s=nccl_time_s, step_time_s=steps,
        device_name=device_name, world_size=world_size,
        nccl_collectives=pd.DataFrame(colls, columns=NCCL_COLUMNS),
        gemm_ops=pd.DataFrame(gemms, columns=GEMM_COLUMNS))


def _summarise_event(ev: dict, i: int, line: int, time_s: dict, count: dict, nccl_time_s: dict, steps: dict,
                     colls: list, gemm_calls: dict, kernel_s_by_id: dict) -> None:
    """Add one complete event (``traceEvents[i]``, on ``line``) to the running summary."""
    # category case-folded: PyTorch 1.8/1.9 traces spell them Kernel / Memcpy / Memset
    cat = _field(ev, "cat", (str,), "a string", i, default="").lower()
    name = _field(ev, "name", (str,), "a string", i, default="")
    if cat in ("user_annotation", "cpu_op"):
        m = _STEP_RE.match(name)
        if m:
            steps[int(m.group(1))] = _duration_s(ev, i)
        elif cat == "cpu_op" and name in _GEMM_OPS:
            call = _gemm_call(_field(ev, "args", (dict,), "an object", i, default=None) or {}, name, i)
            if call is not None:
                if call[0] in gemm_calls:  # two sessions' events in one file: whose kernels are whose?
                    raise InputError(f"traceEvents[{i}].args.External id",
                                     f"{call[0]} is already the id of traceEvents[{gemm_calls[call[0]][0]}] "
                                     "(a matmul op's id must be its own: one profiling session per file)")
                gemm_calls[call[0]] = (i, name, call[1], call[2], line)
        return
    # only the events summarised are checked further: CPU-side events (python_function,
    # cuda_runtime, ...) may carry durations older profilers wrote negative
    if cat != "kernel" and cat not in _MEMORY_CATS:
        return
    dur_s = _duration_s(ev, i)
    args = _field(ev, "args", (dict,), "an object", i, default=None) or {}
    category, coll = classify_kernel(name, cat)
    row = (_collective_row(args, dur_s, i)
           if category == "nccl" and "Collective name" in args else None)
    time_s[category] += dur_s
    count[category] += 1
    ext = args.get("External id", args.get("external id"))  # the latter: PyTorch 1.8/1.9 kernel events
    if cat == "kernel" and isinstance(ext, int) and not isinstance(ext, bool) and category != "nccl":
        kernel_s_by_id[ext] = kernel_s_by_id.get(ext, 0.0) + dur_s
    if category == "nccl":
        key = row["collective"] if row else coll or "unknown"
        nccl_time_s[key] = nccl_time_s.get(key, 0.0) + dur_s
        if row:
            colls.append(row)


def _gemm_call(args: dict, op: str, i: int) -> tuple[int, list, str] | None:
    """(External id, Input Dims, dtype) of a matmul op that recorded its shapes in a dtype with a peak;
    None for one that recorded none (profiled without record_shapes: no ``Input Dims``) or ran in another
    dtype (complex, int8, ...). A field there in the wrong form is an error naming it, not a dropped row."""
    if "Input Dims" not in args:
        return None
    ext, dims, types = args.get("External id"), args.get("Input Dims"), args.get("Input type")
    if not isinstance(ext, int) or isinstance(ext, bool) or ext < 0:
        raise InputError(f"traceEvents[{i}].args.External id", f"must be a whole number >= 0 for a matmul op with "
                         f"recorded shapes (got {ext!r:.40})")
    if not isinstance(dims, list):
        raise InputError(f"traceEvents[{i}].args.Input Dims", f"must be a list of operand shapes (got {dims!r:.60})")
    a, b = _GEMM_OPS[op]
    if not isinstance(types, list) or len(types) <= max(a, b) or not all(isinstance(types[j], str) for j in (a, b)):
        raise InputError(f"traceEvents[{i}].args.Input type", f"must name the type of {op}'s operands "
                         f"{a} and {b} (got {types!r:.60})")
    kinds = {_GEMM_TYPES.get(types[j].strip().lower(), types[j].strip()) for j in (a, b)}
    if len(kinds) > 1:
        raise InputError(f"traceEvents[{i}].args.Input type", f"{op}'s operands are of two precisions "
                         f"({types[a]}, {types[b]}): no GEMM peak is that of both")
    dtype = _GEMM_TYPES.get(types[a].strip().lower())
    return None if dtype is None else (ext, dims, dtype)


def _gemm_shape(op: str, dims: list, i: int) -> dict[str, int]:
    """m, n, k, batch of (m, k) x (k, n) from an op's ``Input Dims`` (3-D operands: a batch of them)."""
    a_at, b_at = _GEMM_OPS[op]
    rank = 3 if op in ("aten::bmm", "aten::baddbmm") else 2

    def dims_of(j: int) -> list[int]:
        d = dims[j] if j < len(dims) else None
        if (not isinstance(d, list) or len(d) != rank
                or not all(isinstance(x, int) and not isinstance(x, bool) and 0 < x <= 2**31 for x in d)):
            raise InputError(f"traceEvents[{i}].args.Input Dims[{j}]",
                             f"must be {rank} whole sizes from 1 to 2^31 for {op} (got {d!r:.80})")
        return d

    a, b = dims_of(a_at), dims_of(b_at)
    if a[-1] != b[-2] or (rank == 3 and a[0] != b[0]):
        raise InputError(f"traceEvents[{i}].args.Input Dims", f"{op} operands {a} and {b} do not multiply")
    return {"m": a[-2], "n": b[-1], "k": a[-1], "batch": a[0] if rank == 3 else 1}
