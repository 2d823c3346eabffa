"""Evaluate the space with the batched cost model, rank it, and build the result.

The per-model/cluster/job inputs are built once by ``build_inputs`` for a template
configuration and kept as scalars; only the ``PARALLEL_KEYS`` are arrays, so ``step_costs``
broadcasts one set of scalars over every candidate. Candidates are evaluated in chunks of
``CHUNK`` to bound memory, sorted by ZeRO stage and CP kind so that most chunks hold one kind and
``step_costs`` skips the collectives none of their rows runs; only the few columns needed for ranking
are kept for all of them, and the full time/memory breakdown is recomputed for the rows that are shown.
"""
from __future__ import annotations

import numbers
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Literal, Sequence

import numpy as np
import pandas as pd

from perfmodel.calibration_profile import Calibration, load_calibration
from perfmodel import rules
from perfmodel.errors import InputError
from perfmodel.estimate import build_inputs, check_precision
from perfmodel.search.space import (
    HOST_MEMORY_REASON, HPZ_MEMORY_REASON, PARALLEL_KEYS, RECOMPUTE_NAMES, ZEROPP_KEYS, enumerate_space,
    expand_zeropp, zeropp_names,
)
from perfmodel.specs import ClusterSpec, JobSpec, ModelSpec, ParallelSpec
from perfmodel.step import MEMORY_PARTS, STEP_INPUTS, TIME_PARTS, op_input_keys, step_costs

#: stacks that implement ZeRO++ (DeepSpeed zero_optimization.zero_quantized_weights / ...)
ZEROPP_FRAMEWORKS = rules.ZEROPP_STACKS

Objective = Literal["throughput", "time-to-train", "cost"]
OBJECTIVES = ("throughput", "time-to-train", "cost")

#: candidates per ``step_costs`` call: small enough that its ~40 float64 temporaries stay in
#: cache (8192 was fastest of 4k..256k on a 175B/1024-GPU space: 3x faster than one big call)
CHUNK = 1 << 13

#: columns kept for every evaluated candidate
METRICS = ("iteration_time_s", "tokens_per_s_per_gpu", "mfu", "memory_gib", "fits")

#: output columns, in order (CONTRACT.md ``perfmodel recommend``)
CONTRACT_COLUMNS = (
    "tp", "pp", "dp", "cp", "vpp", "micro_batch", "sp", "zero_stage", "zeropp", "recompute",
    "iteration_time_s", "tokens_per_s_per_gpu", "mfu", "memory_gib",
)


@dataclass
class Evaluated:
    """The evaluated candidates of one GPU count: their configuration and metrics (arrays). A search over
    several GPU counts keeps every candidate only of the count that holds its best; of the others it keeps
    the rows that can still rank (``pruned_to_best``), and ``n_valid`` / ``least_memory_gib`` stay those of
    the whole count."""

    n_gpus: int
    configs: dict[str, np.ndarray]
    metrics: dict[str, np.ndarray]
    template: dict[str, float]
    rejected: dict[str, int] = field(default_factory=dict)
    n_valid: int = -1
    """Structurally valid configurations of the count, all costed (-1: the length of ``configs``)."""
    least_memory_gib: float = float("nan")
    """The least memory any of them needs (NaN: from ``metrics``; also NaN when there is none)."""

    def __post_init__(self):
        if self.n_valid < 0:
            self.n_valid = int(next(iter(self.configs.values())).size) if self.configs else 0
        mem = self.metrics.get("memory_gib")
        if np.isnan(self.least_memory_gib) and mem is not None and mem.size:
            self.least_memory_gib = float(mem.min())

    def pruned_to_best(self, k: int, score: np.ndarray) -> "Evaluated":
        """The same count with only the fitting rows that can still rank, its counts kept: the ``k`` first by
        ``best_first``'s key (``score`` of the fitting rows, in their order; then offload, memory) and the
        fastest by ``df_all_best``'s (tokens/s per GPU, offload, memory), the scaling curve's and Pareto
        front's point (the same row but where two scores round alike)."""
        fit = np.flatnonzero(self.metrics["fits"])
        mem, off = self.metrics["memory_gib"][fit], self.configs["offload_fraction"][fit]
        by_score = np.lexsort((mem, off, score))[:k]
        fastest = np.lexsort((mem, off, -self.metrics["tokens_per_s_per_gpu"][fit]))[:1]
        rows = fit[np.unique(np.concatenate([by_score, fastest]))]
        return Evaluated(self.n_gpus, {key: v[rows] for key, v in self.configs.items()},
                         {key: v[rows] for key, v in self.metrics.items()}, self.template, self.rejected,
                         self.n_valid, self.least_memory_gib)


def commonest(rejected: dict[str, int], k: int) -> str:
    """The ``k`` rules of ``rejected`` (rule -> configurations) that rejected the most: ``rule (n); ...``."""
    return "; ".join(f"{rule} ({n:,})" for rule, n in sorted(rejected.items(), key=lambda kv: -kv[1])[:k])


@dataclass
class SearchResult:
    """What a search found: the ranked feasible candidates plus the counts CONTRACT.md names."""

    candidates: pd.DataFrame          # best first; CONTRACT_COLUMNS + n_gpus, objective columns, breakdowns
    n_evaluated: int                  # distinct configurations whose cost was computed
    n_feasible: int                   # structurally valid and fitting in memory
    search_time_s: float
    objective: str
    rejected: dict[str, int]          # reason -> configurations rejected for it (memory included)
    evaluated: list[Evaluated]
    pareto: pd.DataFrame | None = None  # GPUs vs total tokens/s, when several GPU counts were searched
    source_gpu_index: np.ndarray | None = None  # per candidate row: index into ``evaluated``
    source_row: np.ndarray | None = None        # per candidate row: row within that Evaluated
    model: ModelSpec | None = None              # the job searched (for the reasons a count has no layout)
    job: JobSpec | None = None

    def no_layout_reason(self, ev: "Evaluated") -> str:
        """Why a GPU count has no structurally valid configuration: a factor of it no parallel size can take
        (``rules.unplaceable_factor``), else the rules that rejected the most of its candidates."""
        m, j = self.model, self.job
        factor = None if m is None or j is None else rules.unplaceable_factor(
            ev.n_gpus, m.n_heads, m.n_layers, j.seq_len, j.global_batch, j.framework)
        if factor is not None:
            return rules.unplaceable_text(ev.n_gpus, factor, m.n_heads, m.n_layers, j.seq_len, j.global_batch)
        return commonest(ev.rejected, 3)

    def contract_json(self, top: int) -> dict:
        rows = []
        for rec in self.candidates.head(top).to_dict("records"):
            row = {k: rec[k] for k in CONTRACT_COLUMNS}
            for k in ("tp", "pp", "dp", "cp", "vpp", "micro_batch", "zero_stage"):
                row[k] = int(row[k])
            row["sp"] = bool(row["sp"])
            for k in ("iteration_time_s", "tokens_per_s_per_gpu", "mfu", "memory_gib"):
                row[k] = float(row[k])
            if "n_gpus" in rec:
                row["n_gpus"] = int(rec["n_gpus"])
            # extensions beyond CONTRACT: the long-context dimensions
            if "cp_kind" in rec:
                row["cp_kind"] = str(rec["cp_kind"])
            if "offload_fraction" in rec:
                row["offload_fraction"] = float(rec["offload_fraction"])
            # the value the candidates were ranked by, where the objective is not throughput
            for k in ("time_to_train_s", "cost_usd"):
                if k in rec and rec[k] == rec[k]:
                    row[k] = float(rec[k])
            rows.append(row)
        out = {
            "n_evaluated": int(self.n_evaluated),
            "n_feasible": int(self.n_feasible),
            "search_time_s": float(self.search_time_s),
            "objective": self.objective,
            "top": rows,
        }
        if self.pareto is not None:
            out["pareto"] = self.pareto.to_dict("records")
            out["gpu_counts_without_feasible"] = self.infeasible_gpu_counts()
        return out

    def commonest_rejections(self, k: int = 3) -> str:
        """The ``k`` rules that rejected the most configurations, with their counts: ``rule (n); ...``."""
        return commonest(self.rejected, k)

    def why_none_feasible(self, hbm_capacity_gib: float) -> str:
        """Why no configuration is feasible: none fits in memory (the least any needs, against the GPU's
        capacity; how many fit the GPU but offload more than the host holds), or none is structurally valid
        (the commonest rules). Said by recommend and report alike."""
        mems = [ev.least_memory_gib for ev in self.evaluated if ev.n_valid]
        if not mems:
            return "no structurally valid configuration: " + (
                self.no_layout_reason(self.evaluated[0]) if len(self.evaluated) == 1 else self.commonest_rejections(3))
        least = min(mems)
        why = (f"none of the {self.n_evaluated:,} structurally valid configurations fits in memory (the "
               f"smallest needs {least:.1f} GiB per GPU, the GPU has {hbm_capacity_gib:g})")
        if self.rejected.get(HOST_MEMORY_REASON):  # some fit the GPU but offload more than the host holds
            why += f"; {self.rejected[HOST_MEMORY_REASON]:,} of them {HOST_MEMORY_REASON}"
        return why

    def infeasible_gpu_counts(self) -> list[int]:
        """The GPU counts searched that hold no feasible configuration (none valid, or none fits)."""
        return [int(ev.n_gpus) for ev in self.evaluated if not np.asarray(ev.metrics["fits"]).any()]


def template_inputs(
    model: ModelSpec, cluster: ClusterSpec, job: JobSpec, calibration: Calibration | None
) -> dict[str, float]:
    """The scalar STEP_INPUTS of a template configuration (its parallel keys are overwritten)."""
    par = ParallelSpec(tp=1, pp=1, dp=cluster.n_gpus, cp=1, vpp=1, micro_batch=1, sp=False, zero_stage=0)
    inputs = build_inputs(model, cluster, par, job, calibration)
    return {k: np.float64(inputs[k]) for k in (*STEP_INPUTS, *op_input_keys(inputs))}


def evaluate(
    template: dict[str, float],
    configs: dict[str, np.ndarray],
    keep: Sequence[str] = METRICS,
    progress: Callable[[int], None] | None = None,
) -> dict[str, np.ndarray]:
    """``step_costs`` over the configurations, chunked; returns the ``keep`` columns."""
    n = configs["tp"].size
    out = {k: np.empty(n, dtype=bool if k == "fits" else float) for k in keep}
    # the configurations sorted by ZeRO stage and CP kind: step_costs costs a data-parallel collective, the
    # ZeRO-3 gathers or a CP exchange only in a batch that runs it, so a chunk of one kind skips the others'
    order = kind_order(configs)
    by_kind = {k: configs[k].take(order).astype(float) for k in PARALLEL_KEYS + tuple(k for k in ZEROPP_KEYS
                                                                                      if k in configs)}
    sorted_out = {k: np.empty(n, dtype=out[k].dtype) for k in keep}
    for start in range(0, n, CHUNK):
        stop = min(start + CHUNK, n)
        res = step_costs({**template, **{k: v[start:stop] for k, v in by_kind.items()}})
        for k in keep:
            sorted_out[k][start:stop] = res[k]
        if progress is not None:
            progress(stop - start)
    for k in keep:  # back to the configurations' order
        out[k][order] = sorted_out[k]
    return out


def kind_order(configs: dict[str, np.ndarray]) -> np.ndarray:
    """The configurations' indices sorted (stably) by ZeRO stage, then CP kind."""
    kind = (configs["zero_stage"] * 2 + configs["cp_ulysses"]).astype(np.int8)  # small ints: a radix sort
    return np.argsort(kind, kind="stable")


class _Progress:
    """A stderr progress line, shown once the search (its enumeration included, from ``t0``) has run for more
    than a second: rewritten in place a few times a second on a terminal, a line every few seconds into a
    file or pipe (a log is not flooded)."""

    def __init__(self, n_counts: int, enabled: bool, t0: float):
        self.n_counts, self.count, self.n_gpus, self.done, self.enabled = n_counts, 0, 0, 0, enabled
        self.size = 0  # configurations of the GPU count being costed
        self.t0 = self.last = t0
        self.tty = enabled and sys.stderr.isatty()
        self.every_s = 0.25 if self.tty else 5.0
        self.shown = False

    def start_count(self, index: int, n_gpus: int, size: int) -> None:
        self.count, self.n_gpus, self.size = index + 1, n_gpus, size
        self(0)

    def __call__(self, k: int) -> None:
        self.done += k
        now = time.perf_counter()
        if not self.enabled or now - self.t0 <= 1.0 or (self.shown and now - self.last < self.every_s):
            return
        self.shown, self.last = True, now
        where = (f"GPU count {self.count:,} of {self.n_counts:,} ({self.n_gpus:,} GPUs)" if self.n_counts > 1
                 else f"of {self.size:,}")
        line = f"searching: {self.done:,} configurations costed, {where}"
        sys.stderr.write(f"\r{line}" if self.tty else f"{line}\n")
        sys.stderr.flush()

    def close(self) -> None:
        if self.shown and self.tty:
            sys.stderr.write("\n")


def _score(df_like: dict[str, np.ndarray], n_gpus: np.ndarray, job: JobSpec, objective: str,
           train_tokens: float | None, usd_per_gpu_hour: float | None) -> dict[str, np.ndarray]:
    """Objective columns; ``score`` is what is minimised."""
    tps_gpu = df_like["tokens_per_s_per_gpu"]
    total = tps_gpu * n_gpus
    out = {"tokens_per_s": total}
    tokens = train_tokens if train_tokens is not None else np.nan
    out["time_to_train_s"] = tokens / total
    price = usd_per_gpu_hour if usd_per_gpu_hour is not None else np.nan
    out["cost_usd"] = out["time_to_train_s"] * n_gpus / 3600.0 * price
    if objective == "throughput":
        out["score"] = -tps_gpu
    elif objective == "time-to-train":
        out["score"] = 1.0 / total
    else:
        out["score"] = 1.0 / tps_gpu  # $ = tokens / (tok/s/GPU) x $/GPU-s: fewest GPU-seconds per token
    return out


#: a quintillion tokens (about 10^5 times Llama 3's 15T) and a million dollars per GPU-hour: beyond any job,
#: small enough that time and cost stay finite in float64
MAX_TRAIN_TOKENS = 1e18
MAX_USD_PER_GPU_HOUR = 1e6


def _check_objective(objective: str, train_tokens, usd_per_gpu_hour) -> None:
    if objective not in OBJECTIVES:
        raise InputError("objective", f"must be one of {', '.join(OBJECTIVES)} (got {objective!r})")
    for name, value in (("train_tokens", train_tokens), ("usd_per_gpu_hour", usd_per_gpu_hour)):
        # a number: '1e12' is text (the CLI reads it, the API takes a float), True is not 1 token
        if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Real)):
            raise InputError(name, f"must be a number (got {value!r:.40})")
    if train_tokens is not None and not 0 < train_tokens <= MAX_TRAIN_TOKENS:
        raise InputError("train_tokens", f"must be a positive number of at most {MAX_TRAIN_TOKENS:g} (got {train_tokens})")
    if usd_per_gpu_hour is not None and not 0 < usd_per_gpu_hour <= MAX_USD_PER_GPU_HOUR:
        raise InputError("usd_per_gpu_hour", f"must be a positive number of at most {MAX_USD_PER_GPU_HOUR:g} "
                         f"(got {usd_per_gpu_hour})")
    if objective == "time-to-train" and train_tokens is None:
        raise InputError("train_tokens", "is required with objective time-to-train")
    if objective == "cost" and (train_tokens is None or usd_per_gpu_hour is None):
        raise InputError("usd_per_gpu_hour", "objective cost needs --train-tokens and --usd-per-gpu-hour")
    if usd_per_gpu_hour is not None and train_tokens is None:  # a price alone prices nothing: not ignored silently
        raise InputError("usd_per_gpu_hour", "needs --train-tokens: the cost is the time to train that many tokens "
                         "x the GPUs x the price")


def _keep_best_whole(evaluated: list[Evaluated], best_at: tuple[int, tuple] | None, k: int, job: JobSpec,
                     objective: str, train_tokens, usd_per_gpu_hour) -> tuple[int, tuple] | None:
    """After ``evaluated[-1]`` was added: the count holding the best row so far (``best_first``'s key: score, offload,
    memory, GPUs) stays whole (``explain`` reads its other configurations), every other count is pruned to
    its ``k`` best rows. Returns the new (index, key)."""
    def scores(e: Evaluated) -> np.ndarray:  # of its fitting rows, in their order
        fit = np.flatnonzero(e.metrics["fits"])
        m = {name: e.metrics[name][fit] for name in METRICS}
        return _score(m, np.full(fit.size, float(e.n_gpus)), job, objective, train_tokens, usd_per_gpu_hour)["score"]

    i, ev = len(evaluated) - 1, evaluated[-1]
    score, fit = scores(ev), np.flatnonzero(ev.metrics["fits"])
    key = None
    if np.isfinite(score).any():  # (a row whose score is NaN ranks last in best_first: no key of its own)
        off, mem = ev.configs["offload_fraction"][fit], ev.metrics["memory_gib"][fit]
        j = int(np.lexsort((mem, off, score))[0])
        key = (float(score[j]), float(off[j]), float(mem[j]), ev.n_gpus)
    if key is not None and (best_at is None or key < best_at[1]):
        if best_at is not None:
            old = evaluated[best_at[0]]
            evaluated[best_at[0]] = old.pruned_to_best(k, scores(old))
        return i, key
    evaluated[i] = ev.pruned_to_best(k, score)
    return best_at


def breakdown_frame(ev: Evaluated, rows: np.ndarray) -> pd.DataFrame:
    """Full time and memory breakdown for a few rows of one evaluated GPU count."""
    sub = {k: ev.configs[k][rows] for k in PARALLEL_KEYS + tuple(k for k in ZEROPP_KEYS if k in ev.configs)}
    res = evaluate(ev.template, sub, keep=METRICS + TIME_PARTS + MEMORY_PARTS)
    return pd.DataFrame({k: res[k] for k in TIME_PARTS + MEMORY_PARTS})


def run_search(
    model: ModelSpec,
    cluster: ClusterSpec,
    job: JobSpec,
    calibration: Calibration | None = None,
    *,
    gpu_counts: Sequence[int] | None = None,
    objective: Objective = "throughput",
    train_tokens: float | None = None,
    usd_per_gpu_hour: float | None = None,
    top: int | None = None,
    progress: bool = False,
    zeropp: bool | None = None,
) -> SearchResult:
    """Enumerate, evaluate and rank every configuration of the job on ``cluster`` (or on each
    of ``gpu_counts`` GPUs of the same kind). ``top`` limits the rows of the DataFrame (with
    breakdowns, every row); None keeps every feasible candidate (without breakdowns beyond the top 50).
    ``zeropp``: also search ZeRO++ (qwZ/hpZ/qgZ on/off) for every ZeRO-3 configuration; None (the
    default) does so where the framework implements ZeRO++ (DeepSpeed)."""
    _check_objective(objective, train_tokens, usd_per_gpu_hour)
    if zeropp is not None and not isinstance(zeropp, bool):  # 'no' or 0 is a typo, not a switch ('no' is truthy)
        raise InputError("zeropp", f"must be True, False or None (None: where the stack has ZeRO++; "
                         f"got {zeropp!r:.40})")
    job = job.for_gpu(cluster.gpu)  # a precision left out: the GPU's default
    check_precision(cluster.gpu, job.precision)
    if zeropp is None:
        zeropp = (job.framework or "").lower() in ZEROPP_FRAMEWORKS
    cal = calibration if calibration is not None else load_calibration(None)
    t0 = time.perf_counter()
    counts = sorted(set(int(g) for g in gpu_counts)) if gpu_counts else [cluster.n_gpus]
    clusters = [cluster] if not gpu_counts else [_cluster_with(cluster, g) for g in counts]
    bar = _Progress(len(clusters), progress, t0)
    evaluated: list[Evaluated] = []
    rejected: dict[str, int] = {}
    # several GPU counts: one at a time, and of each count that does not hold the best row so far only the
    # rows that can still rank (the top ``top`` and the count's fastest, for the Pareto front and the scaling
    # curve): memory grows with the counts, not with every configuration of every count
    prune = top is not None and len(clusters) > 1
    best_at: tuple[int, tuple] | None = None  # (index into evaluated, ranking key) of the best row so far
    n_fit = 0  # feasible configurations, every count (pruning keeps fewer rows)
    for c in clusters:
        space = enumerate_space(model, c, job)
        if zeropp:
            space = expand_zeropp(space, c, job.framework)
        bar.start_count(len(evaluated), c.n_gpus, space.size)
        template = template_inputs(model, c, job, cal)
        keep = METRICS + (("hpz_secondary_gib",) if zeropp else ())
        metrics = evaluate(template, space.configs, keep=keep, progress=bar) if space.size else {
            k: np.empty(0, dtype=bool if k == "fits" else float) for k in keep}
        evaluated.append(Evaluated(c.n_gpus, space.configs, metrics, template, space.rejected))
        for k, v in space.rejected.items():
            rejected[k] = rejected.get(k, 0) + v
        # the GPU memory the step's ``fits`` held each configuration to
        cap_gib = template["hbm_capacity_bytes"] / 2**30
        if zeropp and space.size:
            # infeasibility with its reason: fits without the hpZ secondary copy, not with it
            hpz_only = ~metrics["fits"] & (metrics["memory_gib"] - metrics["hpz_secondary_gib"] <= cap_gib) & (
                space.configs["hpz"] > 0) & (metrics["memory_gib"] > cap_gib)
            if hpz_only.any():
                rejected[HPZ_MEMORY_REASON] = rejected.get(HPZ_MEMORY_REASON, 0) + int(hpz_only.sum())
                ev_unfit_hpz = int(hpz_only.sum())
            else:
                ev_unfit_hpz = 0
        else:
            ev_unfit_hpz = 0
        # offloaded activations over the host's per-GPU limit, in a configuration whose GPU memory fits
        host_only = ~metrics["fits"] & (metrics["memory_gib"] <= cap_gib)
        n_host = int(host_only.sum()) if space.size else 0
        if n_host:
            rejected[HOST_MEMORY_REASON] = rejected.get(HOST_MEMORY_REASON, 0) + n_host
        n_unfit = int((~metrics["fits"]).sum()) - ev_unfit_hpz - n_host
        if n_unfit:
            rejected["does not fit in GPU memory"] = rejected.get("does not fit in GPU memory", 0) + n_unfit
        n_fit += int(metrics["fits"].sum())
        if prune:
            best_at = _keep_best_whole(evaluated, best_at, max(top, 1), job, objective, train_tokens,
                                       usd_per_gpu_hour)
    bar.close()

    # ---- rank the feasible candidates of every GPU count together --------------------------
    parts = []
    for i, ev in enumerate(evaluated):
        rows = np.flatnonzero(ev.metrics["fits"])
        parts.append((i, rows))
    n_evaluated = sum(ev.n_valid for ev in evaluated)
    n_feasible = n_fit
    which = np.concatenate([np.full(r.size, i) for i, r in parts]) if parts else np.empty(0, int)
    rows = np.concatenate([r for _, r in parts]) if parts else np.empty(0, int)
    gcount = np.array([evaluated[i].n_gpus for i in range(len(evaluated))])[which] if which.size else np.empty(0)

    def col(k):
        return np.concatenate([evaluated[i].metrics[k][r] for i, r in parts]) if parts else np.empty(0)

    m = {k: col(k) for k in METRICS}
    scores = _score(m, gcount.astype(float), job, objective, train_tokens, usd_per_gpu_hour)
    offload = (np.concatenate([evaluated[i].configs["offload_fraction"][r] for i, r in parts]) if parts
               else np.empty(0))
    keep = best_first(scores["score"], m["memory_gib"], gcount, top, offload)

    def cfg(k):
        return np.concatenate([evaluated[i].configs[k][r] for i, r in parts])[keep] if parts else np.empty(0)

    df = pd.DataFrame({
        "n_gpus": gcount[keep].astype(int),
        "tp": cfg("tp"), "pp": cfg("pp"), "dp": cfg("dp"), "cp": cfg("cp"), "vpp": cfg("vpp"),
        "micro_batch": cfg("micro_batch"), "sp": cfg("sp").astype(bool), "zero_stage": cfg("zero_stage"),
        "zeropp": (np.concatenate([zeropp_names(evaluated[i].configs)[r] for i, r in parts])[keep]
                   if (zeropp and parts) else ""),
        "recompute": [RECOMPUTE_NAMES[int(r)] for r in cfg("recompute")],
        **{k: m[k][keep] for k in ("iteration_time_s", "tokens_per_s_per_gpu", "mfu", "memory_gib")},
        "cp_kind": np.where(cfg("cp_ulysses") > 0, "ulysses", "ring") if parts else np.empty(0, dtype=object),
        "offload_fraction": cfg("offload_fraction").astype(float),
        **{k: scores[k][keep] for k in ("tokens_per_s", "time_to_train_s", "cost_usd")},
    })
    # the rows asked for all get their breakdowns; the whole feasible set (top None) its first 50
    df = _attach_breakdowns(df, evaluated, which[keep], rows[keep], n=len(df) if top is not None else min(len(df), 50))

    pareto = pareto_front(df_all_best(evaluated)) if len(counts) > 1 else None
    elapsed = time.perf_counter() - t0
    df.attrs.update(n_evaluated=n_evaluated, n_feasible=n_feasible, search_time_s=elapsed)
    return SearchResult(df, n_evaluated, n_feasible, elapsed, objective, rejected, evaluated, pareto,
                        which[keep], rows[keep], model, job)


def best_first(score: np.ndarray, memory_gib: np.ndarray, n_gpus: np.ndarray, top: int | None,
               offload: np.ndarray | None = None) -> np.ndarray:
    """Indices by best (least) score first; ties: less activation offloading (an offload the step hides
    gains nothing and costs host memory and PCIe traffic), then less memory, then fewer GPUs. With ``top``,
    only the first ``top``: the lexicographic sort runs on the candidates scoring at most the top-th best
    score (ties included), found by a linear-time partition."""
    offload = np.zeros_like(score) if offload is None else offload
    if top is not None and 0 < top < score.size:
        cut = np.partition(score, top - 1)[top - 1]
        near = np.flatnonzero(score <= cut)
        if near.size >= top:  # (fewer only where scores are NaN: the full sort below)
            return near[np.lexsort((n_gpus[near], memory_gib[near], offload[near], score[near]))][:top]
    order = np.lexsort((n_gpus, memory_gib, offload, score))
    return order if top is None else order[:top]


def _cluster_with(cluster: ClusterSpec, n_gpus: int) -> ClusterSpec:
    """The same kind of cluster with another GPU count."""
    from pydantic import ValidationError

    from perfmodel.errors import from_validation_error

    if n_gpus <= 0:
        raise InputError("gpus_range", f"must hold positive integers (got {n_gpus})")
    try:
        return cluster.resized(n_gpus)
    except ValidationError as exc:
        raise from_validation_error(exc, prefix="gpus_range") from None


def _attach_breakdowns(df: pd.DataFrame, evaluated: list[Evaluated], which: np.ndarray, rows: np.ndarray,
                       n: int) -> pd.DataFrame:
    """Time/memory breakdown columns for the first ``n`` rows (NaN below)."""
    cols = {k: np.full(len(df), np.nan) for k in TIME_PARTS + MEMORY_PARTS}
    for i, ev in enumerate(evaluated):
        sel = np.flatnonzero(which[:n] == i)
        if sel.size:
            b = breakdown_frame(ev, rows[sel])
            for k in cols:
                cols[k][sel] = b[k].to_numpy()
    return df.assign(**cols)


def df_all_best(evaluated: list[Evaluated]) -> pd.DataFrame:
    """The fastest feasible configuration of each GPU count (total tokens/s)."""
    recs = []
    for ev in evaluated:
        fits = ev.metrics["fits"]
        if not fits.any():
            continue
        t = np.where(fits, ev.metrics["tokens_per_s_per_gpu"], -np.inf)
        # the fastest, ties broken as ``best_first`` breaks them for recommend: less offloading, less memory
        fit_rows = np.flatnonzero(fits)
        i = int(fit_rows[np.lexsort((ev.metrics["memory_gib"][fit_rows], ev.configs["offload_fraction"][fit_rows],
                                     -t[fit_rows]))[0]])
        recs.append({
            "n_gpus": ev.n_gpus,
            **{k: int(ev.configs[k][i]) for k in ("tp", "pp", "dp", "cp", "vpp", "micro_batch", "zero_stage")},
            "sp": bool(ev.configs["sp"][i]), "recompute": RECOMPUTE_NAMES[int(ev.configs["recompute"][i])],
            "cp_kind": "ulysses" if int(ev.configs["cp_ulysses"][i]) else "ring",
            "offload_fraction": float(ev.configs["offload_fraction"][i]),
            "zeropp": str(zeropp_names({k: v[i:i + 1] for k, v in ev.configs.items()})[0]),
            "tokens_per_s_per_gpu": float(t[i]), "tokens_per_s": float(t[i] * ev.n_gpus),
            "mfu": float(ev.metrics["mfu"][i]),
        })
    return pd.DataFrame(recs, columns=BEST_COLUMNS)


#: df_all_best's columns (also when no GPU count has a feasible configuration)
BEST_COLUMNS = ("n_gpus", "tp", "pp", "dp", "cp", "vpp", "micro_batch", "zero_stage", "sp", "recompute",
                "cp_kind", "offload_fraction", "zeropp", "tokens_per_s_per_gpu", "tokens_per_s", "mfu")


def pareto_front(best: pd.DataFrame) -> pd.DataFrame:
    """Points not dominated in (fewer GPUs, more total tokens/s), ascending in GPUs."""
    if best.empty:
        return best
    best = best.sort_values("n_gpus").reset_index(drop=True)
    run_max = np.maximum.accumulate(best["tokens_per_s"].to_numpy())
    prev = np.concatenate([[-np.inf], run_max[:-1]])
    return best[best["tokens_per_s"].to_numpy() > prev].reset_index(drop=True)


def search(
    model: ModelSpec | str,
    cluster: ClusterSpec,
    job: JobSpec,
    calibration: Calibration | None = None,
    *,
    gpu_counts: Sequence[int] | None = None,
    objective: Objective = "throughput",
    train_tokens: float | None = None,
    usd_per_gpu_hour: float | None = None,
    top: int | None = None,
    progress: bool = False,
    zeropp: bool | None = None,
) -> pd.DataFrame:
    """Search the parallel configurations of ``job`` on ``cluster``; a DataFrame, best first.

    Columns: n_gpus, tp, pp, dp, cp, vpp, micro_batch, sp, zero_stage, zeropp, recompute,
    iteration_time_s, tokens_per_s_per_gpu, mfu, memory_gib, cp_kind, offload_fraction, tokens_per_s,
    time_to_train_s, cost_usd, and the time/memory breakdown parts (for the first 50 rows). ``df.attrs`` holds
    n_evaluated, n_feasible, search_time_s, objective, gpu_counts_without_feasible, notes
    (``perfmodel.notes.job_notes``: a stack or fabric without a profile, a borrowed kernel efficiency) and, for
    an empty frame, why_empty (nothing fits in memory, with the least any configuration needs, or no
    structurally valid layout, with the reason), as ``recommend`` says it.
    """
    from perfmodel.errors import InputError
    from perfmodel.notes import job_notes

    if top is not None and (isinstance(top, bool) or not isinstance(top, int) or top < 1):
        raise InputError("top", f"must be a positive integer (got {top!r})")
    if not isinstance(progress, (bool, np.bool_)):
        raise InputError("progress", f"must be true or false (got {progress!r:.40})")
    if zeropp is not None and not isinstance(zeropp, (bool, np.bool_)):
        raise InputError("zeropp", f"must be true, false or None (got {zeropp!r:.40})")
    from perfmodel.api_inputs import api_inputs, checked_gpu_counts

    model, cluster, job, _, calibration = api_inputs(model, cluster, job, None, calibration)
    gpu_counts = checked_gpu_counts(gpu_counts)
    res = run_search(model, cluster, job, calibration, gpu_counts=gpu_counts, objective=objective,
                     train_tokens=train_tokens, usd_per_gpu_hour=usd_per_gpu_hour, top=top, progress=progress,
                     zeropp=zeropp)
    df = res.candidates
    cal = calibration if calibration is not None else load_calibration(None)
    df.attrs["notes"] = job_notes(job, cluster, cal, model)
    df.attrs["objective"] = objective
    df.attrs["gpu_counts_without_feasible"] = res.infeasible_gpu_counts()
    if df.empty:  # why, as recommend says it: nothing fits (the least any needs), or no valid layout
        df.attrs["why_empty"] = res.why_none_feasible(cluster.gpu.hbm_capacity_gib)
    if res.pareto is not None:
        df.attrs["pareto"] = res.pareto.to_dict("records")
    return df
