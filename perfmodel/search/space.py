"""The configuration space as numpy arrays, with the structural rules as masks.

Enumeration is two broadcasts, never a Python loop per candidate:

1. the *layout* grid ``tp x pp x cp`` over the divisors of the GPU count (dp = gpus / (tp pp cp)),
   checked against the model's shape, the sequence and the batch;
2. every valid layout times ``vpp x micro_batch x sp x zero_stage x recompute``, checked against
   the schedule and framework rules.

Every rejected configuration gets a reason code (``REASONS``); a layout rejected in step 1
stands for all of its step-2 expansions, so the counts in ``Space.rejected`` are counts of
configurations. ZeRO++ (qwz/hpz/qgz) is an opt-in dimension (``expand_zeropp``, ``run_search(zeropp=True)``):
by default the ``zeropp`` field of every candidate is the empty string.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from perfmodel.costs.memory import RECOMPUTE_BALANCED, RECOMPUTE_FULL, RECOMPUTE_SELECTIVE
from perfmodel.specs import ClusterSpec, JobSpec, ModelSpec

#: the parallel keys of ``STEP_INPUTS`` that the search varies (all else comes from the template)
PARALLEL_KEYS = ("tp", "pp", "dp", "cp", "vpp", "micro_batch", "sp", "zero_stage", "recompute",
                 "cp_ulysses", "offload_fraction")

RECOMPUTE_NAMES = {0: "none", RECOMPUTE_SELECTIVE: "selective", RECOMPUTE_FULL: "full",
                   RECOMPUTE_BALANCED: "balanced"}
N_RECOMPUTE = len(RECOMPUTE_NAMES)

#: activation-offload shares tried (Yuan et al. ATC'24 search alpha continuously; a 5-point grid
#: is within a few percent of it), only where offloading exists: pp >= 3 (Megatron-Kwai)
OFFLOAD_FRACTIONS = np.array([0.0, 0.25, 0.5, 0.75, 1.0])

#: largest micro-batch the search tries (sequences); larger ones only add activation memory
MAX_MICRO_BATCH = 16

#: frameworks whose ZeRO-2/3 (or FSDP) does not compose with pipeline parallelism:
#: DeepSpeed's PipelineEngine asserts "ZeRO-2 and ZeRO-3 are incompatible with pipeline
#: parallelism" (deepspeed/runtime/pipe/engine.py); Megatron-LM's --use-torch-fsdp2 asserts
#: pipeline_model_parallel_size == 1 (megatron/training/arguments.py, validate_args)
ZERO23_NO_PP = {
    "megatron-lm", "megatron-deepspeed", "nemo", "megatron-bridge", "megascale", "megatron-kwai",
    "gpt-neox", "deepspeed",
}

#: stacks that implement Kuaishou's balanced recompute and activation offloading (Megatron-Kwai
#: --kaimm-recompute-norm/--kaimm-recompute-mlp-activation-func, --kaimm-offload-activation-ratio)
KWAI_FEATURES = {"megatron-kwai"}
#: stacks with all-to-all (Ulysses) context parallelism: Megatron-Core --cp-comm-type a2a,
#: DeepSpeed-Ulysses sequence parallelism
ULYSSES_FRAMEWORKS = {"megatron-lm", "nemo", "megatron-bridge", "megatron-kwai", "megascale", "deepspeed",
                      "megatron-deepspeed"}

# ---- reason codes (0 = structurally valid) ---------------------------------------------------
OK = 0
REASONS: dict[int, str] = {
    1: "tp*pp*cp must divide gpus",
    2: "tp must divide n_heads",
    3: "tp must divide n_kv_heads or be a multiple of it",
    4: "tp must fit in two NVLink domains",
    5: "pp must divide n_layers (or n_layers + 2)",
    6: "seq_len must be a multiple of 2*cp when cp > 1 (Megatron load-balanced CP)",
    7: "dp must divide global_batch",
    8: "vpp > 1 needs pp > 1",
    9: "vpp must divide the layers per pipeline stage",
    10: "interleaved schedule needs micro-batches >= pp",
    11: "global_batch must be a multiple of micro_batch*dp",
    12: "sp needs tp > 1",
    13: "ZeRO-2/3 does not compose with pipeline parallelism in this framework",
    14: "ZeRO sharding needs dp > 1 (identical to zero_stage 0)",
    15: "ulysses needs cp > 1, cp dividing the heads per TP rank, and a framework that has it",
    16: "activation offloading needs pp >= 3, no full recompute, and Megatron-Kwai",
    17: "balanced recompute needs Megatron-Kwai",
}


def divisors(n: int, limit: int | None = None) -> np.ndarray:
    """Positive divisors of n (at most ``limit``), ascending; O(sqrt n) memory and time."""
    n = int(n)
    small = np.arange(1, math.isqrt(n) + 1, dtype=np.int64)
    small = small[n % small == 0]
    d = np.unique(np.concatenate([small, n // small]))
    return d if limit is None else d[d <= limit]


@dataclass(frozen=True)
class Space:
    """Structurally valid configurations (int arrays of one length) and what was rejected."""

    n_gpus: int
    configs: dict[str, np.ndarray]
    rejected: dict[str, int] = field(default_factory=dict)

    @property
    def size(self) -> int:
        return int(self.configs["tp"].size)

    @property
    def n_enumerated(self) -> int:
        return self.size + sum(self.rejected.values())


def _first_failure(rules: list[tuple[int, np.ndarray]], shape) -> np.ndarray:
    """Reason code of the first rule that fails (0 when all hold); later rules never overwrite."""
    reason = np.zeros(shape, dtype=np.int8)
    for code, bad in reversed(rules):
        reason = np.where(bad, np.int8(code), reason)
    return reason


def layout_grid(model: ModelSpec, cluster: ClusterSpec, job: JobSpec) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Step 1: every (tp, pp, cp) over the divisors of the GPU count, with a reason code each."""
    n = cluster.n_gpus
    d = divisors(n).astype(np.int32)
    tp, pp, cp = (a.ravel() for a in np.meshgrid(d, d, d, indexing="ij"))
    mp = tp.astype(np.int64) * pp * cp  # up to gpus**3: int64
    dp = np.where(n % mp == 0, n // mp, 0).astype(np.int32)
    L, a, kv = model.n_layers, model.n_heads, model.n_kv_heads
    s, B = job.seq_len, job.global_batch
    rules = [
        (1, n % mp != 0),
        (2, a % tp != 0),
        (3, (kv % tp != 0) & (tp % kv != 0)),
        (4, tp > 2 * cluster.nvlink_domain_gpus),
        (5, (L % pp != 0) & ((L + 2) % pp != 0)),
        (6, (cp > 1) & (s % (2 * cp) != 0)),
        (7, (dp > 0) & (B % np.maximum(dp, 1) != 0)),
    ]
    reason = _first_failure(rules, tp.shape)
    return {"tp": tp, "pp": pp, "cp": cp, "dp": dp}, reason


def _expand(base: dict[str, np.ndarray], axes: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Outer product: every row of ``base`` with every combination of ``axes``."""
    grid = [a.ravel() for a in np.meshgrid(*axes.values(), indexing="ij")]
    n_base, n_inner = base["tp"].size, grid[0].size
    out = {k: np.repeat(v, n_inner) for k, v in base.items()}
    out.update({k: np.tile(g, n_base) for k, g in zip(axes, grid)})
    return out


def _count(rejected: dict[str, int], reason: np.ndarray, weight: int) -> None:
    codes, counts = np.unique(reason[reason != OK], return_counts=True)
    for c, k in zip(codes, counts):
        rejected[REASONS[int(c)]] = rejected.get(REASONS[int(c)], 0) + int(k) * weight


def _keep(x: dict[str, np.ndarray], ok: np.ndarray) -> dict[str, np.ndarray]:
    return {k: v[ok] for k, v in x.items()}


def enumerate_space(model: ModelSpec, cluster: ClusterSpec, job: JobSpec) -> Space:
    """All structurally valid configurations of ``PARALLEL_KEYS`` for this job, as int arrays.

    Three broadcasts, each filtered before the next so the grid never holds more than the
    valid prefix times one block of axes: layouts; x (vpp, micro_batch); x sp; x zero; x recompute.
    A rejection at an earlier step counts for every configuration it stands for.
    """
    L, B = model.n_layers, job.global_batch
    vpp_vals = np.unique(np.concatenate([divisors(L), divisors(L + 2)])).astype(np.int32)
    mb_vals = divisors(B, MAX_MICRO_BATCH).astype(np.int32)
    n_late = 2 * 4 * N_RECOMPUTE * 2 * OFFLOAD_FRACTIONS.size  # sp x zero x recompute x cp kind x offload

    rejected: dict[str, int] = {}
    layouts, reason1 = layout_grid(model, cluster, job)
    _count(rejected, reason1, vpp_vals.size * mb_vals.size * n_late)
    x = _keep(layouts, reason1 == OK)

    # ---- step 2: schedule (vpp, micro-batch) ---------------------------------------------------
    x = _expand(x, {"vpp": vpp_vals, "micro_batch": mb_vals})
    tp, pp, dp, vpp, mb = x["tp"], x["pp"], x["dp"], x["vpp"], x["micro_batch"]
    # layers per stage: Megatron splits L over pp, or L + 2 with embedding and loss counted as
    # layers (account_for_embedding/loss_in_pipeline_split) -- the same rule as check_config
    per_stage = -(-L // pp)
    per_stage_acc = (L + 2) // pp
    rules = [
        (8, (vpp > 1) & (pp == 1)),
        (9, (per_stage % vpp != 0) & (per_stage_acc % vpp != 0)),
        (11, B % (mb * dp) != 0),
        (10, (vpp > 1) & (B // (mb * dp) < pp)),
    ]
    reason2 = _first_failure(rules, tp.shape)
    _count(rejected, reason2, n_late)
    x = _keep(x, reason2 == OK)

    # ---- step 3: sequence parallelism, ZeRO stage, recompute (each filtered before the next) ---
    x = _expand(x, {"sp": np.array([0, 1], dtype=np.int32)})
    reason3 = _first_failure([(12, (x["sp"] == 1) & (x["tp"] == 1))], x["tp"].shape)
    _count(rejected, reason3, 4 * N_RECOMPUTE * 2 * OFFLOAD_FRACTIONS.size)
    x = _keep(x, reason3 == OK)

    x = _expand(x, {"zero_stage": np.arange(4, dtype=np.int32)})
    framework = (job.framework or "").lower()
    zero, pp, dp = x["zero_stage"], x["pp"], x["dp"]
    rules = [
        (13, (zero >= 2) & (pp > 1) & (framework in ZERO23_NO_PP)),
        (14, (zero > 0) & (dp == 1)),
    ]
    reason4 = _first_failure(rules, zero.shape)
    _count(rejected, reason4, N_RECOMPUTE * 2 * OFFLOAD_FRACTIONS.size)
    x = _keep(x, reason4 == OK)

    # ---- step 4: recompute, CP variant, activation offloading (Yuan et al. ATC'24) -------------
    x = _expand(x, {"recompute": np.arange(N_RECOMPUTE, dtype=np.int32), "cp_ulysses": np.array([0, 1], dtype=np.int32)})
    heads_per_tp = model.n_heads // x["tp"]
    kwai = framework in KWAI_FEATURES
    reason5 = _first_failure([
        (15, (x["cp_ulysses"] == 1) & ((x["cp"] == 1) | (heads_per_tp % x["cp"] != 0) | (framework not in ULYSSES_FRAMEWORKS))),
        (17, (x["recompute"] == RECOMPUTE_BALANCED) & (not kwai)),
    ], x["tp"].shape)
    _count(rejected, reason5, OFFLOAD_FRACTIONS.size)
    x = _keep(x, reason5 == OK)
    configs = _expand(x, {"offload_fraction": OFFLOAD_FRACTIONS})
    reason6 = _first_failure(
        [(16, (configs["offload_fraction"] > 0) & ((configs["pp"] < 3) | (configs["recompute"] == RECOMPUTE_FULL) | (not kwai)))],
        configs["tp"].shape,
    )
    _count(rejected, reason6, 1)
    configs = _keep(configs, reason6 == OK)
    return Space(n_gpus=cluster.n_gpus, configs={k: configs[k] for k in PARALLEL_KEYS}, rejected=rejected)


def structural_violations(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, cfg: dict) -> list[str]:
    """The rules one configuration breaks (scalar check, used by tests and to explain a choice)."""
    tp, pp, dp, cp, vpp = (int(cfg[k]) for k in ("tp", "pp", "dp", "cp", "vpp"))
    mb, sp, zero = int(cfg["micro_batch"]), int(bool(cfg["sp"])), int(cfg["zero_stage"])
    L, a, kv, s, B = model.n_layers, model.n_heads, model.n_kv_heads, job.seq_len, job.global_batch
    bad = []
    if tp * pp * dp * cp != cluster.n_gpus:
        bad.append(REASONS[1])
    if a % tp:
        bad.append(REASONS[2])
    if kv % tp and tp % kv:
        bad.append(REASONS[3])
    if tp > 2 * cluster.nvlink_domain_gpus:
        bad.append(REASONS[4])
    if L % pp and (L + 2) % pp:
        bad.append(REASONS[5])
    if cp > 1 and s % (2 * cp):
        bad.append(REASONS[6])
    if vpp > 1 and pp == 1:
        bad.append(REASONS[8])
    if -(-L // pp) % vpp and (L + 2) // pp % vpp:
        bad.append(REASONS[9])
    if B % (mb * dp):
        bad.append(REASONS[11])
    elif vpp > 1 and B // (mb * dp) < pp:
        bad.append(REASONS[10])
    if sp and tp == 1:
        bad.append(REASONS[12])
    if zero >= 2 and pp > 1 and (job.framework or "").lower() in ZERO23_NO_PP:
        bad.append(REASONS[13])
    if zero > 0 and dp == 1:
        bad.append(REASONS[14])
    fw = (job.framework or "").lower()
    if int(cfg.get("cp_ulysses", 0)) and (cp == 1 or (a // tp) % cp or fw not in ULYSSES_FRAMEWORKS):
        bad.append(REASONS[15])
    rc = cfg.get("recompute", 0)
    rc = {v: k for k, v in RECOMPUTE_NAMES.items()}.get(rc, rc) if isinstance(rc, str) else int(rc)
    if "cp_kind" in cfg:
        cfg = {**cfg, "cp_ulysses": int(cfg["cp_kind"] == "ulysses")}
    if float(cfg.get("offload_fraction", 0.0)) > 0 and (pp < 3 or rc == RECOMPUTE_FULL or fw not in KWAI_FEATURES):
        bad.append(REASONS[16])
    if rc == RECOMPUTE_BALANCED and fw not in KWAI_FEATURES:
        bad.append(REASONS[17])
    return bad


# ---- ZeRO++ (opt-in dimension) ---------------------------------------------------------------
#: ZeRO++ parts as step inputs (Wang et al. 2023, arXiv 2306.10209): qwZ, hpZ (secondary group =
#: one node's DP ranks), qgZ; only with ZeRO-3
ZEROPP_KEYS = ("qwz", "hpz", "qgz")
ZEROPP_REASONS: dict[int, str] = {
    40: "ZeRO++ hpZ needs gpus_per_node to divide the GPU count (DeepSpeed _ensure_divisibility)",
}
#: memory rejection reported apart from the generic one: fits without, not with, the hpZ copy
HPZ_MEMORY_REASON = "does not fit in GPU memory with the hpZ secondary partition (+2 Psi / alpha per GPU)"


def zeropp_names(configs: dict[str, np.ndarray]) -> np.ndarray:
    """The ``zeropp`` column: comma list of the parts on in each configuration ('' for none)."""
    n = configs["tp"].size
    cols = [configs.get(k, np.zeros(n)) for k in ZEROPP_KEYS]
    return np.array([",".join(k for k, c in zip(ZEROPP_KEYS, v) if c > 0) for v in zip(*cols)], dtype=object) \
        if n else np.empty(0, dtype=object)


def expand_zeropp(space: Space, cluster: ClusterSpec) -> Space:
    """Every ZeRO-3 configuration of ``space`` times the 8 on/off combinations of qwZ, hpZ, qgZ;
    other stages keep them off. A rejected combination is counted under its reason."""
    c = space.configs
    z3 = c["zero_stage"] == 3
    base = {k: v[~z3] for k, v in c.items()}
    for k in ZEROPP_KEYS:
        base[k] = np.zeros(base["tp"].size, dtype=np.int32)
    grid = _expand({k: v[z3] for k, v in c.items()},
                   {"qwz": np.array([0, 1], np.int32), "hpz": np.array([0, 1], np.int32),
                    "qgz": np.array([0, 1], np.int32)})
    gpn = min(cluster.gpus_per_node, cluster.n_gpus)
    bad = (grid["hpz"] == 1) & (cluster.n_gpus % gpn != 0)
    rejected = dict(space.rejected)
    if bad.any():
        rejected[ZEROPP_REASONS[40]] = rejected.get(ZEROPP_REASONS[40], 0) + int(bad.sum())
    grid = _keep(grid, ~bad)
    configs = {k: np.concatenate([base[k], grid[k]]) for k in base}
    return Space(n_gpus=space.n_gpus, configs=configs, rejected=rejected)
