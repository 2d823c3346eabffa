"""Measured-runs CSV in the canonical schema of ``data/README.md`` -> DataFrame.

Integer columns stay int64 when complete and become float64 (NaN) when a cell is blank;
text columns are str with blanks (and cells reading nan) as NaN. Unknown extra columns are kept as text.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from perfmodel.errors import InputError, say_note
from perfmodel.calibrate.parsers._csv_table import read_csv_text, require_columns, to_numeric

#: the columns a runs CSV must have: those without which no row can be costed (perfmodel.runs.REQUIRED);
#: every other schema column may be left out, which reads as a column of blank cells (documented defaults;
#: a row with neither its GPU count nor its layout is invalid, not the file)
REQUIRED_COLUMNS = ["run_id", "n_layers", "hidden_size", "seq_len", "gpu"]
#: a row's cells that could not be read as numbers (the row is ``invalid``, the file still reads)
ROW_ERRORS = "_row_errors"
#: per row, why its measurement contradicts itself: the row is still costed (its inputs are fine), but scored
#: and fitted on nothing (perfmodel.validate.measured_tokens_per_s_per_gpu)
TRUTH_ERRORS = "_truth_errors"
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
#: measured columns a run cannot have at 0: it processed tokens and its step took time (MFU may print as a
#: rounded 0)
POSITIVE_COLUMNS = ["tokens_per_s_per_gpu", "iteration_time_s"]
#: measured columns that are fractions of the peak (data/README.md: "fraction 0..1"); only mfu can be a
#: row's ground truth, so only it is checked
FRACTION_COLUMNS = ["mfu", "hfu"]
#: the most a row's step time and its tokens/s may disagree (the throughput the step time gives over the
#: stated one, either way); the shipped runs agree within 0.3%
MAX_TIME_RATE_SPREAD = 1.5
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
    present = set(df.columns)
    for col in SCHEMA_COLUMNS:
        if col not in df.columns:
            df[col] = np.nan
    row_errors = [""] * len(df)
    truth_errors = [""] * len(df)
    for col in BOOLEAN_COLUMNS:  # on/off columns written as words (True / false / yes ...) read as 1 / 0
        df[col] = df[col].map(lambda v: BOOLEAN_WORDS.get(v.strip().lower(), v) if isinstance(v, str) else v)
    for col in INT_COLUMNS:
        to_numeric(df, [col], lines, path, integer=True, row_errors=row_errors)
    to_numeric(df, FLOAT_COLUMNS, lines, path, row_errors=row_errors)
    for col in [c for c in df.columns if c not in INT_COLUMNS + FLOAT_COLUMNS]:
        cells = df[col].map(lambda v: "" if v is None or v != v else str(v).strip())
        # 'nan' (how pandas writes a missing cell of a frame turned to text) is blank here as in a number column
        df[col] = cells.where((cells != "") & (cells.str.lower() != "nan"), np.nan)
    # a measurement is not negative (a printed 0% MFU is a rounded one), a throughput or a step time is not
    # 0 (no run takes no time), a utilization is a fraction (45 is a percent typed where 0.45 belongs), and
    # the target names a measured column
    for col in MEASURED_COLUMNS:
        for i in np.flatnonzero((df[col] < 0).to_numpy()):
            _note(row_errors, i, f"{col}: a measurement cannot be negative (got {df[col].iloc[i]:g})")
    for col in POSITIVE_COLUMNS:
        for i in np.flatnonzero((df[col] == 0).to_numpy()):
            _note(row_errors, i, f"{col}: must be > 0 (got 0)")
    # an implausible MFU or TFLOP/s voids the row only where it is the row's ground truth (no measured column
    # before it in the schema's order): a typo beside a measured throughput costs nothing
    # (as validate.measured_tokens_per_s_per_gpu reads them: a step time counts with its batch, sequence and GPUs)
    tok = df["tokens_per_s_per_gpu"].notna()
    timed = df["iteration_time_s"].notna() & df[["global_batch", "seq_len", "n_gpus"]].notna().all(axis=1)
    before = {"tflops_per_gpu": (tok | timed).to_numpy(), "mfu": (tok | timed | df["tflops_per_gpu"].notna()).to_numpy()}
    for col in (c for c in FRACTION_COLUMNS if c in TARGETS):  # hfu is never a ground truth
        for i in np.flatnonzero((df[col] > 1).to_numpy() & ~before[col]):
            _note(row_errors, i, f"{col}: must be a fraction from 0 to 1 (got {df[col].iloc[i]:g}; a percent "
                  f"would be {df[col].iloc[i] / 100:g})")
    _check_tflops(df, row_errors, ~before["tflops_per_gpu"])
    # a step time and a throughput of one row measure one thing: more than 1.5x apart, one is not this run's
    with np.errstate(divide="ignore", invalid="ignore"):
        implied = (df["global_batch"] * df["seq_len"] / df["iteration_time_s"] / df["n_gpus"]).to_numpy(dtype=float)
        ratio = implied / df["tokens_per_s_per_gpu"].to_numpy(dtype=float)
    for i in np.flatnonzero(np.isfinite(ratio) & (ratio > 0) & ((ratio > MAX_TIME_RATE_SPREAD)
                                                               | (ratio < 1.0 / MAX_TIME_RATE_SPREAD))):
        _note(truth_errors, i, f"iteration_time_s: gives {implied[i]:.4g} tokens/s/GPU (global_batch x seq_len / "
              f"n_gpus), {ratio[i]:.3g}x the row's tokens_per_s_per_gpu {df['tokens_per_s_per_gpu'].iloc[i]:g}")
    bad_target = df["target"].notna() & ~df["target"].isin(TARGETS)
    for i in np.flatnonzero(bad_target.to_numpy()):
        _note(row_errors, i, f"target: must be one of {', '.join(TARGETS)} (got {df['target'].iloc[i]!r})")
    # the column a row names as its measurement must hold it: scoring another (a TFLOP/s beside a blank
    # tokens/s) is a guess at what the source measured (a row that measures nothing is scored on nothing)
    measures = df[TARGETS].notna().any(axis=1)
    for col in TARGETS:
        for i in np.flatnonzero(((df["target"] == col) & df[col].isna() & measures).to_numpy()):
            _note(truth_errors, i, f"target: names {col}, which is blank in this row" + (
                "" if col in present else " (the CSV has no such column)"))
    extras = [c for c in df.columns if c not in SCHEMA_COLUMNS]
    note_unknown_columns(extras, path, header_line)
    note_unknown_frameworks(df["framework"], path)
    note_repeated_run_ids(df["run_id"], lines, path)
    out = df[SCHEMA_COLUMNS + extras].copy()
    out[ROW_ERRORS] = row_errors
    out[TRUTH_ERRORS] = truth_errors
    return out


def _note(row_errors: list[str], i: int, note: str) -> None:
    """Add ``note`` to row ``i``'s errors (the row is ``invalid``; the file still reads)."""
    row_errors[i] = f"{row_errors[i]}; {note}" if row_errors[i] else note


def note_unknown_columns(columns: list[str], path, header_line: int) -> None:
    """One ``note:`` line on stderr naming the columns the runs schema does not have: they are kept but
    read by nothing, so a misspelled one (``zero-stage``) would silently leave its cells to the defaults.
    The closest schema name is suggested where there is one."""
    import difflib

    if not columns:
        return
    shown = []
    for c in columns:
        key = str(c).strip().lower().replace("-", "_").replace(" ", "_")
        close = [key] if key in SCHEMA_COLUMNS else difflib.get_close_matches(key, SCHEMA_COLUMNS, n=1, cutoff=0.75)
        shown.append(f"{c!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    say_note(f"{path}:{header_line}: column(s) not in the runs schema, ignored: {', '.join(shown)}")


def _row_peaks(df: pd.DataFrame) -> list:
    """Each row's (GPU spec, precision, dense peak FLOP/s) in the row's precision (blank: the GPU's
    default), or None where the GPU or the precision has no profile (left to the model's own checks)."""
    from typing import get_args

    from perfmodel.catalog import _looks_like_path, load_gpu
    from perfmodel.specs.job import Precision

    specs: dict[str, object] = {}
    out = []
    for i in range(len(df)):
        gpu = str(df["gpu"].iloc[i]).strip() if isinstance(df["gpu"].iloc[i], str) else ""
        gpu = gpu if _looks_like_path(gpu) else gpu.lower()
        if gpu not in specs:
            try:
                specs[gpu] = load_gpu(gpu) if gpu else None
            except InputError:  # an unknown GPU or a broken profile: the row says so when it is costed
                specs[gpu] = None
        spec = specs[gpu]
        cell = df["precision"].iloc[i]
        precision = (cell.strip().lower() if isinstance(cell, str) and cell.strip()
                     else getattr(spec, "default_precision", None))
        if spec is None or precision not in get_args(Precision):
            out.append(None)
            continue
        out.append((spec, precision, spec.peak_flop_per_s(precision)))
    return out


def gpu_profile_paths(df: pd.DataFrame) -> list[str]:
    """The ``gpu`` cells that name a hardware-profile file rather than a catalog GPU (inputs an output
    must not replace)."""
    from perfmodel.catalog import _looks_like_path

    cells = df["gpu"].dropna().astype(str).str.strip() if "gpu" in df else pd.Series(dtype=str)
    return sorted({c for c in cells if c and _looks_like_path(c)})


def note_repeated_run_ids(run_ids: pd.Series, lines: list[int], path) -> None:
    """One ``note:`` line on stderr naming run ids that appear on more than one row (a pasted row, say):
    each row is still costed and scored, and a fit counts each of them."""
    ids = run_ids.astype(str).str.strip()
    repeated = ids[ids.duplicated(keep=False) & (ids != "") & (ids != "nan")]
    if repeated.empty:
        return
    shown = [f"{rid!r} (lines {', '.join(str(lines[i]) for i in np.flatnonzero((ids == rid).to_numpy()))})"
             for rid in list(dict.fromkeys(repeated))[:3]]
    more = len(set(repeated)) - len(shown)
    say_note(f"{path}: run_id on more than one row, each costed and scored (and fitted) on its own: "
             f"{', '.join(shown)}" + (f" and {more} more" if more > 0 else ""))


def note_unknown_frameworks(cells: pd.Series, path) -> None:
    """One ``note:`` line on stderr naming the framework cells perfmodel has no profile for: those rows run
    with the generic profile (not an error, CONTRACT.md), but a misspelled stack (``megatron_lm``) would
    otherwise change their predictions silently. The closest known name is suggested where there is one."""
    import difflib

    from perfmodel.frameworks import PROFILES

    names = cells.dropna().astype(str).str.strip()
    unknown = names[~names.str.lower().isin(list(PROFILES))]
    if unknown.empty:
        return
    known = sorted(k for k in PROFILES if k != "generic")
    shown = []
    for name, count in unknown.value_counts(sort=False).sort_index().items():
        key = name.lower().replace("_", "-").replace(" ", "-")
        close = [key] if key in known else difflib.get_close_matches(key, known, n=1, cutoff=0.75)
        shown.append(f"{name!r} ({count} row{'s' if count > 1 else ''}"
                     + (f"; did you mean {close[0]!r}?)" if close else ")"))
    say_note(f"{path}: framework(s) with no profile, run with the generic one: {', '.join(shown)}")


def _check_tflops(df: pd.DataFrame, row_errors: list[str], used: np.ndarray) -> None:
    """A ``tflops_per_gpu`` above ``MAX_ACHIEVED_OVER_PEAK`` x the GPU's dense peak in the row's precision
    (blank: the GPU's default) is not a per-GPU measurement (a per-node or cluster total, another unit), as
    for a GEMM benchmark row (``calibrate.command.check_gemm_rows``). Rows whose GPU or precision has no
    profile are left to the model's own checks; so are rows whose ground truth is a column before it
    (``used`` false). Likewise a throughput (``tokens_per_s_per_gpu``, or a step time with its batch) that
    needs more than that even at the fewest FLOPs a token can take: 12 L h^2, the forward and backward
    (6 FLOPs a weight) of the query and output projections alone (h x h each), whatever the MLP or the
    key/value heads."""
    from perfmodel.limits import MAX_ACHIEVED_OVER_PEAK

    peaks = _row_peaks(df)
    tok = df["tokens_per_s_per_gpu"].to_numpy(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        timed = (df["global_batch"] * df["seq_len"] / (df["iteration_time_s"] * df["n_gpus"])).to_numpy(float)
    throughput = np.where(np.isfinite(tok), tok, timed)
    min_flops_per_token = 12.0 * df["n_layers"].to_numpy(float) * df["hidden_size"].to_numpy(float) ** 2
    with np.errstate(over="ignore", invalid="ignore"):
        needed = throughput * min_flops_per_token
    for i, found in enumerate(peaks):
        if found is None:
            continue
        spec, precision, peak = found
        if np.isfinite(throughput[i]) and needed[i] > MAX_ACHIEVED_OVER_PEAK * peak:
            col = "tokens_per_s_per_gpu" if np.isfinite(tok[i]) else "iteration_time_s"
            flops = f"{needed[i] / 1e12:,.4g} TFLOP/s" if np.isfinite(needed[i]) else "beyond any float of FLOP/s"
            _note(row_errors, i, f"{col}: {throughput[i]:,.4g} tokens/s/GPU needs at least "
                  f"{flops} (12 L h^2 FLOPs a token), more than "
                  f"{MAX_ACHIEVED_OVER_PEAK}x the {spec.name} dense {precision} peak ({peak / 1e12:,.0f} TFLOP/s): "
                  "not a per-GPU measurement (check the unit)")
        if not (used[i] and np.isfinite(df["tflops_per_gpu"].iloc[i])):
            continue
        tflops = float(df["tflops_per_gpu"].iloc[i])
        if tflops * 1e12 > MAX_ACHIEVED_OVER_PEAK * peak:
            _note(row_errors, i, f"tflops_per_gpu: more than {MAX_ACHIEVED_OVER_PEAK}x the {spec.name} dense "
                  f"{precision} peak ({tflops:,.4g} > {MAX_ACHIEVED_OVER_PEAK} x {peak / 1e12:,.0f} TFLOP/s): "
                  "not a per-GPU measurement (check the unit)")
