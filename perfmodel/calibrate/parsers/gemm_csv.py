"""GEMM timing CSV (one row per measured matmul) -> DataFrame with achieved TFLOP/s.

Required columns: m, n, k (or M, N, K), dtype, and one of time_s / time_ms / time_us.
A GEMM of shape (m, k) x (k, n) does 2·m·n·k FLOPs (one multiply and one add per MAC).
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from perfmodel.calibrate.parsers._csv_table import read_csv_text, require_columns, to_numeric
from perfmodel.errors import InputError

_TIME_UNITS_S = {"time_s": 1.0, "time_ms": 1e-3, "time_us": 1e-6}


def parse_gemm_csv(path: str | Path) -> pd.DataFrame:
    """Columns m, n, k (int), dtype, time_s, tflop_per_s, plus any others in the file."""
    df, lines, header_line = read_csv_text(path)
    df = df.rename(columns={c: c.lower() for c in df.columns if c in ("M", "N", "K")})
    time_col = next((c for c in _TIME_UNITS_S if c in df.columns), None)
    require_columns(df, ["m", "n", "k", "dtype"] + ([time_col] if time_col else []),
                    path, header_line)
    if time_col is None:
        raise InputError("csv columns", "missing a time column (one of time_s, time_ms, "
                         f"time_us); found {list(df.columns)}", f"{path}:{header_line}")
    to_numeric(df, ["m", "n", "k"], lines, path, integer=True)
    to_numeric(df, [time_col], lines, path)
    for col in ("m", "n", "k", time_col):
        missing = df[col].isna()
        if missing.any():
            i = int(missing.to_numpy().nonzero()[0][0])
            raise InputError(col, "blank cell", f"{path}:{lines[i]}")
    df["time_s"] = df[time_col] * _TIME_UNITS_S[time_col]
    if (df["time_s"] <= 0).any():
        i = int((df["time_s"] <= 0).to_numpy().nonzero()[0][0])
        raise InputError(time_col, "must be > 0", f"{path}:{lines[i]}")
    flop = 2.0 * df["m"].astype(float) * df["n"] * df["k"]
    df["tflop_per_s"] = flop / df["time_s"] / 1e12
    return df
