"""Predicted peak memory per GPU against the memory some sources report in their notes.

Four sources state a memory figure per run: the HF playbook sweep (``GPU memory=X GB``),
torchtitan's performance pages (``Peak memory X GiB``) and its H200 benchmark (``Memory X GiB``), and the
BLOOM chronicles (``Mem=XGB``, read off nvidia-smi). What each figure counts differs (allocated vs reserved, with or without the
CUDA context), so this is a check of scale and trend, not a fit: predictions never read them.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from perfmodel.validate import predict_runs, run_sources

PATTERNS = (r"GPU memory=([\d.]+) GB", r"Peak memory ([\d.]+) GiB", r"\bMemory ([\d.]+) GiB", r"Mem=([\d.]+)GB")


def reported_gib(notes: pd.Series) -> np.ndarray:
    """The memory figure a row's ``notes`` state (NaN where none)."""
    out = np.full(len(notes), np.nan)
    for i, text in enumerate(notes.fillna("").astype(str)):
        for pat in PATTERNS:
            m = re.search(pat, text)
            if m:
                out[i] = float(m.group(1))
                break
    return out


def memory_table(df: pd.DataFrame) -> pd.DataFrame:
    """Per source: runs with a reported figure, median predicted / reported, share within 25%."""
    pred = predict_runs(df)
    frame = pd.DataFrame({"source": run_sources(df), "reported_gib": reported_gib(df["notes"]),
                          "pred_gib": pred["pred_memory_gib"].to_numpy()})
    frame = frame[np.isfinite(frame.reported_gib) & np.isfinite(frame.pred_gib) & (frame.reported_gib > 0)]
    frame["ratio"] = frame.pred_gib / frame.reported_gib
    return frame.groupby("source").agg(
        runs=("ratio", "size"), median_ratio=("ratio", "median"),
        within_25pct=("ratio", lambda r: float(np.mean(np.abs(r - 1.0) <= 0.25))))
