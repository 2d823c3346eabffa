"""Fit the model's few physical parameters to measured training runs.

Residual of a run: r = log(predicted / measured tokens/s/GPU), weighted by 1/sqrt(rows of its
source) so every source counts the same however many rows it has (the HF playbook sweep is 81%
of the rows). ``scipy.optimize.least_squares`` with a robust Cauchy loss (scale 0.1 in log
error, applied to each run before its source weight) keeps the very slow outliers from
dominating. Parameters (each with a physical meaning, bounded to its plausible range):

* global: attn_efficiency_max and fp8_matmul_efficiency_ratio (each only for GPUs that state no
  measured flash-attention rate / fp8 MAMF of their own), tp_internode_efficiency (from the runs
  whose TP group spans nodes, in any stack, on fabrics without a value of their own: in the shipped
  data DLPerf's single TP 32 run on EDR InfiniBand; the HF playbook's TP 16/32 when it is alone),
  misaligned_bmm_efficiency (from the runs without flash attention whose head dimension is not a
  multiple of 8: BLOOM's head-count sweeps);
  fabric congestion is not invented here for fabrics no collective benchmark measured: an unknown
  fabric is taken as non-blocking;
* per fabric with data (e.g. EFA): congestion_nodes; and tp_internode_efficiency for a fabric with
  at least 100 cross-node TP runs while other fabrics' runs still inform the shared value;
* per framework with data: kernel_efficiency; and where the framework's rows vary the knobs that
  identify them: layer_overhead_s (the host's dispatch time per layer, a floor under the layer's kernel
  time, perfmodel.step), microbatch_overhead_s, p2p_overhead_s (100+ rows), or
  microbatch_overhead_s alone (50+ rows over 3+ micro-batch sizes);
* derived, not fitted: the generic profile's kernel_efficiency (a stack with no profile of its own, or
  a blank framework cell, and a known stack the profile holds no value for), the median of the values the
  written profile holds for the named stacks; the rows of such stacks run at it while the fit runs.

Row counts ("100+ rows") count distinct configurations: a run listed twice is one more measurement of
the same step, which the residuals weigh, not more evidence for a parameter. The fit runs from two starts
(the overheads small, and ten times larger, ``_least_squares_from_starts``) and keeps the lower cost.

Never a constant per row; a row's measured value is used only in its own residual.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from perfmodel.calibration_profile import FRAMEWORK_SIBLING_KEYS, ZERO3_ENGINE_KEYS, Calibration
from perfmodel.frameworks import PROFILES
from perfmodel.limits import MAX_KERNEL_EFFICIENCY
from perfmodel.runs import least_recompute_that_fits, runs_to_inputs
from perfmodel.costs.compute import HEAD_DIM_ALIGN
from perfmodel.step import step_costs
from perfmodel.validate import measured_tokens_per_s_per_gpu, run_sources

FRAMEWORK_PARAMS = {
    # name: (lower, upper, start)
    "kernel_efficiency": (0.3, MAX_KERNEL_EFFICIENCY, 0.9),  # at most ~MAMF: 1.15 x matmul_training_efficiency 0.85
}
OVERHEAD_PARAMS = {
    "layer_overhead_s": (0.0, 0.02, 5e-4),
    "microbatch_overhead_s": (0.0, 0.5, 5e-3),
    "p2p_overhead_s": (0.0, 1.0, 1e-2),
}
GLOBAL_PARAMS = {
    "attn_efficiency_max": (0.15, 0.9, 0.5),
    "fp8_matmul_efficiency_ratio": (0.3, 1.1, 0.8),
    "fp4_matmul_efficiency_ratio": (0.1, 1.1, 0.6),
    "tp_internode_efficiency": (1e-3, 1.0, 0.5),
    "misaligned_bmm_efficiency": (0.01, 1.0, 0.25),
}
#: ZeRO-3's latency per inter-node hop of a collective (perfmodel.zeropp), for a framework whose data include ZeRO-3 runs
ZERO3_PARAMS = {"zero3_step_latency_s": (0.0, 1e-3, 2e-5)}
#: the thresholds below count distinct configurations (``_first_of_each_configuration``): a run measured
#: twice is one more measurement of the same step, not more evidence for a parameter
MIN_ROWS_FRAMEWORK = 5
MIN_ROWS_OVERHEADS = 100
#: a framework with fewer rows still identifies its per-micro-batch overhead where its runs vary the
#: micro-batch size enough (BLOOM's Megatron-DeepSpeed runs: 80 rows, micro-batches 1 to 8, measured faster
#: with larger micro-batches where the bubble and the GEMMs alone would make them slower)
MIN_ROWS_MICROBATCH_OVERHEAD = 50
MIN_MICRO_BATCH_SIZES = 3


@dataclass(frozen=True)
class RunsFit:
    calibration: Calibration
    params: dict[str, float]
    residuals: pd.DataFrame  # run_id, source, framework, log_ratio


#: Robust scale of a run's log error: residuals beyond ~10% count less and less (Cauchy loss).
ROBUST_SCALE_LOG = 0.1


def _robust(r: np.ndarray) -> np.ndarray:
    """Cauchy-robust residual on the unweighted log error r: psi(r)^2 = c^2 log(1 + (r/c)^2).

    Applied before the per-source weight, so a run counts as an outlier at the same log error
    whichever source it comes from (scipy's own ``loss``/``f_scale`` act on the weighted residual,
    whose scale would then depend on the size of the run's source)."""
    c = ROBUST_SCALE_LOG
    return c * np.sign(r) * np.sqrt(np.log1p((r / c) ** 2))


def _gpu_states(df: pd.DataFrame, base: Calibration, field: str) -> np.ndarray:
    """Rows whose GPU (catalog name or profile YAML, with the base calibration's overrides) states
    its own ``field`` (e.g. a measured ``fp8_matmul_efficiency_max``): a global fitted value that
    stands in for it must neither be fitted on nor applied to those rows."""
    from perfmodel.catalog import load_gpu
    from perfmodel.errors import InputError

    names = df["gpu"].fillna("").astype(str).str.strip()
    states: dict[str, bool] = {}
    for g in set(names):
        try:
            states[g] = getattr(base.gpu(load_gpu(g)), field) is not None
        except (InputError, OSError, ValueError):
            states[g] = False
    return names.map(states).to_numpy(dtype=bool)


def _first_of_each_configuration(inputs: dict, labels: list[np.ndarray], n: int,
                                 among: np.ndarray | None = None) -> np.ndarray:
    """True on the first row (of the rows ``among`` marks; default all) of each distinct configuration: rows
    whose costed inputs (every array the step model reads) and ``labels`` (stack, fabric) are equal are one
    configuration."""
    rows = np.flatnonzero(np.ones(n, dtype=bool) if among is None else among)
    columns = [np.broadcast_to(np.asarray(v, dtype=float), (n,))[rows] for _, v in sorted(inputs.items())
               if np.ndim(v) <= 1 and np.asarray(v).dtype.kind in "biuf"]
    codes = [np.unique(np.asarray(lab, dtype=str), return_inverse=True)[1].astype(float)[rows] for lab in labels]
    table = np.nan_to_num(np.column_stack(columns + codes), nan=-1.0, posinf=-2.0, neginf=-3.0)
    first = np.zeros(n, dtype=bool)
    if rows.size:
        first[rows[np.unique(table, axis=0, return_index=True)[1]]] = True
    return first


def _prepare(df: pd.DataFrame, base: Calibration):
    inputs, status, _, recompute_given = runs_to_inputs(df, base)
    inputs["recompute"] = least_recompute_that_fits(inputs, recompute_given)[0]  # a stated mode as stated
    truth = measured_tokens_per_s_per_gpu(df)
    ok = (status == "ok") & np.isfinite(truth) & (truth > 0)
    return inputs, ok, truth


#: the second start's overheads, as a multiple of their first start (``_least_squares_from_starts``)
OVERHEAD_SECOND_START = 10.0


def _least_squares_from_starts(residual, names, x0, lo, hi):
    """The lower-cost of two bounded least-squares fits: one from ``x0``, and, where per-stack overheads are
    fitted, one with them ``OVERHEAD_SECOND_START`` x larger. A stack's fixed costs and its kernel rate trade
    off, and the fit had two basins there (nanotron's 1,241 runs, while the host's time per layer was added
    on top of the kernels: the kernel rate at its bound with a 21 ms pipeline overhead, or just below with
    57 ms; robust cost 0.06245 vs 0.06234): which one a single start reached depended on parameters the runs
    do not inform. With that time a floor under the kernels (2026-12-02) both starts reached one fit (0.06191);
    without the fixed 50 ms a step (later that day) they reach two close ones again (0.05831 with a 59 ms
    per-hop cost, kept, and 0.05856 with 20 ms), so both starts stay."""
    lo, hi = np.array(lo), np.array(hi)
    starts = [np.array(x0, dtype=float)]
    overhead = np.array([p in OVERHEAD_PARAMS for _, _, p in names], dtype=bool)
    if overhead.any():
        starts.append(np.where(overhead, starts[0] * OVERHEAD_SECOND_START, starts[0]))
    fits = [least_squares(residual, np.clip(x, lo + 1e-12, hi - 1e-12), bounds=(lo, hi), loss="linear",
                          x_scale="jac", diff_step=1e-3, max_nfev=200) for x in starts]
    return min(fits, key=lambda r: r.cost)


def fit_runs(df: pd.DataFrame, base: Calibration | None = None, pairs: pd.DataFrame | None = None) -> RunsFit:
    """Fit the parameters above to the runs in ``df`` (runs schema) and return a Calibration.

    ``pairs``: the ZeRO-3 vs ZeRO++ pairs CSV (DeepSpeed blog; ``perfmodel.zeropp``), fitted jointly
    as one more source: its 32 measured throughputs constrain the DeepSpeed profile together with
    the ZeRO-3 runs of ``df``."""
    base = base or Calibration()
    inputs, ok, truth = _prepare(df, base)
    # a stack without a profile of its own runs (and is fitted) as the generic one
    framework = df["framework"].fillna("generic").astype(str).str.strip().str.lower().to_numpy()
    framework = np.where(np.isin(framework, list(PROFILES)), framework, "generic")
    network = df.get("network", pd.Series([""] * len(df))).fillna("").astype(str).str.strip().str.lower().to_numpy()
    gpn = pd.to_numeric(df.get("gpus_per_node"), errors="coerce").to_numpy(dtype=float)
    gpn = np.where(gpn >= 1, gpn, np.nan)  # (a node size of 0 or below marks the row invalid: never divide by it)
    n_nodes = pd.to_numeric(df["n_gpus"], errors="coerce").to_numpy(dtype=float) / np.nan_to_num(gpn, nan=8.0)
    n_nodes = np.maximum(n_nodes, 1.0)
    # GPUs with a measured fp8 MAMF / flash-attention rate keep it; the global values cover the others
    fp8_measured = _gpu_states(df, base, "fp8_matmul_efficiency_max")
    attn_measured = _gpu_states(df, base, "attention_efficiency_max")

    src = run_sources(df).to_numpy()
    weight = np.zeros(len(df))
    for s in np.unique(src[ok]):
        sel = ok & (src == s)
        weight[sel] = 1.0 / np.sqrt(sel.sum())

    # fabrics whose congestion the base calibration fixes (from collective benchmarks) keep it
    network_fixed = np.array([("congestion_nodes" in base.networks.get(n, {})) for n in network])
    # which parameters the runs can inform is counted over distinct configurations (repeats fit as
    # measurements, weighted above, but unlock nothing)
    counted = _first_of_each_configuration(inputs, [framework, network], len(df), among=ok)
    names: list[tuple[str, str, str]] = []  # (kind, key, param)
    lo, hi, x0 = [], [], []

    def add(kind, key, param, bounds):
        names.append((kind, key, param))
        lo.append(bounds[0]); hi.append(bounds[1]); x0.append(bounds[2])

    # a global parameter is fitted only when some rows inform it (else it keeps its default)
    lowp = inputs["gemm_peak_flop_per_s"] / inputs["bf16_peak_flop_per_s"]
    # cross-node TP: a fabric with many such runs gets its own efficiency when other fabrics' runs
    # remain to fit the shared value (which then serves every fabric without its own)
    tp_cross = ok & (inputs["tp"] > inputs["nvlink_domain_gpus"])
    tp_nets, tp_counts = np.unique(network[tp_cross & counted], return_counts=True)
    own_tp = {n for n, c in zip(tp_nets.tolist(), tp_counts.tolist()) if n and c >= MIN_ROWS_OVERHEADS}
    if not (tp_cross & ~np.isin(network, list(own_tp))).any():
        own_tp = set()
    informed = {
        "attn_efficiency_max": bool((ok & (inputs["flash_attention"] > 0) & ~attn_measured).any()),
        "fp8_matmul_efficiency_ratio": bool((ok & (lowp > 1.0) & (lowp <= 2.5) & ~fp8_measured).any()),
        "fp4_matmul_efficiency_ratio": bool((ok & (lowp > 2.5)).any()),
        "tp_internode_efficiency": bool(tp_cross.any()),
        "misaligned_bmm_efficiency": bool((ok & (inputs["flash_attention"] <= 0) & (np.mod(
            inputs["hidden_size"] / inputs["n_heads"], HEAD_DIM_ALIGN) != 0)).any()),
    }
    for p, b in GLOBAL_PARAMS.items():
        if informed.get(p, True):
            add("global", "", p, b)
    for net in sorted(own_tp):
        add("network", net, "tp_internode_efficiency", GLOBAL_PARAMS["tp_internode_efficiency"])
    nets, net_counts = np.unique(network[counted & (n_nodes > 1)], return_counts=True)
    for net, cnt in zip(nets, net_counts):
        # a fabric whose congestion the collective benchmarks already fitted keeps that value
        if net and cnt >= MIN_ROWS_OVERHEADS and "congestion_nodes" not in base.networks.get(net, {}):
            add("network", net, "congestion_nodes", (1.0, 4096.0, 8.0))
    fws, counts = np.unique(framework[counted], return_counts=True)
    seen = dict(zip(fws.tolist(), counts.tolist()))
    if pairs is not None:
        seen.setdefault("deepspeed", 0)  # the ZeRO-3/ZeRO++ pairs inform DeepSpeed without any run of it
    for fw, cnt in seen.items():
        if cnt >= MIN_ROWS_FRAMEWORK:
            for p, b in FRAMEWORK_PARAMS.items():
                add("framework", fw, p, b)
        if cnt >= MIN_ROWS_OVERHEADS:
            for p, b in OVERHEAD_PARAMS.items():
                add("framework", fw, p, b)
        elif cnt >= MIN_ROWS_MICROBATCH_OVERHEAD and np.unique(
                inputs["micro_batch"][ok & (framework == fw)]).size >= MIN_MICRO_BATCH_SIZES:
            add("framework", fw, "microbatch_overhead_s", OVERHEAD_PARAMS["microbatch_overhead_s"])
        n_z3 = int((counted & (framework == fw) & (inputs["zero_stage"] >= 3) & (inputs["dp"] * inputs["cp"] > 1)).sum())
        if fw == "deepspeed" and pairs is not None:
            n_z3 += 2 * len(pairs)
            if cnt < MIN_ROWS_FRAMEWORK:
                for p, b in FRAMEWORK_PARAMS.items():
                    add("framework", fw, p, b)
        if n_z3 >= MIN_ROWS_FRAMEWORK:
            for p, b in ZERO3_PARAMS.items():
                add("framework", fw, p, b)

    pair_x = pair_flops = pair_meas = None
    if pairs is not None:
        from perfmodel.zeropp import pair_inputs

        pair_x, pair_flops = pair_inputs(pairs, base)
        pair_meas = np.concatenate([pairs["zero3_tflops_per_gpu"].to_numpy(float),
                                    pairs["zeropp_tflops_per_gpu"].to_numpy(float)]) * 1e12
        pair_weight = 1.0 / np.sqrt(len(pair_meas))

    def apply_pairs(x):
        arrs = dict(pair_x)
        for (kind, key, p), v in zip(names, x):
            if (kind == "global" and p in arrs) or (kind == "framework" and key == "deepspeed"):
                arrs[p] = np.full(len(pair_meas), v)
        return arrs

    # a stack without a fit of its own that is built on a fitted one (FrameworkProfile.calibration_from)
    # runs at, and informs, that one's kernel efficiency, as it will be predicted with the written profile
    # (key by key, as Calibration.borrowed reads the written profile)
    def owners(keys: frozenset, link: str) -> dict[str, np.ndarray]:
        out = {}
        for key_p in keys:
            fitted = {key for kind, key, p in names if kind == "framework" and p == key_p}
            source = {fw: getattr(PROFILES[fw], link) for fw in np.unique(framework)
                      if fw in PROFILES and fw not in fitted and getattr(PROFILES[fw], link) in fitted}
            out[key_p] = np.array([source.get(fw, fw) for fw in framework], dtype=object)
        return out

    sibling_owner = owners(FRAMEWORK_SIBLING_KEYS, "calibration_from")
    # likewise a stack on another's ZeRO-3 engine (FrameworkProfile.zero3_engine: Megatron-DeepSpeed and
    # GPT-NeoX on DeepSpeed's) runs at, and informs, that engine's fitted ZeRO-3 values
    engine_owner = owners(ZERO3_ENGINE_KEYS, "zero3_engine")

    # a stack the written profile will hold no kernel efficiency for (too few runs here, none in the base,
    # none from the stack it is built on), and the generic profile's own rows where this fit leaves it
    # unfitted, run at the generic value the fit derives below (the median of the calibrated stacks;
    # Calibration.typical_kernel_efficiency), as they will be predicted, not at the value they started at
    ke_index = {key: i for i, (kind, key, p) in enumerate(names) if kind == "framework" and p == "kernel_efficiency"}
    derive_generic = bool(ke_index) and "generic" not in ke_index
    base_ke = [float(v["kernel_efficiency"]) for k, v in base.frameworks.items()
               if k != "generic" and k not in ke_index and "kernel_efficiency" in v]

    # which stacks those are, read off the profile this fit writes (its fitted values stand in as 1.0)
    # by the rule that will predict them; the generic rows whatever the base holds for it, which the written
    # profile replaces with the median
    written = Calibration(frameworks={**base.frameworks, "generic": {"kernel_efficiency": 1.0}, **{
        key: {**base.frameworks.get(key, {}), "kernel_efficiency": 1.0} for key in ke_index}})
    typical_fws = {fw for fw in np.unique(framework).tolist()
                   if derive_generic and (fw == "generic" or written.typical_kernel_efficiency(fw))}
    typical_rows = np.isin(framework, list(typical_fws))

    def apply(x):
        arrs = dict(inputs)
        if typical_rows.any():
            typical = np.median([x[i] for key, i in ke_index.items()] + base_ke)
            arrs["kernel_efficiency"] = np.where(typical_rows, typical, inputs["kernel_efficiency"])
        cong = np.where(np.isfinite(inputs["congestion_nodes"]) & network_fixed, inputs["congestion_nodes"], np.inf)
        for (kind, key, p), v in zip(names, x):
            if kind == "global" and p == "congestion_nodes":
                cong = np.where(np.isinf(cong), v, cong)
            elif kind == "global" and p == "fp8_matmul_efficiency_ratio":
                arrs[p] = np.where(fp8_measured, inputs[p], v)
            elif kind == "global" and p == "attn_efficiency_max":
                arrs[p] = np.where(attn_measured, inputs[p], v)
            elif kind == "global":
                arrs[p] = np.full(len(df), v)
            elif kind == "framework":
                owner = (sibling_owner[p] if p in FRAMEWORK_SIBLING_KEYS
                         else engine_owner[p] if p in ZERO3_ENGINE_KEYS else framework)
                arrs[p] = np.where(owner == key, v, arrs[p])
        for (kind, key, p), v in zip(names, x):
            if kind == "network" and p == "congestion_nodes":
                cong = np.where(network == key, v, cong)
            elif kind == "network":
                arrs[p] = np.where(network == key, v, arrs[p])
        arrs["congestion_nodes"] = cong
        return arrs

    def residual(x):
        pred = step_costs(apply(x))["tokens_per_s_per_gpu"]
        r = np.where(ok, _robust(np.log(np.maximum(pred, 1e-9) / truth)) * weight, 0.0)
        if pairs is None:
            return r
        pair_pred = pair_flops / step_costs(apply_pairs(x))["iteration_time_s"]
        return np.concatenate([r, _robust(np.log(pair_pred / pair_meas)) * pair_weight])

    res = _least_squares_from_starts(residual, names, x0, lo, hi)
    params: dict[str, float] = {}
    constants = dict(base.constants)
    frameworks = {k: dict(v) for k, v in base.frameworks.items()}
    networks = {k: dict(v) for k, v in base.networks.items()}
    for (kind, key, p), v in zip(names, res.x):
        v = float(v)
        if kind == "global":
            constants[p] = v
            params[p] = v
        elif kind == "framework":
            frameworks.setdefault(key, {})[p] = v
            params[f"{key}.{p}"] = v
        else:
            networks.setdefault(key, {})[p] = v
            params[f"network.{key}.{p}"] = v
    # a refitted shared cross-node TP efficiency replaces the base profile's per-fabric ones (the fit
    # applied the shared value to every fabric without a value of its own from this fit)
    if ("global", "", "tp_internode_efficiency") in names:
        fitted_nets = {key for kind, key, p in names if kind == "network" and p == "tp_internode_efficiency"}
        for net, over in networks.items():
            if net not in fitted_nets:
                over.pop("tp_internode_efficiency", None)
        networks = {k: v for k, v in networks.items() if v}
    # a stack the model has no profile for (or a blank framework cell) runs with the generic profile: at
    # the typical calibrated fusion quality, the median kernel_efficiency of the stacks the written profile
    # calibrates (this fit's and the base's), not at the uncalibrated 1.0 -- unless this fit saw the generic
    # profile's own rows; a derived value, recorded with the fitted ones
    if any(kind == "framework" and p == "kernel_efficiency" for kind, _, p in names) and \
            ("framework", "generic", "kernel_efficiency") not in names:
        calibrated = [float(v["kernel_efficiency"]) for k, v in frameworks.items()
                      if k != "generic" and "kernel_efficiency" in v]
        frameworks.setdefault("generic", {})["kernel_efficiency"] = float(np.median(calibrated))
        params["generic.kernel_efficiency"] = float(np.median(calibrated))
    cal = Calibration(constants=constants, frameworks=frameworks, gpus=base.gpus, networks=networks,
                      provenance=dict(base.provenance))
    pred = step_costs(apply(res.x))["tokens_per_s_per_gpu"]
    resid = pd.DataFrame({"run_id": df["run_id"].to_numpy(), "source": src, "framework": framework,
                          "log_ratio": np.where(ok, np.log(pred / truth), np.nan)})
    return RunsFit(calibration=cal, params=params, residuals=resid)


def leave_one_source_out(df: pd.DataFrame, base: Calibration | None = None,
                         pairs: pd.DataFrame | None = None) -> pd.DataFrame:
    """Refit without each source and predict it: per-source MAPE of tokens/s/GPU, cross-validated.
    A framework seen only in the held-out source runs at the refit's generic kernel efficiency (the median
    of the calibrated stacks, ``Calibration.typical_kernel_efficiency``) and keeps its other defaults
    (DeepSpeed's are still fitted to the ZeRO-3/ZeRO++ pairs when ``pairs`` is given)."""
    from perfmodel.validate import error_table, predict_runs

    src = run_sources(df)
    rows = []
    for s in sorted(src.unique()):
        train, test = df[src != s], df[src == s]
        cal = fit_runs(train.reset_index(drop=True), base, pairs=pairs).calibration
        table, _ = error_table(test.reset_index(drop=True), predict_runs(test.reset_index(drop=True), cal))
        rows.append({"source": s, "rows": len(test), "loso_mape_pct": float(table["mape_pct"].iloc[0]),
                     "loso_median_ape_pct": float(table["median_ape_pct"].iloc[0])})
    return pd.DataFrame(rows).set_index("source")
