"""Why the HF Ultra-Scale Playbook sweep (``hfpb-*``, nanotron on an EFA H100 cluster) is hard to predict.

``python benchmarks/hfpb_stall.py``

An analysis, not a prediction: it reads the rows' measured throughput to sort them, after the
model has predicted them from their configuration alone (shipped profile). For each row:

* measured step time = global_batch * seq_len / (tokens/s/GPU * GPUs);
* micro-batch slots = gradient-accumulation steps + pp - 1 (the 1F1B schedule's length);
* excess per slot = (measured - predicted step time) / slots.

Rows whose excess exceeds ``STALL_S_PER_SLOT`` are in a "stall mode": about one extra second
per micro-batch slot, whatever the model size or micro-batch. The script prints how often that
happens against the node count (cross-node-TP rows left out: their slowness is modelled), how
long the stall is, the ZeRO-0 / ZeRO-1 twins that differ only in the ZeRO stage yet run at very
different speeds, and the model's error inside and outside the stall mode.

A second analysis (``hop_free``) predicts the same rows with nanotron's fitted per-hop pipeline
cost (``p2p_overhead_s``) set to 0, and reads what the pipeline runs add beyond that:

* the stall mode (> ``HOP_FREE_STALL_S_PER_SLOT`` extra per slot) against the node count, with and
  without a pipeline;
* outside it, on 2 to 32 nodes, the extra time per layer and micro-batch slot of the cross-node
  pipeline runs (micro-batch <= 4) against the TP size, and its least-squares slope per TP rank
  beyond the first. The fitted per-hop cost stands for both at once: the expected stall, which
  grows with the node count, and a cost that grows with the TP size.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from perfmodel.validate import predict_runs

RUNS = Path(__file__).resolve().parents[1] / "calibration" / "data" / "runs" / "calibration_runs.csv"
STALL_S_PER_SLOT = 0.4
HOP_FREE_STALL_S_PER_SLOT = 0.3


def excess_s_per_slot(hf: pd.DataFrame, pred: pd.DataFrame) -> pd.Series:
    """(measured - predicted step time) / micro-batch slots (gradient-accumulation steps + pp - 1)."""
    slots = hf.global_batch / (hf.micro_batch * hf.dp) + hf.pp - 1.0
    measured_s = hf.global_batch * hf.seq_len / (hf.tokens_per_s_per_gpu * hf.n_gpus)
    return (measured_s - pred.pred_iteration_time_s) / slots


def analyse(runs: pd.DataFrame) -> dict:
    hf = runs[runs.run_id.str.startswith("hfpb")].reset_index(drop=True)
    pred = predict_runs(hf)
    gpn = hf.gpus_per_node.fillna(8.0)
    excess = excess_s_per_slot(hf, pred)
    stall = excess > STALL_S_PER_SLOT
    nodes = hf.n_gpus / gpn
    intra_tp = hf.tp <= gpn
    by_nodes = pd.DataFrame({"nodes": nodes, "stall": stall})[intra_tp].groupby("nodes").stall.agg(["size", "mean"])
    ape = 100.0 * np.abs(pred.pred_tokens_per_s_per_gpu / hf.tokens_per_s_per_gpu - 1.0)

    keys = ["model_name", "n_gpus", "tp", "pp", "dp", "micro_batch", "global_batch"]
    # a configuration measured twice under one stage counts once (mean), so each twin is one pair
    once = hf.groupby(keys + ["zero_stage"], as_index=False)["tokens_per_s_per_gpu"].mean()
    twins = once[once.zero_stage == 0].merge(once[once.zero_stage == 1], on=keys, suffixes=("_0", "_1"))
    ratio = np.exp(np.abs(np.log(twins.tokens_per_s_per_gpu_1 / twins.tokens_per_s_per_gpu_0)))
    return {
        "rows": len(hf), "stall_fraction": float(stall.mean()),
        "stall_fraction_by_nodes": by_nodes.rename(columns={"size": "rows", "mean": "stall_fraction"}),
        "stall_excess_s_per_slot_median": float(excess[stall].median()),
        "stall_excess_s_per_slot_iqr": (float(excess[stall].quantile(0.25)), float(excess[stall].quantile(0.75))),
        "mape_all_pct": float(ape.mean()), "mape_stall_pct": float(ape[stall].mean()),
        "mape_no_stall_pct": float(ape[~stall].mean()), "median_ape_no_stall_pct": float(ape[~stall].median()),
        "zero_twins": len(twins), "zero_twins_over_3x": int((ratio > 3.0).sum()),
        "zero_twins_max_ratio": float(ratio.max()),
    }


def hop_free(runs: pd.DataFrame) -> dict:
    """The rows predicted without nanotron's fitted per-hop pipeline cost (see the module docstring)."""
    from perfmodel.calibration_profile import load_calibration

    hf = runs[runs.run_id.str.startswith("hfpb")].reset_index(drop=True)
    cal = load_calibration(None)
    frameworks = dict(cal.frameworks)
    frameworks["nanotron"] = {**frameworks.get("nanotron", {}), "p2p_overhead_s": 0.0}
    pred = predict_runs(hf, cal.model_copy(update={"frameworks": frameworks}))
    gpn = hf.gpus_per_node.fillna(8.0)
    nodes = hf.n_gpus / gpn
    excess = excess_s_per_slot(hf, pred)
    stall = excess > HOP_FREE_STALL_S_PER_SLOT
    intra_tp = hf.tp <= gpn
    frame = pd.DataFrame({"pipeline": np.where(hf.pp > 1, "pp > 1", "pp = 1"), "nodes": nodes, "stall": stall})
    by_nodes = frame[intra_tp].groupby(["pipeline", "nodes"]).stall.mean().unstack("nodes")
    per_layer_ms = 1e3 * excess / (hf.n_layers / hf.pp)
    sel = intra_tp & (hf.pp > 1) & (nodes >= 2) & (nodes <= 32) & ~stall & (hf.micro_batch <= 4)
    tp_table = pd.DataFrame({"tp": hf.tp[sel], "pp": hf.pp[sel], "ms": per_layer_ms[sel]})
    by_tp = tp_table.pivot_table(index="tp", columns="pp", values="ms", aggfunc="median")
    x, y = (tp_table.tp - 1.0).to_numpy(), tp_table.ms.to_numpy()
    return {"stall_fraction": by_nodes, "excess_ms_per_layer_slot": by_tp,
            "slope_ms_per_tp_rank": float(x @ y / (x @ x)), "rows": int(sel.sum())}


def main() -> None:
    res = analyse(pd.read_csv(RUNS))
    print(f"hfpb rows: {res['rows']}; in the stall mode (> {STALL_S_PER_SLOT} s extra per micro-batch slot): "
          f"{100 * res['stall_fraction']:.0f}%")
    lo, hi = res["stall_excess_s_per_slot_iqr"]
    print(f"stall length per slot: median {res['stall_excess_s_per_slot_median']:.2f} s (IQR {lo:.2f}-{hi:.2f} s)")
    print("share of stalled runs by node count (TP inside the node):")
    print(res["stall_fraction_by_nodes"].round(2).to_string())
    print(f"ZeRO-0 / ZeRO-1 twins (same model, GPUs, tp, pp, dp, micro-batch, batch): {res['zero_twins']}; "
          f"{res['zero_twins_over_3x']} differ by more than 3x (at most {res['zero_twins_max_ratio']:.0f}x)")
    print(f"model MAPE: all rows {res['mape_all_pct']:.1f}%, stalled {res['mape_stall_pct']:.1f}%, "
          f"not stalled {res['mape_no_stall_pct']:.1f}% (median APE {res['median_ape_no_stall_pct']:.1f}%)")
    free = hop_free(pd.read_csv(RUNS))
    print(f"\nwithout the fitted per-hop pipeline cost: share of runs {HOP_FREE_STALL_S_PER_SLOT} s per slot or more "
          "slower than predicted (TP inside the node), against nodes:")
    print(free["stall_fraction"].round(2).to_string())
    print(f"outside that mode, cross-node pipelines on 2-32 nodes (micro-batch <= 4, {free['rows']} runs): "
          "extra ms per layer and micro-batch slot, median, TP (rows) x PP (columns):")
    print(free["excess_ms_per_layer_slot"].round(1).to_string())
    print(f"least-squares slope: {free['slope_ms_per_tp_rank']:.1f} ms per layer-slot per TP rank beyond the first")


if __name__ == "__main__":
    main()
