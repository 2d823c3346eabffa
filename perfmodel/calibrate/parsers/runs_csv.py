"""Measured-runs CSV in the canonical schema of ``data/README.md`` -> DataFrame.

Integer columns stay int64 when complete and become float64 (NaN) when a cell is blank;
text columns are str with blanks as NaN. Unknown extra columns are kept as text.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from perfmodel.errors import InputError
from perfmodel.calibrate.parsers._csv_table import read_csv_text, require_columns, to_numeric

REQUIRED_COLUMNS = ["run_id", "n_layers", "hidden_size", "ffn_hidden_size", "n_heads",
                    "seq_len", "gpu", "n_gpus", "tp", "pp", "dp", "global_batch"]
#: a row's cells that could not be read as numbers (the row is ``invalid``, the file still reads)
ROW_ERRORS = "_row_errors"
INT_COLUMNS = ["n_layers", "hidden_size", "ffn_hidden_size", "n_heads", "n_kv_heads",
               "vocab_size", "seq_len", "tied_embeddings", "n_experts", "moe_top_k", "n_gpus",
               "gpus_per_node", "tp", "pp", "dp", "cp", "ep", "vpp", "sp", "zero_stage",
               "micro_batch", "global_batch"]
#: the schema's 0/1 columns and the words that also mean 1 / 0 in them
BOOLEAN_COLUMNS = ["sp", "tied_embeddings"]
BOOLEAN_WORDS = {"true": "1", "yes": "1", "on": "1", "false": "0", "no": "0", "off": "0"}
FLOAT_COLUMNS = ["scale_out_gbit_per_s_per_node", "iteration_time_s", "tokens_per_s_per_gpu",
                 "tflops_per_gpu", "mfu", "hfu"]
#: the measured columns, in the schema's order of preference for ``target`` (data/README.md)
MEASURED_COLUMNS = ["tokens_per_s_per_gpu", "iteration_time_s", "tflops_per_gpu", "mfu", "hfu"]
TARGETS = MEASURED_COLUMNS[:4]
TEXT_COLUMNS = ["run_id", "source", "model_name", "mlp", "gpu", "network", "zeropp",
                "recompute", "precision", "framework", "target", "derived_fields", "notes"]
# Column order of the schema (data/README.md "Schema").
SCHEMA_COLUMNS = ["run_id", "source", "model_name", "n_layers", "hidden_size",
                  "ffn_hidden_size", "n_heads", "n_kv_heads", "vocab_size", "seq_len", "mlp",
                  "tied_embeddings", "n_experts", "moe_top_k", "gpu", "n_gpus", "gpus_per_node",
                  "scale_out_gbit_per_s_per_node", "network", "tp", "pp", "dp", "cp", "ep",
                  "vpp", "sp", "zero_stage", "zeropp", "micro_batch", "global_batch",
                  "recompute", "precision", "framework", "iteration_time_s",
                  "tokens_per_s_per_gpu", "tflops_per_gpu", "mfu", "hfu", "target",
                  "derived_fields", "notes"]


def read_runs_csv(path: str | Path) -> pd.DataFrame:
    """Every schema column present (absent optional ones added as NaN), then any extras."""
    df, lines, header_line = read_csv_text(path)
    require_columns(df, REQUIRED_COLUMNS, path, header_line)
    if df.empty:
        raise InputError("runs csv", "no data rows after the header", f"{path}:{header_line}")
    for col in SCHEMA_COLUMNS:
        if col not in df.columns:
            df[col] = np.nan
    row_errors = [""] * len(df)
    for col in BOOLEAN_COLUMNS:  # on/off columns written as words (True / false / yes ...) read as 1 / 0
        df[col] = df[col].map(lambda v: BOOLEAN_WORDS.get(v.strip().lower(), v) if isinstance(v, str) else v)
    for col in INT_COLUMNS:
        to_numeric(df, [col], lines, path, integer=True, row_errors=row_errors)
    to_numeric(df, FLOAT_COLUMNS, lines, path, row_errors=row_errors)
    for col in [c for c in df.columns if c not in INT_COLUMNS + FLOAT_COLUMNS]:
        cells = df[col].map(lambda v: "" if v is None or v != v else str(v).strip())
        df[col] = cells.where(cells != "", np.nan)
    # a measurement is not negative (a printed 0% MFU is a rounded one), and the target names a measured column
    for col in MEASURED_COLUMNS:
        for i in np.flatnonzero((df[col] < 0).to_numpy()):
            note = f"{col}: a measurement cannot be negative (got {df[col].iloc[i]:g})"
            row_errors[i] = f"{row_errors[i]}; {note}" if row_errors[i] else note
    bad_target = df["target"].notna() & ~df["target"].isin(TARGETS)
    for i in np.flatnonzero(bad_target.to_numpy()):
        note = f"target: must be one of {', '.join(TARGETS)} (got {df['target'].iloc[i]!r})"
        row_errors[i] = f"{row_errors[i]}; {note}" if row_errors[i] else note
    extras = [c for c in df.columns if c not in SCHEMA_COLUMNS]
    out = df[SCHEMA_COLUMNS + extras].copy()
    out[ROW_ERRORS] = row_errors
    return out
