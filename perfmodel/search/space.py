"""The configuration space as numpy arrays, with the structural rules as masks.

Enumeration is a chain of broadcasts, never a Python loop per candidate:

1. the *layout* grid ``tp x pp x cp`` over the divisors of the GPU count (dp = gpus / (tp pp cp)),
   checked against the model's shape, the sequence and the batch;
2. every valid layout times ``vpp x micro_batch``, then ``sp``, ``zero_stage``, ``recompute x CP
   kind`` and the activation-offload share, each block checked (``perfmodel.rules``: structure,
   what the stack can run, the search's pruning) before the next is expanded.

Every rejected configuration gets a reason code (``REASONS``); a configuration rejected at one
step stands for all of its later expansions, so the counts in ``Space.rejected`` are counts of
configurations. ZeRO++ (qwz/hpz/qgz) is an opt-in dimension (``expand_zeropp``, ``run_search(zeropp=True)``):
by default the ``zeropp`` field of every candidate is the empty string.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from perfmodel import rules
from perfmodel.costs.memory import RECOMPUTE_BALANCED, RECOMPUTE_FULL, RECOMPUTE_SELECTIVE
from perfmodel.rules import reason_codes
from perfmodel.specs import ClusterSpec, JobSpec, ModelSpec
from perfmodel.specs.parallel import ZEROPP_ORDER

#: the parallel keys of ``STEP_INPUTS`` that the search varies (all else comes from the template)
PARALLEL_KEYS = ("tp", "pp", "dp", "cp", "vpp", "micro_batch", "sp", "zero_stage", "recompute",
                 "cp_ulysses", "offload_fraction")

RECOMPUTE_NAMES = {0: "none", RECOMPUTE_SELECTIVE: "selective", RECOMPUTE_FULL: "full",
                   RECOMPUTE_BALANCED: "balanced"}
N_RECOMPUTE = len(RECOMPUTE_NAMES)

#: activation-offload shares tried (Yuan et al. ATC'24 search alpha continuously; a 5-point grid
#: is within a few percent of it), only where offloading exists: pp >= 3 (Megatron-Kwai)
OFFLOAD_FRACTIONS = np.array([0.0, 0.25, 0.5, 0.75, 1.0])

#: the micro-batches the search tries: every divisor of the batch up to MAX_MICRO_BATCH sequences or
#: MAX_MICRO_BATCH_TOKENS tokens, whichever allows more. A micro-batch's GEMMs reach their rate and its
#: fixed costs fade well before 64K tokens (an audit's brute force: Llama-2 7B on 8 H200s at 512 tokens, micro-batch
#: 32 is 8% faster than 16; GPT-3 1.3B at 1,024 tokens, 64 is 1.3% faster than 32; at 2,048 tokens, 32 is 0.4%
#: faster than 16); beyond, a larger one only adds activation memory, and configurations (the 125-count range
#: benchmark at 4,096 tokens: 34.4 M configurations, 58 M with micro-batches up to 64, 90 M with every divisor)
MAX_MICRO_BATCH = 16
MAX_MICRO_BATCH_TOKENS = 65536

# ---- reason codes (0 = structurally valid): the rules of perfmodel.rules ------------------------
OK = 0
REASONS: dict[int, str] = {code: r.reason for code, r in sorted(rules.RULES.items())}


def max_micro_batch(seq_len: int) -> int:
    """The largest micro-batch (sequences) the search tries at this sequence length."""
    return max(MAX_MICRO_BATCH, MAX_MICRO_BATCH_TOKENS // max(int(seq_len), 1))


def vpp_candidates(n_layers: int, pp_values) -> np.ndarray:
    """The interleaving depths worth trying: the divisors of the layers per stage under every split a stack
    runs -- even (L / pp, or (L + 2) / pp with the embedding and loss counted as layers) or uneven (torchtitan,
    DeepSpeed: ceil(L / pp), floor((L + 2) / pp)) -- for each pipeline size of the grid; the rules
    (VPP_LAYERS, TT_PP_SPLIT ...) then keep those the stack runs. (The divisors of L and L + 2 alone missed
    torchtitan's pp 3 x vpp 3 for an 80-layer model, 9% faster than the winner it left.)"""
    L = int(n_layers)
    per_stage = {L, L + 2}
    for pp in np.asarray(pp_values, dtype=np.int64).ravel():
        pp = max(int(pp), 1)
        per_stage |= {L // pp, -(-L // pp), (L + 2) // pp, -(-(L + 2) // pp)}
    return np.unique(np.concatenate([divisors(n) for n in per_stage if n > 0])).astype(np.int32)


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


def layout_grid(model: ModelSpec, cluster: ClusterSpec, job: JobSpec) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Step 1: every (tp, pp, cp) over the divisors of the GPU count, with a reason code each."""
    n = cluster.n_gpus
    d = divisors(n).astype(np.int32)
    tp, pp, cp = (a.ravel() for a in np.meshgrid(d, d, d, indexing="ij"))
    mp = tp.astype(np.int64) * pp * cp  # up to gpus**3: int64
    dp = np.where(n % mp == 0, n // mp, 0).astype(np.int32)
    # the CP kind is chosen later, with ring CP's own rule (seq_len divisible by 2 cp)
    x = {**rules.job_values(model, cluster, job), "tp": tp, "pp": pp, "cp": cp, "dp": dp}
    reason = reason_codes((rules.GPUS, rules.TP_HEADS, rules.TP_KV_HEADS, rules.TP_KV_STACK, rules.TP_DOMAINS,
                           rules.PP_LAYERS, rules.CP_SEQ, rules.DP_BATCH, rules.AUTOTP_2D, rules.TT_AMP, rules.TT_SEQ),
                          x, tp.shape)
    return {"tp": tp, "pp": pp, "cp": cp, "dp": dp}, reason


def _expand(base: dict[str, np.ndarray], axes: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Outer product: every row of ``base`` with every combination of ``axes``."""
    grid = [a.ravel() for a in np.meshgrid(*axes.values(), indexing="ij")]
    n_base, n_inner = base["tp"].size, grid[0].size
    out = {k: np.repeat(v, n_inner) for k, v in base.items()}
    out.update({k: np.tile(g, n_base) for k, g in zip(axes, grid)})
    return out


def _count(rejected: dict[str, int], reason: np.ndarray, weight: int) -> None:
    counts = np.bincount(reason.ravel().astype(np.intp), minlength=OK + 1)  # codes are small non-negative ints
    for c in np.flatnonzero(counts * weight):
        if c != OK:
            rejected[REASONS[int(c)]] = rejected.get(REASONS[int(c)], 0) + int(counts[c]) * weight


def _keep(x: dict[str, np.ndarray], ok: np.ndarray) -> dict[str, np.ndarray]:
    # one index array taken from every column: ~4x faster than masking each column with ``ok``
    idx = np.flatnonzero(ok)
    return {k: v.take(idx) for k, v in x.items()}


def enumerate_space(model: ModelSpec, cluster: ClusterSpec, job: JobSpec) -> Space:
    """All structurally valid configurations of ``PARALLEL_KEYS`` for this job, as int arrays.

    Broadcasts, each filtered before the next so the grid never holds more than the valid prefix
    times one block of axes: layouts; x (vpp, micro_batch); x sp; x zero; x (recompute, CP kind);
    x offload share (only where offloading is possible).
    A rejection at an earlier step counts for every configuration it stands for.
    """
    L, B = model.n_layers, job.global_batch
    vpp_vals = vpp_candidates(L, divisors(cluster.n_gpus))
    mb_vals = divisors(B, max_micro_batch(job.seq_len)).astype(np.int32)
    n_late = 2 * 4 * N_RECOMPUTE * 2 * OFFLOAD_FRACTIONS.size  # sp x zero x recompute x cp kind x offload

    rejected: dict[str, int] = {}
    layouts, reason1 = layout_grid(model, cluster, job)
    # a (tp, pp, cp) whose product does not divide the GPU count is a hole in the grid, not a
    # configuration: not counted as a rejection (it would dwarf every real reason)
    _count(rejected, np.where(reason1 == rules.GPUS.code, OK, reason1), vpp_vals.size * mb_vals.size * n_late)
    x = _keep(layouts, reason1 == OK)

    # ---- step 2: schedule (vpp, micro-batch) ---------------------------------------------------
    job_x = rules.job_values(model, cluster, job)
    x = _expand(x, {"vpp": vpp_vals, "micro_batch": mb_vals})
    reason2 = reason_codes((rules.VPP_PP, rules.VPP_LAYERS, rules.BATCH, rules.INTERLEAVED_MICRO,
                            rules.TORCH_1F1B_MICRO, rules.TT_PP_SPLIT, rules.VPP_STACK),
                           {**job_x, **x}, x["tp"].shape)
    _count(rejected, reason2, n_late)
    x = _keep(x, reason2 == OK)

    # ---- step 3: sequence parallelism, ZeRO stage, recompute (each filtered before the next) ---
    x = _expand(x, {"sp": np.array([0, 1], dtype=np.int32)})
    reason3 = reason_codes((rules.SP_TP, rules.SP_STACK, rules.AUTOTP_SP, rules.SP_SEQ), {**job_x, **x},
                           x["tp"].shape)
    _count(rejected, reason3, 4 * N_RECOMPUTE * 2 * OFFLOAD_FRACTIONS.size)
    x = _keep(x, reason3 == OK)

    x = _expand(x, {"zero_stage": np.arange(4, dtype=np.int32)})
    reason4 = reason_codes((rules.ZERO_PP, rules.ZERO_STAGES, rules.ZERO_FSDP, rules.ZERO_DP, rules.AUTOTP_ZERO3,
                            rules.TT_DDP),
                           {**job_x, **x}, x["tp"].shape)
    _count(rejected, reason4, N_RECOMPUTE * 2 * OFFLOAD_FRACTIONS.size)
    x = _keep(x, reason4 == OK)

    # ---- step 4: CP variant, recompute, activation offloading (Yuan et al. ATC'24) -------------
    # A configuration is counted under the first rule it breaks in the order CP_RING_SEQ, ULYSSES_HEADS,
    # ULYSSES_STACK, BALANCED, then the other CP rules (CAPABILITY_RULES' order). The recompute rule reads
    # the mode and the stack only, so it is checked once per mode and the CP rules once per CP kind: a
    # (layout, CP kind) row stands for its N_RECOMPUTE modes, without expanding them before the filter.
    x = _expand(x, {"cp_ulysses": np.array([0, 1], dtype=np.int32)})
    per_row = {**job_x, **x}
    before = reason_codes((rules.CP_RING_SEQ, rules.ULYSSES_HEADS, rules.ULYSSES_STACK), per_row, x["tp"].shape)
    after = reason_codes((rules.TE_CP_HEAD_DIM, rules.RING_CP_STACK, rules.ULYSSES_SP, rules.ULYSSES_PP), per_row,
                         x["tp"].shape)
    modes = np.arange(N_RECOMPUTE, dtype=np.int32)
    balanced = reason_codes((rules.BALANCED,), {**job_x, "recompute": modes}, modes.shape) != OK
    _count(rejected, before, N_RECOMPUTE * OFFLOAD_FRACTIONS.size)
    _count(rejected, np.where(before == OK, np.int8(rules.BALANCED.code), np.int8(OK)),
           int(balanced.sum()) * OFFLOAD_FRACTIONS.size)
    _count(rejected, np.where(before == OK, after, np.int8(OK)), int((~balanced).sum()) * OFFLOAD_FRACTIONS.size)
    x = _expand(_keep(x, (before == OK) & (after == OK)), {"recompute": modes[~balanced]})
    # offload shares > 0 only where offloading is possible: the rest keep share 0 and count their
    # other shares as rejected, without materializing them
    reason6 = reason_codes((rules.OFFLOAD_PP, rules.OFFLOAD_STACK), {**job_x, **x, "offload_fraction": 1.0},
                           x["tp"].shape)
    _count(rejected, reason6, OFFLOAD_FRACTIONS.size - 1)
    can = reason6 == OK
    if can.any():
        no_offload = {**_keep(x, ~can), "offload_fraction": np.zeros(int((~can).sum()))}
        with_offload = _expand(_keep(x, can), {"offload_fraction": OFFLOAD_FRACTIONS})
        configs = {k: np.concatenate([no_offload[k], with_offload[k]]) for k in with_offload}
    else:  # no offloading anywhere (a stack without it): every configuration keeps share 0
        configs = {**x, "offload_fraction": np.zeros(x["tp"].size)}
    return Space(n_gpus=cluster.n_gpus, configs={k: configs[k] for k in PARALLEL_KEYS}, rejected=rejected)


def structural_violations(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, cfg: dict) -> list[str]:
    """The rules one configuration breaks (scalar check, used by tests and to explain a choice)."""
    rc = cfg.get("recompute", 0)
    rc = {v: k for k, v in RECOMPUTE_NAMES.items()}.get(rc, rc) if isinstance(rc, str) else int(rc)
    uly = int(cfg["cp_kind"] == "ulysses") if "cp_kind" in cfg else int(cfg.get("cp_ulysses", 0))
    x = {**rules.job_values(model, cluster, job),
         **{k: np.asarray(int(cfg[k])) for k in ("tp", "pp", "dp", "cp", "vpp", "micro_batch", "zero_stage")},
         "sp": np.asarray(int(bool(cfg["sp"]))), "recompute": np.asarray(rc), "cp_ulysses": np.asarray(uly),
         "offload_fraction": np.asarray(float(cfg.get("offload_fraction", 0.0))),
         "hpz": np.asarray(int("hpz" in str(cfg.get("zeropp", "")) or bool(cfg.get("hpz", 0))))}
    return [r.reason for _, r in sorted(rules.RULES.items()) if bool(r.broken(x))]


# ---- ZeRO++ (opt-in dimension) ---------------------------------------------------------------
#: ZeRO++ parts as step inputs (Wang et al. 2023, arXiv 2306.10209): qwZ, hpZ (secondary group =
#: one node's DP ranks), qgZ; only with ZeRO-3
ZEROPP_KEYS = ZEROPP_ORDER
#: memory rejection reported apart from the generic one: fits without, not with, the hpZ copy
HPZ_MEMORY_REASON = "does not fit in GPU memory with the hpZ secondary partition (+2 Psi / alpha per GPU)"
#: memory rejection of an offloading configuration whose GPU memory fits: the host memory does not
HOST_MEMORY_REASON = "offloads more activations to host memory than its per-GPU limit"


def zeropp_names(configs: dict[str, np.ndarray]) -> np.ndarray:
    """The ``zeropp`` column: comma list of the parts on in each configuration ('' for none)."""
    n = configs["tp"].size
    cols = [configs.get(k, np.zeros(n)) for k in ZEROPP_KEYS]
    return np.array([",".join(k for k, c in zip(ZEROPP_KEYS, v) if c > 0) for v in zip(*cols)], dtype=object) \
        if n else np.empty(0, dtype=object)


def expand_zeropp(space: Space, cluster: ClusterSpec, framework: str | None = None) -> Space:
    """Every ZeRO-3 configuration of ``space`` times the 8 on/off combinations of qwZ, hpZ, qgZ;
    other stages keep them off. A rejected combination is counted under its reason: hpZ without whole
    nodes, any part under a stack without ZeRO++ (``rules.ZEROPP_STACK``), hpZ with tensor parallelism
    (``rules.HPZ_TP``)."""
    c = space.configs
    z3 = c["zero_stage"] == 3
    base = {k: v[~z3] for k, v in c.items()}
    for k in ZEROPP_KEYS:
        base[k] = np.zeros(base["tp"].size, dtype=np.int32)
    grid = _expand({k: v[z3] for k, v in c.items()},
                   {"qwz": np.array([0, 1], np.int32), "hpz": np.array([0, 1], np.int32),
                    "qgz": np.array([0, 1], np.int32)})
    bad = rules.HPZ_NODES.broken({"hpz": grid["hpz"], "n_gpus": cluster.n_gpus, "gpus_per_node": cluster.gpus_per_node})
    rejected = dict(space.rejected)
    if bad.any():
        rejected[rules.HPZ_NODES.reason] = rejected.get(rules.HPZ_NODES.reason, 0) + int(bad.sum())
    stack = np.asarray(rules.ZEROPP_STACK.broken({**grid, "framework": (framework or "").strip().lower()}), dtype=bool)
    stack = np.broadcast_to(stack, bad.shape) & ~bad
    if stack.any():
        rejected[rules.ZEROPP_STACK.reason] = rejected.get(rules.ZEROPP_STACK.reason, 0) + int(stack.sum())
    bad = bad | stack
    tp_split = np.asarray(rules.HPZ_TP.broken(grid), dtype=bool) & ~bad
    if tp_split.any():
        rejected[rules.HPZ_TP.reason] = rejected.get(rules.HPZ_TP.reason, 0) + int(tp_split.sum())
    bad = bad | tp_split
    grid = _keep(grid, ~bad)
    configs = {k: np.concatenate([base[k], grid[k]]) for k in base}
    return Space(n_gpus=space.n_gpus, configs=configs, rejected=rejected)
