"""Output formats of the collection kit: pure functions, standard library only.

Each writer produces exactly what a ``perfmodel calibrate`` parser reads (REFERENCES.md §3):
* ``write_gemm_csv``       -> ``--gemm``        (``perfmodel.calibrate.parsers.parse_gemm_csv``);
* ``format_nccl_tests``    -> ``--nccl-tests``  (``parse_nccl_tests_all``);
* ``write_attention_csv``  -> kernel-efficiency table (shape and direction columns as in calibration/data/kernels.csv).
Kineto traces are written by ``torch.profiler`` itself (profile_layer.py).

No torch and no perfmodel import here, so the kit runs on a cluster where perfmodel is not
installed and the formats are tested on a machine without torch.
"""
from __future__ import annotations

import csv
import datetime as dt
import os
import platform
import shlex
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Literal, Sequence

Collective = Literal["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv"]
COLLECTIVES: tuple[Collective, ...] = ("all_reduce", "all_gather", "reduce_scatter",
                                       "all_to_all", "send_recv")
NCCL_TESTS_BINARY = {"all_reduce": "all_reduce_perf", "all_gather": "all_gather_perf",
                     "reduce_scatter": "reduce_scatter_perf", "all_to_all": "alltoall_perf",
                     "send_recv": "sendrecv_perf"}
# nccl-tests prints a reduction op only for reducing collectives.
NCCL_TESTS_REDOP = {"all_reduce": "sum", "reduce_scatter": "sum", "all_gather": "none",
                    "all_to_all": "none", "send_recv": "none"}
# nccl-tests type names (``src/common.cu`` test_typenames) -> bytes per element.
NCCL_TYPE_BYTES = {"int8": 1, "uint8": 1, "half": 2, "bfloat16": 2, "float": 4, "int32": 4,
                   "double": 8, "int64": 8}

GEMM_COLUMNS = ["m", "n", "k", "dtype", "time_s", "op", "n_iters"]
ATTENTION_COLUMNS = ["batch", "seq_len", "n_heads", "head_dim", "causal", "direction", "dtype",
                     "time_s", "tflop_per_s", "backend", "n_iters"]
AttentionDirection = Literal["fwd", "fwd+bwd"]


# --------------------------------------------------------------------------- provenance
def provenance_line(tool: str, **facts: object) -> str:
    """One ``# source: ...`` comment: tool, UTC time, host, Python, the facts, the command line.

    The parsers skip leading ``#`` lines (CSV) and ``#`` lines outside tables (nccl-tests), so
    the file carries its own provenance."""
    now = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    parts = [f"perfmodel calibration/collect/{tool}", f"utc={now}", f"host={platform.node()}",
             f"python={platform.python_version()}"]
    parts += [f"{k}={v}" for k, v in facts.items() if v is not None]
    parts.append("cmd=" + shlex.join([Path(sys.argv[0]).name, *sys.argv[1:]]))
    return "# source: " + "; ".join(str(p).replace("\n", " ") for p in parts)


def median_s(samples_s: Sequence[float]) -> float:
    """Median of repeated timings (robust to a slow first launch or a preempted rep)."""
    if not samples_s:
        raise ValueError("median_s: no samples")
    return float(statistics.median(samples_s))


def call_times_s(torch, device, call, warmup: int, iters: int) -> list[float]:
    """Seconds of each of ``iters`` calls of ``call`` after ``warmup`` untimed ones: CUDA events queued
    back to back on a GPU (launch gaps hide behind the kernels), ``time.perf_counter`` on a CPU. The
    caller passes its ``torch`` module, so this file imports none."""
    for _ in range(warmup):
        call()
    if device.type == "cuda":
        ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
        torch.cuda.synchronize(device)
        for s, e in ev:
            s.record()
            call()
            e.record()
        torch.cuda.synchronize(device)
        return [s.elapsed_time(e) * 1e-3 for s, e in ev]
    out = []
    for _ in range(iters):
        t0 = time.perf_counter()
        call()
        out.append(time.perf_counter() - t0)
    return out


def write_rows_csv(rows: Iterable[dict], columns: Sequence[str], path: str | Path, source: str | None = None) -> Path:
    """``source`` (a ``# source:`` line) if given, then ``rows`` as CSV under ``columns``, LF line ends;
    the folder is made. Every table of the kit is written through it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as f:
        if source:
            f.write(source.rstrip("\n") + "\n")
        w = csv.DictWriter(f, fieldnames=list(columns), lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    return path


# --------------------------------------------------------------------------- GEMM CSV
@dataclass(frozen=True)
class GemmRow:
    """One measured matmul (m, k) x (k, n): 2*m*n*k FLOPs."""

    m: int
    n: int
    k: int
    dtype: str
    """``bf16`` / ``fp16`` / ``fp8`` / ``fp32``: the names perfmodel's GPU peaks use."""
    time_s: float
    """Median seconds of one matmul."""
    op: str = "grid"
    """Where the shape comes from: ``grid`` or ``<layer GEMM>.<fwd|dgrad|wgrad>``."""
    n_iters: int = 0
    """Timed repetitions the median is taken over."""

    @property
    def tflop_per_s(self) -> float:
        return 2.0 * self.m * self.n * self.k / self.time_s / 1e12


def write_gemm_csv(rows: Iterable[GemmRow], path: str | Path, source: str | None = None) -> Path:
    """CSV ``m,n,k,dtype,time_s,op,n_iters`` with an optional ``# source:`` first line."""
    return write_rows_csv(({"m": r.m, "n": r.n, "k": r.k, "dtype": r.dtype, "time_s": f"{r.time_s:.9e}", "op": r.op,
                            "n_iters": r.n_iters} for r in rows), GEMM_COLUMNS, path, source)


# --------------------------------------------------------------------------- attention CSV
def attention_flop(batch: int, seq_len: int, n_heads: int, head_dim: int, causal: bool,
                   direction: AttentionDirection) -> float:
    """FLOPs of one attention call, FlashAttention's benchmark convention (Dao 2023,
    ``benchmarks/benchmark_flash_attention.py``):

    fwd = 4 * b * s^2 * h * d  (two matmuls, Q K^T and P V, 2 FLOPs per MAC), halved if causal;
    bwd = 2.5 * fwd (five matmuls instead of two); fwd+bwd = 3.5 * fwd.
    """
    fwd = 4.0 * batch * seq_len**2 * n_heads * head_dim * (0.5 if causal else 1.0)
    return fwd * {"fwd": 1.0, "fwd+bwd": 3.5}[direction]


@dataclass(frozen=True)
class AttentionRow:
    batch: int
    seq_len: int
    n_heads: int
    head_dim: int
    causal: bool
    direction: AttentionDirection
    dtype: str
    time_s: float
    """Median seconds of one call (fwd) or one forward plus backward (fwd+bwd)."""
    backend: str = "auto"
    """SDPA backend asked for (``auto`` lets PyTorch choose, e.g. FlashAttention-2)."""
    n_iters: int = 0

    @property
    def tflop_per_s(self) -> float:
        return attention_flop(self.batch, self.seq_len, self.n_heads, self.head_dim,
                              self.causal, self.direction) / self.time_s / 1e12


def write_attention_csv(rows: Iterable[AttentionRow], path: str | Path,
                        source: str | None = None) -> Path:
    """CSV with ``ATTENTION_COLUMNS``; ``causal`` is ``yes``/``no`` as in kernels.csv."""
    return write_rows_csv(({"batch": r.batch, "seq_len": r.seq_len, "n_heads": r.n_heads, "head_dim": r.head_dim,
                            "causal": "yes" if r.causal else "no", "direction": r.direction, "dtype": r.dtype,
                            "time_s": f"{r.time_s:.9e}", "tflop_per_s": f"{r.tflop_per_s:.6g}", "backend": r.backend,
                            "n_iters": r.n_iters} for r in rows), ATTENTION_COLUMNS, path, source)


# --------------------------------------------------------------------------- nccl-tests text
def busbw_factor(op: Collective, n_ranks: int) -> float:
    """busbw / algbw, nccl-tests ``doc/PERFORMANCE.md``: all_reduce 2(n-1)/n; all_gather,
    reduce_scatter, all_to_all (n-1)/n; send_recv 1."""
    n = n_ranks
    if op == "all_reduce":
        return 2.0 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    if op == "send_recv":
        return 1.0
    raise ValueError(f"unknown collective {op!r}; expected one of {COLLECTIVES}")


def nccl_tests_counts(op: Collective, size_bytes: int, typesize: int,
                      n_ranks: int) -> tuple[int, int]:
    """(total elements moved, the ``count`` column) for a requested size, as nccl-tests does.

    all_reduce / send_recv: one buffer of ``count`` elements, size = count * typesize.
    all_gather / reduce_scatter / all_to_all: the total is rounded down to a multiple of the
    rank count; size = total * typesize and ``count`` is the per-rank share (total / n)."""
    total = size_bytes // typesize
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        total -= total % n_ranks
        return total, total // n_ranks
    return total, total


@dataclass(frozen=True)
class NcclRow:
    """One message size: out-of-place and in-place mean time per call, microseconds."""

    size_bytes: int
    count: int
    oop_time_us: float
    ip_time_us: float
    oop_wrong: int | None = None
    """Mismatching elements found by the check; None = not checked (printed ``N/A``)."""
    ip_wrong: int | None = None


@dataclass(frozen=True)
class RankInfo:
    """What a ``#  Rank`` line says about one process."""

    rank: int
    host: str
    pid: int
    device: int
    bus_id: str
    """PCI bus id as nccl-tests prints it, e.g. ``0x53``."""
    device_name: str


def _fmt_time_us(t: float) -> str:
    # nccl-tests common.cu: %7.0f from 10 ms, %7.1f from 100 us, else %7.2f
    if t >= 10000.0:
        return f"{t:7.0f}"
    if t >= 100.0:
        return f"{t:7.1f}"
    return f"{t:7.2f}"


def _fmt_wrong(w: int | None) -> str:
    return f"{'N/A' if w is None else w:>6}"


def _bw_cells(size_bytes: int, time_us: float, factor: float) -> tuple[float, float]:
    algbw = size_bytes / (time_us * 1e-6) / 1e9 if time_us > 0 else 0.0
    return algbw, algbw * factor


def format_nccl_tests(op: Collective, rows: Sequence[NcclRow], *, ranks: Sequence[RankInfo],
                      dtype: str = "float", warmup_iters: int = 5, iters: int = 20,
                      nccl_version: str | None = None, source: str | None = None) -> str:
    """One nccl-tests block (preamble, ``#  Rank`` lines, table, trailer) for ``op``.

    algbw = S / t with GB = 1e9 B; busbw = algbw * ``busbw_factor``; ``# Avg bus bandwidth`` is
    the mean of the out-of-place and in-place busbw over all rows, as nccl-tests computes it.
    Several blocks may be concatenated into one file: the parser splits them."""
    if dtype not in NCCL_TYPE_BYTES:
        raise ValueError(f"dtype {dtype!r} is not an nccl-tests type name {sorted(NCCL_TYPE_BYTES)}")
    n = len(ranks)
    factor = busbw_factor(op, n)
    binary = NCCL_TESTS_BINARY[op]
    sizes = [r.size_bytes for r in rows] or [0]
    out: list[str] = []
    if source:
        out.append(source.rstrip("\n"))
    out.append(f"# Collective test starting: {binary}")
    if nccl_version:
        out.append(f"# NCCL version {nccl_version}")
    out.append(f"# nThread 1 nGpus 1 minBytes {min(sizes)} maxBytes {max(sizes)} step: 2(factor) "
               f"warmup iters: {warmup_iters} iters: {iters} agg iters: 1 validation: "
               f"{int(any(r.oop_wrong is not None for r in rows))} graph: 0")
    out.append("#")
    out.append("# Using devices")
    for ri in sorted(ranks, key=lambda r: r.rank):
        out.append(f"#  Rank {ri.rank:2d} Group  0 Pid {ri.pid:6d} on {ri.host:>10} device "
                   f"{ri.device:2d} [{ri.bus_id}] {ri.device_name}")
    out.append("#")
    out.append("#                                                              out-of-place"
               "                       in-place          ")
    out.append("#       size         count      type   redop    root     time   algbw   busbw"
               " #wrong     time   algbw   busbw #wrong ")
    out.append("#        (B)    (elements)                               (us)  (GB/s)  (GB/s)"
               "            (us)  (GB/s)  (GB/s)         ")
    busbws: list[float] = []
    for r in rows:
        oop_alg, oop_bus = _bw_cells(r.size_bytes, r.oop_time_us, factor)
        ip_alg, ip_bus = _bw_cells(r.size_bytes, r.ip_time_us, factor)
        busbws += [oop_bus, ip_bus]
        out.append(f"{r.size_bytes:12d}  {r.count:12d}  {dtype:>8}  {NCCL_TESTS_REDOP[op]:>6}  "
                   f"{-1:6d}  {_fmt_time_us(r.oop_time_us)}  {oop_alg:6.2f}  {oop_bus:6.2f}  "
                   f"{_fmt_wrong(r.oop_wrong)}  {_fmt_time_us(r.ip_time_us)}  {ip_alg:6.2f}  "
                   f"{ip_bus:6.2f}  {_fmt_wrong(r.ip_wrong)}")
    wrong = [w for r in rows for w in (r.oop_wrong, r.ip_wrong) if w is not None]
    if wrong:
        out.append(f"# Out of bounds values : {sum(wrong)} {'OK' if sum(wrong) == 0 else 'FAILED'}")
    out.append(f"# Avg bus bandwidth    : {statistics.fmean(busbws) if busbws else 0.0:g}")
    out.append("#")
    out.append(f"# Collective test concluded: {binary}")
    out.append("")
    return "\n".join(out)


def host_name() -> str:
    """Short host name without spaces (the ``#  Rank`` line splits on whitespace)."""
    return (platform.node() or os.environ.get("HOSTNAME", "localhost")).split(".")[0] or "localhost"
