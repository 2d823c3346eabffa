"""What torchtitan itself refuses or changes, kept out of its search (perfmodel.rules TT_AMP, TT_SEQ and
TT_PP_SPLIT's cap), each written against torchtitan's own check:

* ``maybe_enable_amp`` (torchtitan/distributed/utils.py): with neither FSDP (a sharded data-parallel degree
  above 1) nor CP, TP or PP trains with mixed precision off, in float32;
* ``ParallelDims.seq_len_divisor`` (torchtitan/distributed/parallel_dims.py): tp x (2 cp), asserted against
  ``training.seq_len`` in the models' parallelize functions;
* ``generate_llm_fqn_per_model_part`` (torchtitan/distributed/pipeline_parallel.py): "Number of stages ...
  cannot be greater than effective layers" (n_layers + embedding + output).
"""
from __future__ import annotations

import numpy as np
import pytest

import perfmodel as pm
from perfmodel import rules
from perfmodel.search import enumerate_space, run_search, structural_violations

GPU = pm.load_gpu("h100-sxm5-80gb")


def _mixed_precision_on(dp_shard, cp, tp, pp):
    """torchtitan's maybe_enable_amp, restated: FSDP (dp_shard > 1 or cp > 1) applies the mixed precision;
    else autocast only where neither TP nor PP runs."""
    return (dp_shard > 1) | (cp > 1) | ((tp == 1) & (pp == 1))


def test_the_searched_torchtitan_layouts_train_in_the_costed_precision():
    model = pm.load_model("llama3.1-405b")
    cluster = pm.ClusterSpec.build(pm.load_gpu("a100-sxm4-40gb"), 256, 8)
    job = pm.JobSpec(global_batch=64, seq_len=4096, framework="torchtitan")
    space = enumerate_space(model, cluster, job)
    c = space.configs
    shard = np.where(c["zero_stage"] == 3, c["dp"], 1)  # torchtitan's DDP (zero 0) shards nothing
    assert _mixed_precision_on(shard, c["cp"], c["tp"], c["pp"]).all()
    assert space.rejected.get(rules.TT_AMP.reason, 0) > 0
    # the layout that won before the rule, tp 8 x pp 32 without data parallelism, is refused, and the
    # winner now is one torchtitan runs in bf16
    assert rules.TT_AMP.reason in structural_violations(
        model, cluster, job, dict(tp=8, pp=32, dp=1, cp=1, vpp=4, micro_batch=1, sp=True, zero_stage=0,
                                  recompute="full"))
    best = run_search(model, cluster, job).candidates.iloc[0]
    assert bool(_mixed_precision_on(best["dp"] if best["zero_stage"] == 3 else 1, best["cp"], best["tp"],
                                    best["pp"]))


@pytest.mark.parametrize("tp, pp, dp, cp, broken", [
    (8, 1, 1, 1, True), (1, 8, 1, 1, True), (2, 4, 1, 1, True),  # TP / PP alone: float32
    (8, 1, 1, 2, False), (1, 1, 8, 1, False), (8, 1, 8, 1, False),  # CP or data parallelism: FSDP
])
def test_amp_rule_matches_maybe_enable_amp(tp, pp, dp, cp, broken):
    x = {"tp": tp, "pp": pp, "dp": dp, "cp": cp, "framework": "torchtitan"}
    assert bool(rules.TT_AMP.broken(x)) is broken
    assert bool(rules.TT_AMP.broken({**x, "framework": "megatron-lm"})) is False  # Megatron casts itself


def test_torchtitan_sequence_length_is_a_multiple_of_its_divisor():
    model = pm.load_model("llama2-7b")
    cluster = pm.ClusterSpec.build(GPU, 128, 8)
    job = pm.JobSpec(global_batch=64, seq_len=1000, framework="torchtitan")
    c = enumerate_space(model, cluster, job).configs
    assert (1000 % (2 * c["tp"] * c["cp"]) == 0).all()
    assert ((c["tp"] == 2) & (c["cp"] == 2)).any()  # 1000 = 125 x 8: tp 2 x cp 2 is allowed
    x = {"seq_len": 1000, "tp": 4, "cp": 2, "framework": "torchtitan"}  # 16 does not divide 1000
    assert bool(rules.TT_SEQ.broken(x)) and not bool(rules.TT_SEQ.broken({**x, "framework": "nemo"}))
    assert bool(rules.TT_SEQ.broken({"seq_len": 1001, "tp": 1, "cp": 1, "framework": "torchtitan"}))


@pytest.mark.parametrize("pp, vpp, ok", [(41, 2, True), (42, 2, False), (64, 2, False), (80, 1, True),
                                         (16, 2, True)])
def test_torchtitan_default_split_has_at_most_one_stage_per_layer(pp, vpp, ok):
    """80 layers + embedding + output = 82 units: pp x vpp above that cannot be split."""
    assert bool(rules.torchtitan_split_ok(80, pp, vpp)) is ok


def test_sequence_divisor_does_not_overflow_at_large_gpu_counts():
    """The search holds tp and cp as int32: 2 x tp x cp of a 65,536-GPU grid overflows that (to 0, a
    division by zero and a RuntimeWarning on stderr, reviewer's 65,536-GPU recommend)."""
    import warnings

    big = np.array([65536], dtype=np.int32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        broken = rules.TT_SEQ.broken({"seq_len": 8192, "tp": big, "cp": big, "framework": "torchtitan"})
    assert bool(broken[0])


def test_torch_1f1b_gets_at_least_one_micro_batch_per_stage():
    """torch.distributed.pipelining's Schedule1F1B raises "Number of microbatches (4) must be greater than or
    equal to the number of stages (8)" (reviewer's run of the emitted TOML through torchtitan and torch 2.13:
    Llama 3.1 405B, 256 H100s, global batch 4 was emitted as tp 8 cp 4 pp 8 with 4 micro-batches)."""
    model = pm.load_model("llama3.1-405b")
    cluster = pm.ClusterSpec.build(GPU, 256, 8)
    job = pm.JobSpec(global_batch=4, seq_len=8192, framework="torchtitan")
    c = enumerate_space(model, cluster, job).configs
    micro = 4 // (c["micro_batch"] * c["dp"])
    assert ((c["pp"] == 1) | (c["vpp"] > 1) | (micro >= c["pp"])).all()
    x = {"pp": 8, "vpp": 1, "global_batch": 4, "micro_batch": 1, "dp": 1}
    assert bool(rules.TORCH_1F1B_MICRO.broken({**x, "framework": "torchtitan"}))
    assert not bool(rules.TORCH_1F1B_MICRO.broken({**x, "framework": "megatron-lm"}))  # its 1F1B warms up less
    assert not bool(rules.TORCH_1F1B_MICRO.broken({**x, "global_batch": 8, "framework": "torchtitan"}))
