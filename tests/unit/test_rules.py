"""The structural rules are written once (perfmodel.rules) and the three callers agree on them."""
import numpy as np
import pandas as pd
import pytest

import perfmodel as pm
from perfmodel import rules
from perfmodel.estimate import check_config, config_arrays
from perfmodel.runs import runs_to_inputs
from perfmodel.search import REASONS, structural_violations

MODEL = pm.load_model("llama3-70b")  # 80 layers, 64 heads, 8 KV heads
GPU = pm.load_gpu("h100-sxm5-80gb")


#: 48 query heads, 12 KV heads: tp = 8 divides the first and neither divides nor is a multiple of the second
GQA12 = pm.ModelSpec(name="gqa12", n_layers=80, hidden_size=6144, ffn_hidden_size=16384, n_heads=48, n_kv_heads=12,
                     vocab_size=32000, mlp="swiglu")


def cfg(n_gpus=64, framework="megatron-lm", global_batch=64, seq_len=4096, model=MODEL, **par):
    cluster = pm.ClusterSpec.build(GPU, n_gpus, 8)
    return model, cluster, pm.ParallelSpec(**par), pm.JobSpec(global_batch=global_batch, seq_len=seq_len,
                                                              framework=framework)


# (parallel spec, job overrides, the field the error names, the rule it breaks)
BROKEN = [
    (dict(tp=3, dp=21), {}, "tp", rules.TP_HEADS),
    (dict(tp=8, pp=3, dp=2), {"n_gpus": 48}, "pp", rules.PP_LAYERS),
    (dict(tp=8, dp=8), {"model": GQA12}, "tp", rules.TP_KV_HEADS),
    (dict(tp=8, pp=4, vpp=3, dp=2), {}, "vpp", rules.VPP_LAYERS),
    (dict(tp=8, dp=4), {}, "dp", rules.GPUS),
    (dict(tp=8, dp=8, micro_batch=3), {}, "global_batch", rules.BATCH),
    (dict(tp=8, cp=8, dp=1), {"seq_len": 4104}, "cp", rules.CP_RING_SEQ),
    (dict(tp=8, cp=3, dp=1, cp_kind="ulysses"), {"n_gpus": 24}, "cp", rules.CP_SEQ),
    # 8 query heads per rank, but 1 key/value head: the all-to-all over cp 8 cannot split it
    (dict(tp=8, cp=8, dp=1, cp_kind="ulysses", recompute="full"), {}, "cp", rules.ULYSSES_HEADS),
    (dict(tp=2, cp=4, dp=8, cp_kind="ulysses", recompute="full"), {}, "cp", None),  # 32 and 4 per rank: fine
    (dict(tp=8, pp=2, dp=4, offload_fraction=0.5), {}, "offload_fraction", rules.OFFLOAD_PP),
]


@pytest.mark.parametrize("par, over, field, rule", BROKEN)
def test_check_config_raises_the_rule_with_its_field(par, over, field, rule):
    n = over.pop("n_gpus", 64)
    model, cluster, p, job = cfg(n_gpus=n, **over, **par)
    if rule is None:
        check_config(model, cluster, p, job)
        return
    assert rules.first_broken(rules.CONFIG_RULES, config_arrays(model, cluster, p, job)) is rule
    with pytest.raises(pm.InputError) as exc:
        check_config(model, cluster, p, job)
    assert exc.value.field == field
    assert rule.rule in str(exc.value) and "=" in str(exc.value)  # the rule and the values


def test_the_search_reports_the_same_rules():
    assert REASONS[rules.TP_HEADS.code] == "tp must divide n_heads"
    assert {r.reason for r in rules.CONFIG_RULES} <= set(REASONS.values())
    model, cluster, p, job = cfg(tp=3, dp=21)
    bad = dict(p.model_dump(), tp=3, dp=21)
    assert rules.TP_HEADS.reason in structural_violations(model, cluster, job, bad)


def test_capability_rules_limit_the_search_not_a_what_if():
    """ZeRO-3 with a pipeline does not run under Megatron-LM (FSDP needs pp = 1): the search never
    proposes it, while estimate still costs it as a what-if."""
    model, cluster, p, job = cfg(tp=8, pp=2, dp=4, zero_stage=3)
    check_config(model, cluster, p, job)
    assert pm.estimate(model, cluster, p, job).iteration_time_s > 0
    assert rules.ZERO_PP.reason in structural_violations(model, cluster, job, p.model_dump())
    tt = job.model_copy(update={"framework": "torchtitan"})
    assert rules.ZERO_PP.reason not in structural_violations(model, cluster, tt, p.model_dump())


def test_transformer_engine_stacks_have_no_context_parallelism_before_ampere():
    """TE's flash and cuDNN fused attention need sm80+: on a V100 only UnfusedDotProductAttention is left,
    which has no context parallelism. The search never offers cp > 1 there; estimate says the stack cannot
    run it. On an A100 the same configuration is allowed."""
    from perfmodel.search import run_search

    model = pm.load_model("gpt3-13b")
    job = pm.JobSpec(global_batch=512, seq_len=2048, framework="megatron-lm", precision="fp16")
    volta = pm.ClusterSpec.build(pm.load_gpu("v100-sxm3-32gb"), n_gpus=64, gpus_per_node=16)
    ampere = pm.ClusterSpec.build(pm.load_gpu("a100-sxm4-80gb"), n_gpus=64)
    par = pm.ParallelSpec(tp=2, pp=2, cp=2, dp=8)
    assert rules.TE_CP_HEAD_DIM.reason in structural_violations(model, volta, job, par.model_dump())
    assert rules.TE_CP_HEAD_DIM.reason not in structural_violations(model, ampere, job, par.model_dump())
    result = run_search(model, volta, job)
    assert (result.candidates["cp"] == 1).all() and len(result.candidates) > 0


def test_vectorized_rules_agree_with_the_scalar_check():
    """Every rule gives the same answer over a grid (numpy arrays, as the search uses them) and on one
    configuration of plain Python scalars with a string framework (as estimate uses them)."""
    rng = np.random.default_rng(0)
    n = 3000
    grid = {k: rng.choice(v, n) for k, v in {
        "tp": [1, 2, 3, 4, 8, 16], "pp": [1, 2, 3, 4, 5], "dp": [1, 2, 4, 8], "cp": [1, 2, 3, 4],
        "vpp": [1, 2, 4], "micro_batch": [1, 2, 3], "sp": [0, 1], "zero_stage": [0, 1, 2, 3],
        "recompute": [0, 1, 2, 3], "cp_ulysses": [0, 1], "offload_fraction": [0.0, 0.5], "hpz": [0, 1],
        "n_gpus": [48, 64], "gpus_per_node": [8, 12], "seq_len": [4096, 4098], "global_batch": [8, 64],
        "head_dim": [128.0, 108.0, 288.0], "fused_attention": [0.0, 1.0]}.items()}
    frameworks = np.array(["megatron-lm", "megatron-kwai", "deepspeed", "torchtitan", "nanotron"], dtype=object)
    grid["framework"] = rng.choice(frameworks, n)
    fixed = {"n_layers": 80, "n_heads": 64, "n_kv_heads": 8, "nvlink_domain_gpus": 8}
    for rule in rules.RULES.values():
        over_grid = np.broadcast_to(rule.broken({**fixed, **grid}), (n,))
        for i in range(0, n, 7):
            one = {**fixed, **{k: v[i].item() if hasattr(v[i], "item") else v[i] for k, v in grid.items()}}
            assert isinstance(one["framework"], str) and isinstance(one["tp"], int)
            assert bool(rule.broken(one)) == bool(over_grid[i]), (rule.code, one)
    codes = rules.reason_codes(rules.CONFIG_RULES, {**fixed, **grid}, (n,))
    for i in range(0, n, 11):
        one = {**fixed, **{k: v[i].item() if hasattr(v[i], "item") else v[i] for k, v in grid.items()}}
        first = rules.first_broken(rules.CONFIG_RULES, one)
        assert codes[i] == (first.code if first else 0)


def test_runs_use_the_run_rules():
    row = {"run_id": "t-001", "source": "t", "model_name": "m", "n_layers": 80, "hidden_size": 8192,
           "ffn_hidden_size": 28672, "n_heads": 64, "n_kv_heads": 8, "seq_len": 4096, "mlp": "swiglu",
           "gpu": "h100-sxm5-80gb", "n_gpus": 64, "gpus_per_node": 8, "tp": 8, "pp": 2, "dp": 4,
           "micro_batch": 1, "global_batch": 64, "framework": "megatron-lm"}
    df = pd.DataFrame([row, dict(row, run_id="t-002", tp=3, dp=8, n_gpus=48), dict(row, run_id="t-003", dp=8),
                       dict(row, run_id="t-004", pp=3, dp=2, n_gpus=48)])
    _, status, reason, _ = runs_to_inputs(df)
    assert list(status) == ["ok", "invalid", "invalid", "ok"]  # uneven stages ran (nanotron): costed
    assert reason[1].startswith("tp:") and rules.TP_HEADS.rule in reason[1]
    assert reason[2].startswith("dp:") and rules.GPUS.rule in reason[2]


@pytest.mark.parametrize("framework", sorted(rules.PROFILES))
def test_the_search_keeps_every_capability_rule_of_each_stack(framework):
    """Every rule of CAPABILITY_RULES is applied by the search's space (none is listed but left unwired):
    no configuration the search evaluates for a stack breaks one, whichever stack it is."""
    from perfmodel.search import enumerate_space

    model = pm.load_model("llama3-8b")  # 32 layers: interleaving and CP are both possible
    cluster = pm.ClusterSpec.build(GPU, 64, 8)
    job = pm.JobSpec(global_batch=128, seq_len=8192, framework=framework)
    space = enumerate_space(model, cluster, job)
    c = space.configs
    x = {**rules.job_values(model, cluster, job), **{k: np.asarray(v) for k, v in c.items()},
         "hpz": np.zeros(space.size, dtype=int)}
    for r in rules.CAPABILITY_RULES:
        assert not np.any(r.broken(x)), f"{framework}: the search space breaks '{r.reason}'"


@pytest.mark.parametrize("framework, field, rule", [
    ("megatron-deepspeed", "vpp", rules.VPP_STACK), ("nanotron", "vpp", rules.VPP_STACK),
    ("deepspeed", "cp", rules.RING_CP_STACK), ("gpt-neox", "cp", rules.RING_CP_STACK),
])
def test_stacks_without_interleaving_or_ring_cp(framework, field, rule):
    """DeepSpeed's pipeline engine and nanotron's run no interleaved schedule; the DeepSpeed family splits
    sequences only with Ulysses: the search rejects such configurations with the rule's reason, and
    estimate still costs them as a what-if (with a note)."""
    par = dict(tp=8, pp=4, vpp=2, dp=2) if field == "vpp" else dict(tp=8, cp=2, dp=4)
    model, cluster, p, job = cfg(framework=framework, **par)
    assert rule.reason in structural_violations(model, cluster, job, p.model_dump())
    check_config(model, cluster, p, job)  # the layout itself is well formed
    ok = dict(par, vpp=1) if field == "vpp" else dict(par, cp_kind="ulysses")
    model, cluster, p, job = cfg(framework=framework, **ok)
    assert rule.reason not in structural_violations(model, cluster, job, p.model_dump())


def test_deepspeed_alone_has_autotp_only():
    """DeepSpeed without Megatron shards linear layers with AutoTP: no sequence parallelism, ZeRO 0-2
    (deepspeed.ai/tutorials/autotp-training); Megatron-DeepSpeed keeps Megatron's TP with SP."""
    for sp, zero, rule in ((True, 1, rules.AUTOTP_SP), (False, 3, rules.AUTOTP_ZERO3)):
        model, cluster, p, job = cfg(framework="deepspeed", tp=8, dp=8, sp=sp, zero_stage=zero)
        assert rule.reason in structural_violations(model, cluster, job, p.model_dump())
        model, cluster, p, job = cfg(framework="megatron-deepspeed", tp=8, dp=8, sp=sp, zero_stage=min(zero, 1))
        assert rule.reason not in structural_violations(model, cluster, job, p.model_dump())
    model, cluster, p, job = cfg(framework="deepspeed", tp=1, dp=64, sp=False, zero_stage=3)
    assert rules.AUTOTP_ZERO3.reason not in structural_violations(model, cluster, job, p.model_dump())
    # AutoTP composes with data parallelism and ZeRO, not with DeepSpeed's pipeline or Ulysses
    model, cluster, p, job = cfg(framework="deepspeed", tp=2, pp=4, dp=8, sp=False)
    assert rules.AUTOTP_2D.reason in structural_violations(model, cluster, job, p.model_dump())
    model, cluster, p, job = cfg(framework="deepspeed", tp=1, pp=4, dp=16, sp=False)
    assert rules.AUTOTP_2D.reason not in structural_violations(model, cluster, job, p.model_dump())
