"""nccl-tests stdout (``all_reduce_perf`` & co.) -> one result per benchmark table.

Format: NVIDIA/nccl-tests ``src/common.cu`` and ``doc/PERFORMANCE.md`` (REFERENCES.md §3a).
Times are µs, bandwidths GB/s with GB = 1e9 bytes. The header line names the columns, so
both the current ``#wrong`` layout and the older ``error`` / no-``root`` layouts parse, and so do
the optional columns of ``src/util.cu`` ``writeResultHeader`` / ``writeBenchmarkLineBody``:
``cputime`` in place of ``time`` (``-C 1``), ``#bitdiff`` (bitwise repeatability), the per-iteration
``i_min i_max i_p99 i_cv%`` after each side's ``#wrong``, and a last ``timestamp`` (``-S 1``) whose
cells are ``%Y-%m-%d %H:%M:%S`` (two words). Under ``-C 1`` the time printed is the CPU time to
launch the iterations while algbw and busbw still come from the completed time (``common.cu``
``BenchTime``: ``timeUsec = report_cputime ? cputimeSec : deltaSec``, the bandwidths from
``deltaSec``), so the collective's time is taken as size / algbw there.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd

from perfmodel.calibrate.parsers.launcher import strip_launcher_prefix
from perfmodel.errors import InputError, read_text_file, say_note
from perfmodel.limits import MAX_BYTES, MAX_COUNT
from perfmodel.units import GB_BYTES, US_S

Collective = Literal["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv",
                     "broadcast", "reduce", "gather", "scatter"]

ROW_COLUMNS = ["size_bytes", "count", "dtype", "redop", "root",
               "oop_time_us", "oop_algbw_gb_per_s", "oop_busbw_gb_per_s", "oop_wrong",
               "ip_time_us", "ip_algbw_gb_per_s", "ip_busbw_gb_per_s", "ip_wrong"]
_TEXT_COLUMNS = {"dtype", "redop", "timestamp"}
#: per-side header names that are read but not used: the CPU launch time (-C 1), bitwise repeatability
#: and the per-iteration statistics (src/util.cu writeResultHeader)
_SIDE_EXTRAS = {"cputime": "cputime_us", "bitdiff": "bitdiff", "i_min": "i_min_us", "i_max": "i_max_us",
                "i_p99": "i_p99_us", "i_cv%": "i_cv_pct"}
_TIMESTAMP_RE = re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}")
# whole-number columns and their allowed range: sizes up to 1 PiB, root -1 (none) or a rank
_INT_RANGE = {"size_bytes": (0, MAX_BYTES), "count": (0, MAX_BYTES), "root": (-1, MAX_COUNT)}

# Binary / file-name spellings of each collective (``all_reduce_perf``, ``alltoall_output``).
_OP_ALIASES: dict[str, Collective] = {
    "allreduce": "all_reduce", "allgather": "all_gather", "reducescatter": "reduce_scatter",
    "alltoall": "all_to_all", "sendrecv": "send_recv", "broadcast": "broadcast",
    "reduce": "reduce", "gather": "gather", "scatter": "scatter",
}
_OPS = (r"(all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|send_?recv|broadcast|gather|"
        r"scatter|reduce)")
# the binary name, as run or announced: ``all_gather_perf``, or an MPI build's ``all_gather_perf_mpi``
# (as nccl-tests 2.18 output announces it: '# Collective test starting: all_gather_perf_mpi')
_OP_TEXT_RE = re.compile(rf"\b{_OPS}_perf(?:_mpi)?\b", re.I)
_ANNOUNCED_RE = re.compile(r"Collective test starting:\s*(\S+)", re.I)
_OP_NAME_RE = re.compile(rf"(?:^|[^a-z]){_OPS}(?:[^a-z]|$)", re.I)  # a file name
# '#  Rank %2d Group %2d Pid %6d on %10s device %2d [...] %s'; versions before the Group field (2.13 and
# earlier) print '#   Rank %2d Pid %6d on %10s device %2d [0x%02x] %s'
_RANK_RE = re.compile(r"#\s*Rank\s+(?P<rank>\d+)\s+(?:Group\s+(?P<group>\d+)\s+)?Pid\s+\d+\s+on\s+(?P<host>\S+)"
                      r"\s+device\s+\d+\s+\[[^\]]*\]\s+(?P<device>.*\S)")
_NUMBER_LIKE_RE = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?|[-+]?(nan|inf)", re.I)
#: a byte count written with digit separators or in hex (1,048,576; 1_048_576; 0x100000): nccl-tests never
#: prints one, so inside a table it is an edited row, not text to skip
_SEPARATED_SIZE_RE = re.compile(r"\d{1,3}(?:[,_']\d{3})+|0[xX][0-9a-fA-F]+")
_VERSION_RE = re.compile(r"NCCL version (\d+\.\d+\.\d+)|nccl-library=(\d+)")
#: the data types nccl-tests prints in the ``type`` column (src/common.cu ``test_typenames``, with the older
#: and alias spellings) and their size in bytes; a row of any other type is refused, not left unchecked
_DTYPE_BYTES = {"int8": 1, "uint8": 1, "char": 1, "half": 2, "float16": 2, "bfloat16": 2,
                "fp16": 2, "bf16": 2, "float": 4, "float32": 4, "int32": 4, "uint32": 4, "int": 4,
                "double": 8, "float64": 8, "int64": 8, "uint64": 8, "f8e4m3": 1, "f8e5m2": 1}


def busbw_factor(op: str, n_ranks: int) -> float:
    """busbw / algbw as nccl-tests defines it (doc/PERFORMANCE.md).

    all_reduce: 2(n-1)/n; all_gather, reduce_scatter, all_to_all (and gather/scatter):
    (n-1)/n; broadcast, reduce, send_recv: 1.
    """
    n = n_ranks
    if op == "all_reduce":
        return 2.0 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "all_to_all", "gather", "scatter"):
        return (n - 1) / n
    if op in ("broadcast", "reduce", "send_recv"):
        return 1.0
    raise InputError("op", f"unknown collective {op!r}")


@dataclass(frozen=True)
class NcclTestsResult:
    """One nccl-tests table with what the surrounding output says about the run."""

    op: Collective | None
    """Collective; None only when neither the text, the file name nor the rows decide it."""
    op_source: Literal["text", "filename", "rows"] | None
    """Where ``op`` came from: a ``*_perf`` name in the output, the file name, or the rows."""
    n_ranks: int | None
    """Ranks in the communicator: the ``#  Rank`` lines, else size / count (all_gather, reduce_scatter,
    alltoall), else inferred from busbw/algbw where their printed rounding allows."""
    n_ranks_source: Literal["rank_lines", "size_count", "bw_ratio"] | None
    n_nodes: int | None
    """Distinct host names in the ``#  Rank`` lines; None without them."""
    device_name: str | None
    """GPU name printed on the first ``#  Rank`` line, e.g. ``NVIDIA H100 80GB HBM3``."""
    nccl_version: str | None
    """``2.18.5`` from ``NCCL version`` lines or decoded from ``nccl-library=22807``."""
    avg_busbw_gb_per_s: float | None
    """The ``# Avg bus bandwidth`` trailer, when printed."""
    first_line: int
    """1-based line of the table's first data row (for messages and provenance)."""
    rows: pd.DataFrame
    """One row per message size; columns ``ROW_COLUMNS``; NaN where a cell is ``N/A``."""
    time_column: Literal["time", "cputime"] = "time"
    """What the table printed as time: ``cputime`` (``-C 1``, CPU launch time) makes ``*_time_us``
    size / algbw, the completed time the bandwidths were computed from."""


def _strip_prefix(line: str) -> str:
    return strip_launcher_prefix(line.rstrip("\n")).strip()


def _header_columns(tokens: list[str]) -> list[str] | None:
    """Map a ``# size count type ...`` header to ROW_COLUMNS names (plus the read-but-unused
    ``oop_cputime_us``, ``ip_i_min_us``, ..., ``timestamp``), or None if not a header."""
    names = [t.lstrip("#").lower() for t in tokens if t != "#"]
    if not names or names[0] != "size" or "algbw" not in names:
        return None
    if "timestamp" in names[:-1]:  # writeResultHeader prints it last, after the in-place columns
        return None
    simple = {"size": "size_bytes", "count": "count", "type": "dtype", "redop": "redop",
              "root": "root", "timestamp": "timestamp"}
    out: list[str] = []
    seen_time = 0
    for name in names:
        if name in simple:
            out.append(simple[name])
            continue
        if name in ("time", "cputime"):
            seen_time += 1
        side = "oop" if seen_time <= 1 else "ip"
        metric = {"time": "time_us", "algbw": "algbw_gb_per_s", "busbw": "busbw_gb_per_s",
                  "wrong": "wrong", "error": "error", **_SIDE_EXTRAS}.get(name)
        if metric is None:
            return None
        out.append(f"{side}_{metric}")
    return out


def _row_cells(tokens: list[str], columns: list[str], where: str) -> list[str]:
    """A data line's cells in ``columns`` order: the timestamp column (``-S 1``) is two words."""
    stamped = columns[-1] == "timestamp"
    expected = len(columns) + stamped
    if len(tokens) != expected:
        raise InputError("nccl-tests row", f"expected {expected} columns, got {len(tokens)} (truncated line?)", where)
    if stamped:
        tokens = tokens[:-2] + [" ".join(tokens[-2:])]
        if _TIMESTAMP_RE.fullmatch(tokens[-1]) is None:
            raise InputError("timestamp", f"expected '%Y-%m-%d %H:%M:%S' (got {tokens[-1]!r})", where)
    return tokens


def _time_from_algbw(rows: pd.DataFrame) -> pd.DataFrame:
    """``*_time_us`` of a ``-C 1`` table: size / algbw (algbw = size / completed time, doc/PERFORMANCE.md),
    NaN where algbw printed as 0 (sizes far below the 1 MiB the fit uses)."""
    out = rows.copy()
    size = out["size_bytes"].to_numpy(float)
    for side in ("oop", "ip"):
        algbw = out[f"{side}_algbw_gb_per_s"].to_numpy(float)
        with np.errstate(divide="ignore", invalid="ignore"):
            out[f"{side}_time_us"] = np.where(algbw > 0, size / (algbw * GB_BYTES) / US_S, np.nan)
    return out


def _cell(token: str, column: str, where: str) -> float | int | str:
    """One cell, checked: whole numbers in range for size/count/root, a finite time > 0 µs, a
    finite bandwidth >= 0 GB/s; ``N/A`` (-> NaN) only where nccl-tests prints it (the in-place
    and ``#wrong`` columns); a ``type`` nccl-tests knows (``_DTYPE_BYTES``: size = count x its size is checked)."""
    if column == "dtype" and token.lower() not in _DTYPE_BYTES:
        raise InputError("type", f"{token!r} is not an nccl-tests data type (known: {', '.join(_DTYPE_BYTES)})",
                         where)
    if column in _TEXT_COLUMNS:
        return token
    if token.upper() == "N/A":
        if column.startswith("ip_") or column.endswith(("_wrong", "_error")) or _is_extra(column):
            return np.nan
        raise InputError(column, "is N/A; nccl-tests prints a number here (only the in-place and "
                         "#wrong columns may be N/A)", where)
    if column in _INT_RANGE:
        lo, hi = _INT_RANGE[column]
        if re.fullmatch(r"-?\d+", token) is None:
            raise InputError(column, f"must be a whole number (got {token!r})", where)
        if len(token.lstrip("-")) > 19:  # past any 64-bit count; int() refuses 4,300+ digits with a traceback
            raise InputError(column, f"must be between {lo} and {hi:,} (got a {len(token.lstrip('-')):,}-digit number)",
                             where)
        value = int(token)
        if not lo <= value <= hi:
            raise InputError(column, f"must be between {lo} and {hi:,} (got {token})", where)
        return value
    try:
        value = float(token)
    except ValueError:
        raise InputError(column, f"not numeric: {token!r}",
                         where) from None
    if column.endswith("_time_us") and not 0.0 < value < math.inf:
        raise InputError(column, f"must be a finite time > 0 us (got {token!r})", where)
    if column.endswith("_gb_per_s") and not 0.0 <= value < math.inf:
        raise InputError(column, f"must be a finite bandwidth >= 0 GB/s (got {token!r})", where)
    if _is_extra(column) and not 0.0 <= value < math.inf:
        raise InputError(column, f"must be a finite number >= 0 (got {token!r})", where)
    return value


def _is_extra(column: str) -> bool:
    return column.split("_", 1)[-1] in _SIDE_EXTRAS.values()


def _op_from_text(text: str, pattern: re.Pattern = _OP_TEXT_RE) -> Collective | None:
    """The collective a table's preamble names: its '# Collective test starting: X_perf' announcement, else
    the ``*_perf`` name nearest the table (a path or command earlier in the preamble, e.g. an output file
    called sendrecv_perf.txt, does not name this table)."""
    announced = _ANNOUNCED_RE.findall(text)
    if announced:
        m = pattern.search(announced[-1])
        if m:
            return _OP_ALIASES[m.group(1).lower().replace("_", "")]
    found = pattern.findall(text)
    return _OP_ALIASES[found[-1].lower().replace("_", "")] if found else None


def _size_over_count(rows: pd.DataFrame) -> Fraction | None:
    """size / (count x type size) of the last row, exactly: 1 where ``count`` is the whole buffer,
    the rank count where it is one rank's share (all_gather, reduce_scatter, alltoall); None when the
    type or count is unknown."""
    row = rows.iloc[-1]
    typesize = _DTYPE_BYTES.get(str(row["dtype"]).lower())
    if typesize is None or not row["count"]:
        return None
    return Fraction(int(row["size_bytes"]), int(row["count"]) * typesize)


def _op_from_rows(rows: pd.DataFrame, n_ranks: int | None) -> Collective | None:
    """all_reduce / reduce_scatter / broadcast / reduce from size vs count; all_gather and
    all_to_all look the same in the numbers, so those stay None."""
    ratio = _size_over_count(rows)
    if ratio is None:
        return None
    row = rows.iloc[-1]
    has_root = row["root"] >= 0
    if row["redop"] in ("none", "N/A"):
        return "broadcast" if has_root and ratio == 1 else None
    if ratio == 1:
        return "reduce" if has_root else "all_reduce"
    return "reduce_scatter" if n_ranks and ratio == n_ranks else None


def _n_ranks_from_sizes(op: str | None, rows: pd.DataFrame) -> int | None:
    """all_gather, reduce_scatter and alltoall print ``count`` per rank and ``size`` over all ranks:
    size / (count x type size) is the rank count exactly."""
    ratio = _size_over_count(rows) if op in ("all_gather", "reduce_scatter", "all_to_all") else None
    return int(ratio) if ratio is not None and ratio.denominator == 1 and ratio >= 2 else None


def _n_ranks_from_bw(op: str | None, rows: pd.DataFrame) -> int | None:
    """The rank count whose busbw factor reproduces every row's printed busbw from its algbw (both
    printed with two decimals), when exactly one count near the inverse of busbw / algbw does: as the
    count grows the factor tends to 2 (or 1) and neighbouring counts print alike, so a large count
    cannot be read this way."""
    best = rows.loc[rows["oop_algbw_gb_per_s"].idxmax()]
    algbw, busbw = best["oop_algbw_gb_per_s"], best["oop_busbw_gb_per_s"]
    if op is None or algbw <= 0 or busbw <= 0:
        return None
    ratio = busbw / algbw
    if op == "all_reduce" and ratio < 2.0:
        n = 2.0 / (2.0 - ratio)
    elif op in ("all_gather", "reduce_scatter", "all_to_all") and ratio < 1.0:
        n = 1.0 / (1.0 - ratio)
    else:
        return None
    pairs = [(rows[f"{side}_algbw_gb_per_s"].to_numpy(float), rows[f"{side}_busbw_gb_per_s"].to_numpy(float))
             for side in ("oop", "ip")]

    def consistent(k: int) -> bool:
        f = busbw_factor(op, k)
        return all(np.all(~np.isfinite(a) | ~np.isfinite(b) | (np.abs(b - f * a) <= 0.005 + 0.005 * f + 1e-9))
                   for a, b in pairs)

    centre = int(round(n))
    fits = [k for k in range(max(2, centre - 50), centre + 51) if consistent(k)]
    return fits[0] if len(fits) == 1 else None


def _nccl_version(text: str) -> str | None:
    m = _VERSION_RE.search(text)
    if not m:
        return None
    if m.group(1):
        return m.group(1)
    code = int(m.group(2))  # NCCL_VERSION_CODE: X*10000+Y*100+Z since 2.9, else X*1000+Y*100+Z
    if code >= 20900:
        return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"
    return f"{code // 1000}.{code % 1000 // 100}.{code % 100}"


def _drop_wrong(rows: pd.DataFrame, lines: np.ndarray, where: str) -> tuple[pd.DataFrame, np.ndarray]:
    """``rows`` (and their file ``lines``) less those whose ``#wrong`` count is above 0: nccl-tests' own check
    found elements of the result wrong, so the time is not that of a correct collective. Said in one
    ``note:`` line; a table with no row left is refused (InputError), never fitted."""
    wrong = np.zeros(len(rows), dtype=bool)
    for col in ("oop_wrong", "ip_wrong"):
        if col in rows:
            wrong |= (pd.to_numeric(rows[col], errors="coerce").fillna(0) > 0).to_numpy()
    if not wrong.any():
        return rows, lines
    if wrong.all():
        raise InputError("#wrong", f"every row ({len(rows)}) failed nccl-tests' correctness check (#wrong > 0): "
                         "these times are not of a correct collective; rerun the benchmark", where)
    dropped = [int(n) for n in lines[wrong]]
    shown = ", ".join(map(str, dropped[:5])) + (", ..." if len(dropped) > 5 else "")
    say_note(f"{where}: {len(dropped)} of {len(rows)} rows dropped (line{'s' * (len(dropped) > 1)} {shown}): "
             "nccl-tests' correctness check failed on them (#wrong > 0)")
    return rows[~wrong].reset_index(drop=True), lines[~wrong]


#: the types a mixed table (``-d all``) is read at, best first: a training step's reductions run in one of
#: them, and nccl-tests' integer and fp8 types reduce at other rates (a public Spectrum-X-on-OpenShift guide's
#: ``all_reduce_perf -d all`` on two Dell XE9680 H200 nodes, nccl-tests 2.18.3: int8 390, bfloat16 484 GB/s busbw)
_TRAINING_DTYPES = (("bfloat16", "bf16"), ("half", "float16", "fp16"), ("float", "float32"))


def _one_type(rows: pd.DataFrame, lines: np.ndarray, where: str) -> tuple[pd.DataFrame, np.ndarray]:
    """``rows`` (and their file ``lines``) of one data type: a table of several (``-d all``) keeps the first
    of ``_TRAINING_DTYPES`` it has and says so in one ``note:`` line; one with none of them is refused."""
    dtype = rows["dtype"].astype(str).str.lower()
    present = list(dict.fromkeys(dtype))
    if len(present) <= 1:
        return rows, lines
    for names in _TRAINING_DTYPES:
        keep = dtype.isin(names).to_numpy()
        if keep.any():
            say_note(f"{where}: the table has {len(present)} data types ({', '.join(present)}); its "
                     f"{int(keep.sum())} {'/'.join(sorted(set(dtype[keep])))} rows are read, the other "
                     f"{int((~keep).sum())} left out (the types reduce at different rates)")
            return rows[keep].reset_index(drop=True), lines[keep]
    raise InputError("type", f"the table has {len(present)} data types ({', '.join(present)}) and none a training "
                     "step reduces in (bfloat16, half, float): rerun with -d bfloat16", where)


#: collectives whose ``count`` is the whole buffer (size = count x type size) and those that print one
#: rank's share (size = count x type size x ranks); REFERENCES.md §3a, nccl-tests doc/PERFORMANCE.md
_WHOLE_BUFFER_OPS = {"all_reduce", "reduce", "broadcast", "send_recv"}
_PER_RANK_OPS = {"all_gather", "reduce_scatter", "all_to_all", "gather", "scatter"}
_REDUCING_OPS = {"all_reduce", "reduce", "reduce_scatter"}
#: the redops nccl-tests prints (common.cu test_opNames; premulsum as 'mulsum') and 'none'
_REDOPS = ("sum", "prod", "max", "min", "avg", "mulsum", "none")
#: collectives without a root: nccl-tests prints -1 in their root column
_ROOTLESS_OPS = {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv"}
#: those whose tables print the redop 'none' (sendrecv_perf prints its unused 'sum')
_NO_REDOP_OPS = {"all_gather", "all_to_all"}
#: printed bandwidths have two decimals and times three or more significant digits, except from 1e6 us
#: on, which nccl-tests prints as '%7.1e' (util.cu getFloatStr): two significant digits, up to 5% off
_ALGBW_ABS_TOL, _ALGBW_REL_TOL, _ALGBW_REL_TOL_E = 0.011, 0.02, 0.06
_E_NOTATION_US = 1e6


def _check_rows(rows: pd.DataFrame, op: str | None, rank_lines_n: int | None, time_column: str, path: Path,
                lines: np.ndarray) -> None:
    """Refuse a table whose rows contradict themselves or the collective it is read as (InputError at the
    offending row's own line, ``lines[i]`` for row i): a redop or a size / count that the collective cannot
    print (an all_reduce table has a reduction and count x type size = size; all_gather, reduce_scatter and
    alltoall print size = count x type size x ranks, the rank count the ``#  Rank`` lines give where they
    are there), or a time that is not the one the printed algbw was computed from (algbw = size / time)."""
    # (a size printed twice is not refused: -N run cycles repeat the sweep, -r -1 every root, and a linear
    # step of a per-rank op can round two sizes to one; each row is a measurement)
    if op is None:
        return

    def at(i: int) -> str:
        return f"{path}:{int(lines[i])}"

    redop = rows["redop"].astype(str).str.lower().to_numpy()
    known = ~np.isin(redop, ("nan", "", "n/a"))
    if (known & ~np.isin(redop, _REDOPS)).any():
        i = int(np.flatnonzero(known & ~np.isin(redop, _REDOPS))[0])
        raise InputError("redop", f"{redop[i]!r} is not a reduction nccl-tests prints (one of {', '.join(_REDOPS)})",
                         at(i))
    roots = rows["root"].to_numpy()
    if op in _ROOTLESS_OPS and (roots != -1).any():
        i = int(np.flatnonzero(roots != -1)[0])
        raise InputError("root", f"must be -1 in a table read as {op}, which has no root (got {int(roots[i])}); is "
                         "it the output of another collective?", at(i))
    if op in _REDUCING_OPS and (known & (redop == "none")).any():
        i = int(np.flatnonzero(known & (redop == "none"))[0])
        raise InputError("redop", f"'none' in a table read as {op}, which reduces (sum, max, ...); is it the "
                         "output of another collective?", at(i))
    if op in _NO_REDOP_OPS and (known & (redop != "none")).any():
        i = int(np.flatnonzero(known & (redop != "none"))[0])
        raise InputError("redop", f"{redop[i]!r} in a table read as {op}, which reduces nothing (nccl-tests prints "
                         "'none'); is it the output of another collective?", at(i))
    # every row's type is one _DTYPE_BYTES knows (_cell refuses any other); a row of count 0 has no ratio
    typesize = rows["dtype"].astype(str).str.lower().map(_DTYPE_BYTES)
    sizes, counts = rows["size_bytes"].to_numpy(), rows["count"].to_numpy()
    ratios = [(i, Fraction(int(sizes[i]), int(counts[i]) * int(typesize.iloc[i])))
              for i in range(len(rows)) if counts[i] > 0 and pd.notna(typesize.iloc[i])]
    if op in _WHOLE_BUFFER_OPS:
        for i, r in ratios:
            if r != 1:
                c, t = int(counts[i]), int(typesize.iloc[i])
                raise InputError("size", f"size is not count x type size, as {op} prints it (size {int(sizes[i])} B, "
                                 f"count x type size = {c} x {t} = {c * t} B)", at(i))
    if op in _PER_RANK_OPS and ratios:
        for i, r in ratios:
            if r.denominator != 1 or r < 2:
                raise InputError("size", f"size / (count x type size) must be a whole rank count of at least 2 in "
                                 f"every row of an {op} table (got {float(r):g})", at(i))
        i0, r0 = ratios[0]
        for i, r in ratios[1:]:
            if r != r0:
                raise InputError("size", f"size / (count x type size) must be the same whole rank count in every "
                                 f"row of an {op} table (got {int(r)}, but {int(r0)} on line {int(lines[i0])})", at(i))
        if rank_lines_n is not None and int(r0) != rank_lines_n:
            raise InputError("size", f"size / (count x type size) = {int(r0)} ranks, but the file "
                             f"has {rank_lines_n} '#  Rank' lines; is a part of the file missing?", at(i0))
    if rank_lines_n is not None and rank_lines_n > 1:
        # busbw = algbw x the collective's factor for the rank count (nccl-tests' PERFORMANCE.md), as printed
        factor = busbw_factor(op, rank_lines_n)
        for side in ("oop", "ip"):
            alg, bus = rows[f"{side}_algbw_gb_per_s"].to_numpy(float), rows[f"{side}_busbw_gb_per_s"].to_numpy(float)
            # (each printed to 2 decimals: up to 0.005 off in busbw and factor x 0.005 through algbw, plus 1%)
            off = np.isfinite(alg) & np.isfinite(bus) & (
                np.abs(bus - factor * alg) > 0.0051 * (1.0 + factor) + 0.01 * factor * alg)
            if off.any():
                i = int(np.flatnonzero(off)[0])
                raise InputError(f"{'out-of-place' if side == 'oop' else 'in-place'} busbw",
                                 f"{bus[i]:g} GB/s, but algbw {alg[i]:g} x {factor:.4g} ({op} on {rank_lines_n} ranks) is "
                                 f"{factor * alg[i]:.4g}: busbw and algbw disagree", at(i))
    if time_column != "time":
        return
    for side in ("oop", "ip"):
        t, bw = rows[f"{side}_time_us"].to_numpy(float), rows[f"{side}_algbw_gb_per_s"].to_numpy(float)
        with np.errstate(divide="ignore", invalid="ignore"):
            expect = rows["size_bytes"].to_numpy(float) / (t * US_S) / GB_BYTES
        rel = np.where(t >= _E_NOTATION_US, _ALGBW_REL_TOL_E, _ALGBW_REL_TOL)
        off = np.isfinite(t) & np.isfinite(bw) & (np.abs(bw - expect) > _ALGBW_ABS_TOL + rel * expect)
        if off.any():
            i = int(np.flatnonzero(off)[0])
            raise InputError(f"{'out-of-place' if side == 'oop' else 'in-place'} time",
                             f"{t[i]:g} us at {int(rows['size_bytes'].iloc[i])} B gives an algbw of {expect[i]:.3g} "
                             f"GB/s, but the row prints {bw[i]:g}: time and algbw disagree", at(i))


def _finish(path: Path, ctx: list[str], ranks: dict[int, tuple[str, str]], data: list[list],
            columns: list[str], row_lines: list[int], avg: float | None,
            file_version: str | None, groups: dict[int, int] | None = None,
            out_of_bounds: tuple[int, int] | None = None) -> NcclTestsResult:
    """One table's result; ``row_lines`` is each data row's 1-based line in the file (for messages);
    ``out_of_bounds``: (count, line) of a ``# Out of bounds values : N FAILED`` trailer."""
    first_line = row_lines[0]
    rows = pd.DataFrame(data, columns=columns)
    if out_of_bounds is not None:
        counted = sum(pd.to_numeric(rows[c], errors="coerce").fillna(0).sum() for c in ("oop_wrong", "ip_wrong")
                      if c in rows)
        if counted == 0:  # nccl-tests sums the rows' #wrong into that trailer
            raise InputError("Out of bounds values", f"{out_of_bounds[0]} FAILED, but no row's #wrong counts a wrong "
                             "value: the table and its check disagree (an edited file?); rerun the benchmark",
                             f"{path}:{out_of_bounds[1]}")
    rows, lines = _drop_wrong(rows, np.asarray(row_lines, dtype=np.int64), f"{path}:{first_line}")
    rows, lines = _one_type(rows, lines, f"{path}:{first_line}")
    # the older layouts' 'error' column: the largest deviation from the expected result, where float
    # reductions print their rounding (1e-07): not a failure count, kept as the column it replaced
    rows = rows.rename(columns={"oop_error": "oop_wrong", "ip_error": "ip_wrong"})
    time_column = "cputime" if "oop_cputime_us" in rows else "time"
    if time_column == "cputime":
        rows = _time_from_algbw(rows)
    for col in ROW_COLUMNS:
        if col not in rows:
            rows[col] = -1.0 if col == "root" else np.nan
    rows = rows[ROW_COLUMNS]
    rows = rows.astype({c: "int64" for c in ("size_bytes", "count", "root")})
    text = "\n".join(ctx)
    op, op_source = _op_from_text(text), "text"
    if op is None:
        op, op_source = _op_from_text(path.name, _OP_NAME_RE), "filename"
    # NCCL_TESTS_SPLIT_MASK: every process prints its Rank line, but each Group is a communicator of its own
    n_groups = len(set((groups or {}).values())) or 1
    n_ranks = (len(ranks) // n_groups if len(ranks) % n_groups == 0 else None) or None
    if op is None:
        op, op_source = _op_from_rows(rows, n_ranks), "rows"
    n_source = "rank_lines" if n_ranks else None
    if n_ranks is None:
        n_ranks, n_source = _n_ranks_from_sizes(op, rows), "size_count"
    if n_ranks is None:
        n_ranks = _n_ranks_from_bw(op, rows)
        n_source = "bw_ratio" if n_ranks else None
    _check_rows(rows, op, n_ranks if n_source == "rank_lines" else None, time_column, path, lines)
    hosts = {h for h, _ in ranks.values()}
    devices = sorted({d.strip() for _, d in ranks.values() if d and d.strip()})
    if len(devices) > 1:  # one table is costed as one GPU's: its first rank's model was all that was checked
        raise InputError("Rank lines", f"name more than one GPU model ({', '.join(devices)}): a calibration is of "
                         "one GPU, so measure each apart", f"{path}:{first_line}")
    return NcclTestsResult(
        op=op, op_source=op_source if op else None, n_ranks=n_ranks, n_ranks_source=n_source,
        n_nodes=len(hosts) or None,
        device_name=ranks[min(ranks)][1] if ranks else None,
        nccl_version=_nccl_version(text) or file_version, avg_busbw_gb_per_s=avg,
        first_line=first_line, rows=rows, time_column=time_column)


def parse_nccl_tests_all(path: str | Path) -> list[NcclTestsResult]:
    """Every benchmark table in an nccl-tests output file, in file order."""
    path = Path(path)
    lines = read_text_file(path, "nccl-tests", errors="replace").splitlines()
    file_version = _nccl_version("\n".join(lines))
    results: list[NcclTestsResult] = []
    ctx: list[str] = []
    ranks: dict[int, tuple[str, str]] = {}
    groups: dict[int, int] = {}  # rank -> its Group (NCCL_TESTS_SPLIT_MASK splits the ranks into communicators)
    columns: list[str] | None = None
    data: list[list] = []
    row_lines: list[int] = []  # each data row's 1-based line in the file
    avg: float | None = None
    trailer = False  # the table's '# Out of bounds' / '# Avg bus bandwidth' lines were seen
    failed: tuple[int, int] | None = None  # (count, line) of an '# Out of bounds values : N FAILED' trailer

    def flush() -> None:
        nonlocal ctx, ranks, groups, columns, data, row_lines, avg, trailer, failed
        if columns is not None and data:
            results.append(_finish(path, ctx, ranks, data, columns, row_lines, avg,
                                   file_version, groups, failed))
        ctx, ranks, groups, columns, data, row_lines, avg, trailer, failed = [], {}, {}, None, [], [], None, False, None

    for lineno, raw in enumerate(lines, start=1):
        line = _strip_prefix(raw)
        tokens = line.split()
        if not tokens:
            continue
        header = _header_columns(tokens) if line.startswith("#") else None
        if header is not None:
            if data:  # a new table without a trailer in between
                flush()
            columns, trailer = header, False
            continue
        if line.startswith("#"):
            unit = re.search(r"\((ms|s|ns|sec)\)", line) if columns is not None and not data else None
            if unit and "(B)" in line:  # the header's units line: nccl-tests prints times in us
                raise InputError("time unit", f"nccl-tests prints times in microseconds, '(us)'; this header says "
                                 f"'({unit.group(1)})': an edited table, whose times would be read as us",
                                 f"{path}:{lineno}")
            trailer = trailer or (bool(data) and re.match(r"#\s*(Out of bounds|Avg bus)", line) is not None)
            oob = re.match(r"#\s*Out of bounds values\s*:\s*(\d+)\s+FAILED", line) if data else None
            if oob and int(oob.group(1)) > 0:
                failed = (int(oob.group(1)), lineno)
            m = re.match(r"#\s*Avg bus bandwidth\s*:\s*(\S*)", line)
            if m and columns is not None:
                try:
                    avg = float(m.group(1))
                except ValueError:
                    avg = float("nan")
                if not math.isfinite(avg) or avg < 0:
                    raise InputError("avg bus bandwidth", f"not a non-negative number ({m.group(1)!r})",
                                     f"{path}:{lineno}")
            elif data and re.match(r"#\s*(Out of bounds|Avg bus|Collective test concluded|Errors with asterisks)",
                                   line) is None:
                flush()
            rank = _RANK_RE.match(line)
            if rank:
                ranks[int(rank.group("rank"))] = (rank.group("host"), rank.group("device"))
                groups[int(rank.group("rank"))] = int(rank.group("group") or 0)
            if not data and "Collective test concluded" not in line:
                ctx.append(line)
            continue
        if columns is not None and re.fullmatch(r"\d+", tokens[0]):
            where = f"{path}:{lineno}"
            tokens = _row_cells(tokens, columns, where)
            data.append([_cell(t, c, where) for t, c in zip(tokens, columns)])
            row_lines.append(lineno)
        elif columns is not None and (not trailer or len(tokens) == len(columns)) and (
                _NUMBER_LIKE_RE.fullmatch(tokens[0]) or _SEPARATED_SIZE_RE.fullmatch(tokens[0])):
            # inside the table, a row whose size is not a whole number of bytes: a corrupted row, not text to
            # skip; after its trailer only a line with every cell ("1. run with ..." is a note, skipped)
            raise InputError("size", f"must be a whole number of bytes (got {tokens[0]!r})", f"{path}:{lineno}")
        elif not data:
            ctx.append(line)  # command lines such as ``./build/all_reduce_perf -b 8``
    flush()
    if not results:
        raise InputError("nccl-tests output", "no data rows found (expected a '#  size  count"
                         "  type ...' header followed by numeric rows)", f"{path}:1")
    return results


def parse_nccl_tests(path: str | Path) -> NcclTestsResult:
    """The first (usually only) benchmark table of an nccl-tests output file."""
    return parse_nccl_tests_all(path)[0]
