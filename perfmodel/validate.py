"""Predict measured runs and measure the error: ``perfmodel validate RUNS_CSV --out PRED_CSV``.

Error metric: absolute percentage error of tokens/s/GPU (the row's ``target`` column says
whether that is measured or derived; rows whose only ground truth is TFLOP/s are compared on
iteration time implied by nothing else and are skipped from the error, never from prediction).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from perfmodel.calibration_profile import Calibration
from perfmodel.costs.flops import megatron_eq3_flops_per_iteration, model_flops_per_token
from perfmodel.runs import (CONVENTION_EQ3, CONVENTION_MODEL_X3_4, least_recompute_that_fits, runs_to_inputs,
                            tflops_convention)

PRED_COLUMNS = ["run_id", "status", "reason", "pred_iteration_time_s", "pred_tokens_per_s_per_gpu",
                "pred_mfu", "pred_memory_gib", "fits"]


def source_slug(run_id: pd.Series) -> pd.Series:
    """``sc21-t1-003`` -> ``sc21-t1`` (run ids are slug + zero-padded index)."""
    return run_id.astype(str).str.replace(r"-\d+$", "", regex=True)


def run_sources(df: pd.DataFrame) -> pd.Series:
    """The source each row of a runs CSV belongs to: the slug of its run id where the id is slug +
    index (the schema's form, ``sc21-t1-003``), else its ``source`` cell where one is given, else the id."""
    run_id = df["run_id"].astype(str) if "run_id" in df else pd.Series(np.arange(len(df)).astype(str), index=df.index)
    slugged = run_id.str.fullmatch(r".+-\d+")
    source = df["source"].fillna("").astype(str).str.strip() if "source" in df else pd.Series("", index=df.index)
    return pd.Series(np.where(slugged, source_slug(run_id), np.where(source != "", source, run_id)), index=df.index)


def predict_runs(df: pd.DataFrame, calibration: Calibration | None = None) -> pd.DataFrame:
    """One prediction row per input row, in input order (columns ``PRED_COLUMNS``)."""
    if len(df) == 0:
        return pd.DataFrame({c: pd.Series(dtype=object if c in ("run_id", "status", "reason") else float)
                             for c in PRED_COLUMNS})
    inputs, status, reason, recompute_given = runs_to_inputs(df, calibration)
    n = len(df)
    # rows without a stated recompute mode: the least recomputation that fits; a stated one (balanced's code
    # is 3) is costed as stated in every try, so try 0 serves it
    chosen, tries = least_recompute_that_fits(inputs, recompute_given)
    chosen = np.where(recompute_given, 0, chosen).astype(int)

    def pick(key):
        return np.choose(chosen, [np.asarray(t[key], dtype=float) for t in tries])

    ok = status == "ok"
    # costed, but its measurement contradicts itself: predicted, and said why it is not scored
    void = truth_errors(df)
    reason = np.where(ok & (void != ""), np.char.add("not scored: ", void.astype(str)), reason)
    out = pd.DataFrame({
        "run_id": df["run_id"].to_numpy() if "run_id" in df else np.arange(n),
        "status": status,
        "reason": reason,
        "pred_iteration_time_s": np.where(ok, pick("iteration_time_s"), np.nan),
        "pred_tokens_per_s_per_gpu": np.where(ok, pick("tokens_per_s_per_gpu"), np.nan),
        "pred_mfu": np.where(ok, pick("mfu"), np.nan),
        "pred_memory_gib": np.where(ok, pick("memory_gib"), np.nan),
        "fits": np.where(ok, pick("fits") > 0, False),
    })
    return out[PRED_COLUMNS]


def convention_flops_per_token(df: pd.DataFrame) -> np.ndarray:
    """FLOPs per token under the convention the source used for its TFLOP/s (``[tflops convention:
    ...]`` in ``notes``): Megatron eq. 3 (Narayanan et al. 2021, counts recomputation), 3/4 of it
    (flash-attention's model FLOPs), or model FLOPs (6N-style, attention not causally halved)."""
    def col(name, default=np.nan):
        return pd.to_numeric(df.get(name), errors="coerce").to_numpy(dtype=float) if name in df else np.full(len(df), default)

    L, h, s = col("n_layers"), col("hidden_size"), col("seq_len")
    V = np.nan_to_num(col("vocab_size"), nan=32000.0)
    a, kv, ffn = col("n_heads"), col("n_kv_heads"), col("ffn_hidden_size")
    kv = np.where(np.isfinite(kv), kv, a)
    mm = np.where(df.get("mlp", pd.Series([""] * len(df))).fillna("").to_numpy() == "swiglu", 3.0, 2.0)
    eq3 = megatron_eq3_flops_per_iteration(1.0, s, L, h, V) / s
    model = model_flops_per_token(L, h, ffn, a, kv, V, mm, s, causal=False)
    conv = tflops_convention(df)
    return np.select([conv == CONVENTION_EQ3, conv == CONVENTION_MODEL_X3_4], [eq3, 0.75 * eq3], model)


def mfu_tokens_per_s_per_gpu(df: pd.DataFrame) -> np.ndarray:
    """tokens/s/GPU that a row's MFU stands for, under the definition ``pred_mfu`` uses (the same filled-in
    shape): model FLOPs per token (``model_flops_per_token``, no recompute) over the GPU's dense 16-bit peak;
    NaN where the row cannot be costed."""
    inputs, status, _, _ = runs_to_inputs(df)
    x = {k: np.asarray(v, dtype=float) for k, v in inputs.items()}
    flops = model_flops_per_token(x["n_layers"], x["hidden_size"], x["ffn_hidden_size"], x["n_heads"],
                                  x["n_kv_heads"], x["vocab_size"], x["mlp_matrices"], x["seq_len"], causal=False)
    mfu = pd.to_numeric(df["mfu"], errors="coerce").to_numpy(dtype=float) if "mfu" in df else np.full(len(df), np.nan)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(np.asarray(status) == "ok", mfu * x["bf16_peak_flop_per_s"] / flops, np.nan)


def measured_tokens_per_s_per_gpu(df: pd.DataFrame) -> np.ndarray:
    """Ground truth for the error: measured (or source-derived) tokens/s/GPU; else from the
    iteration time; else, where TFLOP/s is all the source gives, TFLOP/s over its convention's
    FLOPs per token; else, where MFU is, MFU under ``pred_mfu``'s definition (``mfu_tokens_per_s_per_gpu``)."""
    def measured(name):  # a column the CSV leaves out measures nothing
        return pd.to_numeric(df[name], errors="coerce").to_numpy(dtype=float) if name in df \
            else np.full(len(df), np.nan)

    tok, it, tflops = measured("tokens_per_s_per_gpu"), measured("iteration_time_s"), measured("tflops_per_gpu")
    gb = pd.to_numeric(df["global_batch"], errors="coerce").to_numpy(dtype=float)
    s = pd.to_numeric(df["seq_len"], errors="coerce").to_numpy(dtype=float)
    g = pd.to_numeric(df["n_gpus"], errors="coerce").to_numpy(dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        from_time = gb * s / it / g
        from_tflops = tflops * 1e12 / convention_flops_per_token(df)
    truth = np.where(np.isfinite(tok), tok, np.where(np.isfinite(from_time), from_time, from_tflops))
    only_mfu = ~np.isfinite(truth) & (pd.to_numeric(df["mfu"], errors="coerce").notna().to_numpy()
                                      if "mfu" in df else False)
    if np.any(only_mfu):  # the rows whose MFU is all they measure (their inputs filled once more, for them only)
        truth = truth.copy()
        truth[only_mfu] = mfu_tokens_per_s_per_gpu(df[only_mfu])
    # a measurement that is not a positive finite number cannot score a prediction, nor one that contradicts
    # itself (runs_csv.TRUTH_ERRORS: a blank target column beside another measurement, a step time and a
    # throughput 1.5x apart)
    void = truth_errors(df) != ""
    return np.where(np.isfinite(truth) & (truth > 0) & ~void, truth, np.nan)


def truth_errors(df: pd.DataFrame) -> np.ndarray:
    """Per row, why its measurement cannot score a prediction ('' where it can), as the runs CSV reader says."""
    from perfmodel.calibrate.parsers.runs_csv import TRUTH_ERRORS

    if TRUTH_ERRORS not in df:
        return np.full(len(df), "", dtype=object)
    return df[TRUTH_ERRORS].fillna("").astype(str).to_numpy()


def error_table(df: pd.DataFrame, pred: pd.DataFrame) -> tuple[pd.DataFrame, dict]:
    """Per-source table (rows, ok, MAPE %, median APE %) and overall / macro MAPE."""
    truth = measured_tokens_per_s_per_gpu(df)
    with np.errstate(divide="ignore", invalid="ignore"):
        ape = np.abs(pred["pred_tokens_per_s_per_gpu"].to_numpy() / truth - 1.0) * 100.0
    frame = pd.DataFrame({
        "source": run_sources(df).fillna("(no run_id)").to_numpy(),
        "ok": (pred["status"] == "ok").to_numpy(),
        "ape": ape,
    })
    scored = frame[frame.ok & np.isfinite(frame.ape)]
    table = frame.groupby("source").agg(rows=("ok", "size"), ok=("ok", "sum")).join(
        scored.groupby("source").agg(scored=("ape", "size"), mape_pct=("ape", "mean"), median_ape_pct=("ape", "median"))
    ).fillna({"scored": 0}).astype({"scored": int})
    summary = {
        "rows": int(len(frame)),
        "ok": int(frame.ok.sum()),
        "ok_fraction": float(frame.ok.mean()) if len(frame) else 0.0,
        "scored": int(len(scored)),
        "mape_pct": float(scored.ape.mean()) if len(scored) else float("nan"),
        "macro_mape_pct": float(table.mape_pct.mean()) if len(scored) else float("nan"),
    }
    return table.sort_values("mape_pct", ascending=False), summary
