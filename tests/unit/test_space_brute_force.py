"""The staged enumeration of the search space equals a brute force over the full grid.

``enumerate_space`` expands the axes one block at a time and filters each block before the next, with
shortcuts (a rule that reads only the recompute mode is checked once per mode; a stack without
offloading never materialises its offload shares). This test builds the whole grid of a small job at
once and gives every configuration the first rule it breaks, in the documented order of the steps
(layout; schedule; sequence parallelism; ZeRO stage; CP kind and recompute in CAPABILITY_RULES'
order; offloading): the valid configurations and the count under every reason must be the same.
"""
from __future__ import annotations

import numpy as np
import pytest

import perfmodel as pm
from perfmodel import rules
from perfmodel.search.space import (
    OFFLOAD_FRACTIONS, PARALLEL_KEYS, divisors, enumerate_space, max_micro_batch, vpp_candidates,
)

ORDER = (
    rules.GPUS, rules.TP_HEADS, rules.TP_KV_HEADS, rules.TP_KV_STACK, rules.TP_DOMAINS, rules.PP_LAYERS,
    rules.CP_SEQ, rules.DP_BATCH, rules.AUTOTP_2D, rules.TT_AMP, rules.TT_SEQ,
    rules.VPP_PP, rules.VPP_LAYERS, rules.BATCH, rules.INTERLEAVED_MICRO, rules.TORCH_1F1B_MICRO,
    rules.TT_PP_SPLIT, rules.VPP_STACK,
    rules.SP_TP, rules.SP_STACK, rules.AUTOTP_SP, rules.SP_SEQ,
    rules.ZERO_PP, rules.ZERO_STAGES, rules.ZERO_FSDP, rules.ZERO_DP, rules.AUTOTP_ZERO3, rules.TT_DDP,
    rules.CP_RING_SEQ, rules.ULYSSES_HEADS, rules.ULYSSES_STACK, rules.BALANCED, rules.TE_CP_HEAD_DIM,
    rules.RING_CP_STACK, rules.ULYSSES_SP, rules.ULYSSES_PP,
    rules.OFFLOAD_PP, rules.OFFLOAD_STACK,
)


def brute_force(model, cluster, job):
    d = divisors(cluster.n_gpus)
    L, B = model.n_layers, job.global_batch
    axes = {
        "tp": d, "pp": d, "cp": d,
        "vpp": vpp_candidates(L, d), "micro_batch": divisors(B, max_micro_batch(job.seq_len)),
        "sp": np.array([0, 1]), "zero_stage": np.arange(4), "cp_ulysses": np.array([0, 1]),
        "recompute": np.arange(4), "offload_fraction": OFFLOAD_FRACTIONS,
    }
    grid = {k: g.ravel() for k, g in zip(axes, np.meshgrid(*axes.values(), indexing="ij"))}
    mp = grid["tp"] * grid["pp"] * grid["cp"]
    grid["dp"] = np.where(cluster.n_gpus % mp == 0, cluster.n_gpus // np.maximum(mp, 1), 0)
    x = {**rules.job_values(model, cluster, job), **grid}
    reason = np.zeros(grid["tp"].shape, dtype=np.int16)
    with np.errstate(divide="ignore", invalid="ignore"):  # the holes' dp = 0
        for r in reversed(ORDER):
            reason = np.where(np.broadcast_to(r.broken(x), reason.shape), r.code, reason)
    counted = reason != rules.GPUS.code  # a (tp, pp, cp) that does not divide the GPUs is a hole, not a config
    valid = reason == 0
    counts = {rules.RULES[int(c)].reason: int(n) for c, n in zip(*np.unique(reason[counted & ~valid],
                                                                             return_counts=True))}
    return {k: v[valid] for k, v in grid.items()}, counts


@pytest.mark.parametrize("framework", ["megatron-lm", "megatron-kwai", "deepspeed", "torchtitan", "nanotron"])
def test_staged_enumeration_equals_brute_force(framework):
    model = pm.load_model("llama2-7b")
    cluster = pm.ClusterSpec.build(pm.load_gpu("v100-sxm3-32gb"), 16, 8)
    job = pm.JobSpec(global_batch=64, seq_len=4096, framework=framework)
    space = enumerate_space(model, cluster, job)
    valid, counts = brute_force(model, cluster, job)
    assert space.rejected == counts
    got = np.stack([space.configs[k].astype(float) for k in PARALLEL_KEYS], axis=1)
    want = np.stack([valid[k].astype(float) for k in PARALLEL_KEYS], axis=1)
    assert got.shape == want.shape
    np.testing.assert_array_equal(np.unique(got, axis=0), np.unique(want, axis=0))
