"""GEMM timing CSV (one row per measured matmul) -> DataFrame with achieved TFLOP/s.

Required columns: m, n, k (or M, N, K), dtype, and one of time_s / time_ms / time_us; optional
``batch`` (a batched GEMM, default 1). A GEMM of shape (m, k) x (k, n) does 2·m·n·k FLOPs (one
multiply and one add per MAC), a batch of them 2·batch·m·n·k.
``dtype`` is one of ``GEMM_DTYPES`` or a spelling in ``specs.hardware.DTYPE_ALIASES`` (torch / numpy names);
the returned column holds the canonical name. ``df.attrs`` keeps each row's file line
(``lines``), the time column and the path, so later checks (the GPU's peak) can name the row, and
the ``device=`` a ``#`` line above the header names (``device``, the collection kit writes it), so
calibrate can refuse a file measured on another GPU than ``--gpu``.
"""
from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pandas as pd

from perfmodel.calibrate.parsers._csv_table import read_csv_text, require_columns, require_unique_columns, to_numeric
from perfmodel.errors import InputError, read_text_file
from perfmodel.specs.hardware import DTYPE_ALIASES, PEAK_PRECISIONS, canonical_dtype  # noqa: F401 (re-exported)

_TIME_UNITS_S = {"time_s": 1.0, "time_ms": 1e-3, "time_us": 1e-6}
MAX_TIME_S = 86400.0
"""Longest time a row may hold: a day (a benchmark times milliseconds)."""
MAX_DIM = 2**31
"""Largest m, n or k accepted: 2^31 (a 2^31 x 2^31 bf16 operand would be 8 EiB)."""
GEMM_DTYPES = PEAK_PRECISIONS
"""Precisions with a dense peak in the hardware profiles (``peak_dense_tflop_per_s`` keys)."""


def allowed_dtypes_text() -> str:
    return ", ".join(GEMM_DTYPES) + " (torch spellings such as bfloat16 or float16 also work)"


#: the most two measurements of one shape may differ (max / min) and both be read as measurements of it
MAX_REPEAT_SPREAD = 2.0


def parse_gemm_csv(path: str | Path) -> pd.DataFrame:
    """Columns m, n, k (int), dtype (canonical), time_s, tflop_per_s, plus any others in the
    file. Every row must hold positive whole m, n, k (<= ``MAX_DIM``), a known dtype and a
    finite time > 0; a file without data rows is an error."""
    df, lines, header_line = read_csv_text(path)
    # the columns this reader knows are read whatever their case (M,N,K,DTYPE,TIME_US as a spreadsheet writes
    # them); a repeat in another case (M next to m) is refused below
    known = {"m", "n", "k", "dtype", "batch", *_TIME_UNITS_S}
    df = df.rename(columns={c: c.strip().lower() for c in df.columns if c.strip().lower() in known})
    require_unique_columns(df.columns, path, header_line)  # M next to m
    time_cols = [c for c in _TIME_UNITS_S if c in df.columns]
    if len(time_cols) > 1:
        raise InputError("csv columns", f"more than one time column ({', '.join(time_cols)}); "
                         "give exactly one of time_s, time_ms, time_us", f"{path}:{header_line}")
    time_col = time_cols[0] if time_cols else None
    require_columns(df, ["m", "n", "k", "dtype"] + ([time_col] if time_col else []),
                    path, header_line)
    if time_col is None:
        raise InputError("csv columns", "missing a time column (one of time_s, time_ms, "
                         f"time_us); found {list(df.columns)}", f"{path}:{header_line}")
    if df.empty:
        raise InputError("csv", "no data rows (only a header): nothing to fit",
                         f"{path}:{header_line}")
    cells = {c: df[c].astype(str).str.strip() for c in ("m", "n", "k", time_col)}
    to_numeric(df, ["m", "n", "k"], lines, path)
    to_numeric(df, [time_col], lines, path)
    for col in ("m", "n", "k", time_col):
        missing = df[col].isna()
        if missing.any():
            i = int(missing.to_numpy().nonzero()[0][0])
            got = cells[col].iloc[i]
            raise InputError(col, f"not a finite number ({got!r})" if got else "blank cell",
                             f"{path}:{lines[i]}")
    if "batch" not in df.columns:  # a batched GEMM: batch independent (m, k) x (k, n) products
        df["batch"] = "1"
    cells["batch"] = df["batch"].astype(str).str.strip()
    df["batch"] = pd.to_numeric(cells["batch"].where(cells["batch"] != "", "1"), errors="coerce")
    for col in ("m", "n", "k", "batch"):
        v = df[col].to_numpy(dtype=float)
        bad = (v != np.round(v)) | (v < 1) | (v > MAX_DIM)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise InputError(col, f"must be a whole number from 1 to {MAX_DIM:,} (got "
                             f"{cells[col].iloc[i]})", f"{path}:{lines[i]}")
        df[col] = v.astype("int64")
    dtypes = df["dtype"].map(canonical_dtype)
    if dtypes.isna().any():
        i = int(np.flatnonzero(dtypes.isna().to_numpy())[0])
        got = str(df["dtype"].iloc[i]).strip()
        what = f"unknown GEMM dtype {got!r}" if got else "blank cell"
        raise InputError("dtype", f"{what}; allowed: {allowed_dtypes_text()}",
                         f"{path}:{lines[i]}")
    df["dtype"] = dtypes
    df["time_s"] = df[time_col] * _TIME_UNITS_S[time_col]
    if (df["time_s"] <= 0).any():
        i = int((df["time_s"] <= 0).to_numpy().nonzero()[0][0])
        raise InputError(time_col, "must be > 0", f"{path}:{lines[i]}")
    if (df["time_s"] > MAX_TIME_S).any():
        i = int((df["time_s"] > MAX_TIME_S).to_numpy().nonzero()[0][0])
        raise InputError(time_col, f"must be at most {MAX_TIME_S:,.0f} s (a day): no matmul takes longer "
                         f"(got {cells[time_col].iloc[i]})", f"{path}:{lines[i]}")
    # one shape measured twice is fine (repeated sweeps); twice at times more than 2x apart is a mix-up (a unit,
    # another GPU), which the fit would split the difference of
    key = ["m", "n", "k", "dtype", "batch"]
    span = df.groupby(key)["time_s"].transform("max") / df.groupby(key)["time_s"].transform("min")
    if (span > MAX_REPEAT_SPREAD).any():
        i = int(np.flatnonzero((span > MAX_REPEAT_SPREAD).to_numpy())[0])
        same = df[key].eq(df[key].iloc[i]).all(axis=1).to_numpy()
        shown = ", ".join(f"{df['time_s'].iloc[j]:.3g} s (line {lines[j]})" for j in np.flatnonzero(same)[:3])
        raise InputError(time_col, f"the shape {int(df['m'].iloc[i])}x{int(df['n'].iloc[i])}x{int(df['k'].iloc[i])} "
                         f"{df['dtype'].iloc[i]} is measured {span.iloc[i]:.3g}x apart: {shown}; more than "
                         f"{MAX_REPEAT_SPREAD:g}x is not run-to-run noise", f"{path}:{lines[i]}")
    flop = 2.0 * df["batch"].astype(float) * df["m"] * df["n"] * df["k"]
    df["tflop_per_s"] = flop / df["time_s"] / 1e12
    df.attrs.update({"path": str(path), "lines": list(lines), "time_column": time_col,
                     **_source_device(path, header_line)})
    return df


def _source_device(path: str | Path, header_line: int) -> dict[str, object]:
    """``{"device": name, "device_line": n}`` from a ``device=NAME`` fact in a ``#`` comment line
    above the header (the collection kit's ``# source:`` line: ``device=NVIDIA H200``), else {}. Read as
    the table is (``read_text_file``: a gzipped file decompressed, not scanned as bytes)."""
    with io.StringIO(read_text_file(path, "csv", errors="replace")) as f:
        for n, line in enumerate(f, start=1):
            if n >= header_line:
                break
            if line.lstrip().startswith("#"):
                for fact in line.lstrip("# ").split(";"):
                    key, _, value = fact.strip().partition("=")
                    if key == "device" and value.strip():
                        return {"device": value.strip(), "device_line": n}
    return {}
