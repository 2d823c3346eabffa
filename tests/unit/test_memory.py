"""Activation memory against Korthikanti et al. 2022 (arXiv 2205.05198) Table 2, the pipeline's
in-flight micro-batches, and ZeRO model states against Rajbhandari et al. 2020 (arXiv 1910.02054)."""
from __future__ import annotations

import numpy as np
import pytest

from perfmodel.costs.memory import (
    RECOMPUTE_FULL,
    RECOMPUTE_NONE,
    RECOMPUTE_SELECTIVE,
    activation_bytes_per_layer,
    fp32_grad_copy_bytes,
    in_flight_layers,
    model_state_bytes,
)

# (s, b, h, a, t): the paper's 22B / 175B / 530B / 1T shapes (Table 3) and a few others
SHAPES = [
    (2048, 1, 6144, 64, 8),
    (2048, 1, 12288, 96, 8),
    (2048, 1, 20480, 128, 8),
    (2048, 1, 25600, 160, 8),
    (1024, 4, 4096, 32, 2),
    (4096, 2, 8192, 64, 4),
    (512, 8, 1024, 16, 1),
    (8192, 1, 5120, 40, 8),
]
SHAPE_IDS = ["22B", "175B", "530B", "1T", "4k-t2", "8k-t4", "small-t1", "13B-8k"]


def gpt_act(s, b, h, a, t, sp, recompute):
    """activation_bytes_per_layer for GPT: ffn=4h, MHA, dropout, no flash attention, 2 MLP matrices."""
    return float(
        activation_bytes_per_layer(s, b, h, 4 * h, a, a, 2, t, sp, recompute, flash_attention=0, dropout=1)
    )


@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
def test_table2_tensor_parallel(shape):
    s, b, h, a, t = shape
    expected = s * b * h * (10 + 24 / t + 5 * a * s / (h * t))
    assert gpt_act(s, b, h, a, t, 0, RECOMPUTE_NONE) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
def test_table2_tensor_plus_sequence_parallel(shape):
    s, b, h, a, t = shape
    expected = s * b * h * (34 / t + 5 * a * s / (h * t))
    assert gpt_act(s, b, h, a, t, 1, RECOMPUTE_NONE) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
def test_table2_tensor_parallel_selective_recompute(shape):
    s, b, h, a, t = shape
    expected = s * b * h * (10 + 24 / t)
    assert gpt_act(s, b, h, a, t, 0, RECOMPUTE_SELECTIVE) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
def test_table2_sequence_parallel_selective_recompute(shape):
    s, b, h, a, t = shape
    expected = 34 * s * b * h / t
    assert gpt_act(s, b, h, a, t, 1, RECOMPUTE_SELECTIVE) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
def test_table2_full_recompute(shape):
    s, b, h, a, t = shape
    assert gpt_act(s, b, h, a, t, 0, RECOMPUTE_FULL) == pytest.approx(2 * s * b * h, rel=1e-12)


def test_table2_no_parallelism_is_34_plus_5as_over_h():
    """Korthikanti Sec. 4.1 (eq. 1): sbh (34 + 5 a s / h) without any parallelism."""
    s, b, h, a = 2048, 1, 12288, 96
    assert gpt_act(s, b, h, a, 1, 0, RECOMPUTE_NONE) == pytest.approx(s * b * h * (34 + 5 * a * s / h), rel=1e-12)


def test_175b_selective_recompute_saves_about_70_percent():
    """Korthikanti Sec. 5 / Fig. 7: SP + selective recompute cut the 175B activations by ~70%
    relative to TP alone (their abstract: 'reduces activation memory by 5x')."""
    s, b, h, a, t = 2048, 1, 12288, 96, 8
    tp_only = gpt_act(s, b, h, a, t, 0, RECOMPUTE_NONE)
    both = gpt_act(s, b, h, a, t, 1, RECOMPUTE_SELECTIVE)
    assert both / tp_only < 0.35


def test_activation_bytes_broadcast_over_arrays():
    s = np.array([2048.0, 4096.0])
    t = np.array([8.0, 4.0])
    out = activation_bytes_per_layer(s, 1, 12288, 4 * 12288, 96, 96, 2, t, 1, RECOMPUTE_NONE, 0, 1)
    assert out.shape == (2,)
    for i in range(2):
        assert out[i] == pytest.approx(gpt_act(s[i], 1, 12288, 96, t[i], 1, RECOMPUTE_NONE), rel=1e-12)


def test_flash_attention_drops_the_quadratic_term():
    s, b, h, a, t = 8192, 1, 8192, 64, 8
    flash = float(activation_bytes_per_layer(s, b, h, 4 * h, a, a, 2, t, 1, RECOMPUTE_NONE, 1, 1))
    plain = gpt_act(s, b, h, a, t, 1, RECOMPUTE_NONE)
    assert flash < plain
    # with flash attention no s x s term remains: linear in s
    flash2 = float(activation_bytes_per_layer(2 * s, b, h, 4 * h, a, a, 2, t, 1, RECOMPUTE_NONE, 1, 1))
    assert flash2 == pytest.approx(2 * flash, rel=1e-12)


def test_gqa_keeps_fewer_kv_activations():
    args = dict(seq_len=4096, micro_batch=1, hidden_size=8192, ffn_hidden_size=28672, n_heads=64, mlp_matrices=3,
                tp=8, sp=1, recompute=RECOMPUTE_NONE, flash_attention=1, dropout=0)
    assert float(activation_bytes_per_layer(n_kv_heads=8, **args)) < float(activation_bytes_per_layer(n_kv_heads=64, **args))


# ---- pipeline in-flight micro-batches -------------------------------------------------------
@pytest.mark.parametrize("l, p", [(96, 8), (80, 4), (128, 64), (24, 1), (105, 35)])
def test_1f1b_first_stage_holds_all_layers(l, p):
    """1F1B: the first stage holds p micro-batches of l/p layers = l layers (Narayanan et al. 2021)."""
    assert float(in_flight_layers(l, p, 1, n_micro=4 * p)) == pytest.approx(l)


@pytest.mark.parametrize("l, p, v", [(96, 8, 2), (96, 8, 3), (80, 4, 5), (128, 16, 4), (96, 2, 6)])
def test_interleaved_holds_extra_fraction(l, p, v):
    """Interleaved 1F1B: l (1 + (p-1)/(p v)) (Korthikanti et al. 2022 Sec. 4.2.3)."""
    assert float(in_flight_layers(l, p, v, n_micro=8 * p)) == pytest.approx(l * (1 + (p - 1) / (p * v)), rel=1e-12)


@pytest.mark.parametrize("l, p, v, m", [(96, 8, 1, 2), (96, 8, 1, 7), (80, 4, 5, 1), (96, 16, 2, 3)])
def test_in_flight_capped_by_micro_batches(l, p, v, m):
    """With fewer micro-batches than the schedule's warm-up, only m micro-batches of l/p layers exist."""
    assert m < p
    assert float(in_flight_layers(l, p, v, n_micro=m)) == pytest.approx(l / p * m, rel=1e-12)


def test_in_flight_layers_never_exceed_interleaved_bound_and_grow_with_micro_batches():
    l, p, v = 96, 8, 2
    m = np.arange(1, 40)
    out = in_flight_layers(l, p, v, m)
    assert np.all(np.diff(out) >= 0)
    assert np.all(out <= l * (1 + (p - 1) / (p * v)) + 1e-9)


# ---- ZeRO model states -------------------------------------------------------------------------
def test_mixed_precision_adam_is_16_bytes_per_param_with_16bit_grads():
    """ZeRO paper Sec. 3.1: 2 (fp16 weights) + 2 (fp16 grads) + 12 (fp32 master, momentum, variance)."""
    w, g, o = model_state_bytes(1.0, 1, 0, grad_bytes_per_param=2.0)
    assert float(w + g + o) == pytest.approx(16.0)


def test_fp32_main_grads_are_18_bytes_per_param():
    """Megatron keeps fp32 main gradients: 2 + 4 + 12 = 18 bytes per parameter."""
    w, g, o = model_state_bytes(1.0, 1, 0, grad_bytes_per_param=4.0)
    assert float(w + g + o) == pytest.approx(18.0)


@pytest.mark.parametrize("d", [1, 2, 8, 64])
def test_megatron_distributed_optimizer_table(d):
    """Megatron Core "Distributed Optimizer" bytes per parameter at the optimizer step: fp16 param /
    fp16 grads 20 (4 + 16/d distributed: the step's fp32 copy of the main grads), fp16 param / fp32 grads
    18 (6 + 12/d): the grads are fp32 already and no copy is made."""
    for grad_bytes, plain, dist in ((2.0, 20.0, 4.0 + 16.0 / d), (4.0, 18.0, 6.0 + 12.0 / d)):
        for stage, expected in ((0, plain), (1, dist)):
            w, g, o = model_state_bytes(1.0, d, stage, grad_bytes)
            assert float(w + g + o + fp32_grad_copy_bytes(1.0, d, stage, grad_bytes)) == pytest.approx(expected)


def test_the_fp32_grad_copy_is_the_optimizer_shard_and_one_sub_group_under_zero3():
    """ZeRO-1/2 upcast the optimizer's whole shard (Psi / d); DeepSpeed's stage-3 step upcasts one
    sub-group at a time (sub_group_size 1e9 by default) and frees it before the next (a review finding:
    405B on 144 GPUs was costed 4 x 2.8e9 bytes, not 4 x 1e9). fp32 gradients need no copy."""
    psi = 4.0e11
    for stage, d, expected in ((0, 144, 4 * psi), (1, 144, 4 * psi / 144), (2, 8, 4 * psi / 8), (3, 144, 4e9),
                               (3, 1024, 4 * psi / 1024)):
        assert float(fp32_grad_copy_bytes(psi, d, stage, 2.0)) == pytest.approx(expected), (stage, d)
        assert float(fp32_grad_copy_bytes(psi, d, stage, 4.0)) == 0.0


def test_the_step_peak_holds_the_larger_of_activations_and_the_fp32_grad_copy():
    """The fp32 copy lives during the optimizer step, after the activations are freed: GPT-3 13B, fp16,
    Megatron-LM, TP 8 x DP 8 without the distributed optimizer (1.6e9 parameters a GPU). With full
    recompute and one sequence the activations (1.1 GiB) are a fraction of the copy (6 GiB): the peak
    holds the copy instead, and the 32 GB V100 no longer holds the job (the Megatron docs' 20 bytes a
    parameter: 30 GiB of model states); without recompute at micro-batch 4 the activations exceed the copy
    and the peak keeps them. bf16 keeps fp32 main grads: no copy (18 bytes)."""
    import perfmodel as pm

    m = pm.load_model("gpt3-13b")

    def mem(gpu, recompute, mb, precision="fp16"):
        job = pm.JobSpec(global_batch=64 * mb, seq_len=2048, precision=precision, framework="megatron-lm")
        par = pm.ParallelSpec(tp=8, dp=8, micro_batch=mb, sp=False, recompute=recompute, zero_stage=0)
        return pm.estimate(m, pm.ClusterSpec.build(pm.load_gpu(gpu), 64, 8), par, job)

    full = mem("v100-sxm3-32gb", "full", 1)
    b = full.memory_breakdown_gib
    copy = 2.0 * b["weights_gib"]                 # 4 bytes a parameter against the weights' 2
    assert b["activations_gib"] < copy
    assert b["optimizer_gib"] + b["activations_gib"] == pytest.approx(6.0 * b["weights_gib"] + copy, rel=1e-9)
    assert b["weights_gib"] + b["gradients_gib"] + b["optimizer_gib"] + b["activations_gib"] == pytest.approx(
        10.0 * b["weights_gib"], rel=1e-9)      # 20 bytes a parameter at the step
    assert not full.fits and full.memory_gib - (copy - b["activations_gib"]) < full.hbm_capacity_gib
    none = mem("v100-sxm3-32gb", "none", 4).memory_breakdown_gib
    assert none["activations_gib"] > copy and none["optimizer_gib"] == pytest.approx(6.0 * none["weights_gib"], rel=1e-12)
    bf16 = mem("a100-sxm4-40gb", "full", 1, "bf16").memory_breakdown_gib
    assert bf16["optimizer_gib"] == pytest.approx(6.0 * bf16["weights_gib"], rel=1e-12)
    assert bf16["gradients_gib"] == pytest.approx(2.0 * bf16["weights_gib"], rel=1e-12)


@pytest.mark.parametrize(
    "stage, published_gb",
    # ZeRO paper Table 1 / Fig. 1: 7.5B parameters, N_d = 64, K = 12
    [(0, 120.0), (1, 31.4), (2, 16.6), (3, 1.88)],
)
def test_zero_paper_7_5b_example(stage, published_gb):
    psi, nd = 7.5e9, 64
    w, g, o = model_state_bytes(psi, nd, stage, grad_bytes_per_param=2.0)
    assert float(w + g + o) / 1e9 == pytest.approx(published_gb, rel=0.01)


@pytest.mark.parametrize("grad_bytes", [2.0, 4.0])
@pytest.mark.parametrize("dp", [1, 2, 8, 64, 1000])
def test_zero_stage_closed_forms(grad_bytes, dp):
    psi = 1e9
    K = 12.0
    expected = {
        0: (2 + grad_bytes + K) * psi,
        1: (2 + grad_bytes) * psi + K * psi / dp,
        2: 2 * psi + (grad_bytes + K) * psi / dp,
        3: (2 + grad_bytes + K) * psi / dp,
    }
    totals = []
    for stage, total in expected.items():
        w, g, o = model_state_bytes(psi, dp, stage, grad_bytes)
        assert float(w + g + o) == pytest.approx(total, rel=1e-12)
        totals.append(float(w + g + o))
    assert all(a >= b for a, b in zip(totals, totals[1:]))


@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
def test_fp8_linear_inputs_kept_quantized(shape):
    """Transformer Engine keeps 1-byte copies of the four linear inputs: with SP, GPT's 34/t s b h
    becomes 27/t (QKV and first-MLP inputs 2 -> 1 each, projection input 2 -> 1, second-MLP input
    8 -> 4); a SwiGLU MLP saves s b ffn on its second input instead of 4 s b h."""
    s, b, h, a, t = shape
    kw = dict(flash_attention=0, dropout=1)
    bf16 = float(activation_bytes_per_layer(s, b, h, 4 * h, a, a, 2, t, 1, RECOMPUTE_SELECTIVE, **kw))
    fp8 = float(activation_bytes_per_layer(s, b, h, 4 * h, a, a, 2, t, 1, RECOMPUTE_SELECTIVE,
                                           quantized_inputs=1.0, **kw))
    assert bf16 == pytest.approx(34.0 * s * b * h / t)
    assert fp8 == pytest.approx(27.0 * s * b * h / t)
    ffn = 3.5 * h
    swiglu = [float(activation_bytes_per_layer(s, b, h, ffn, a, a // 4 or 1, 3, t, 1, RECOMPUTE_SELECTIVE,
                                               quantized_inputs=q, **kw)) for q in (0.0, 1.0)]
    assert swiglu[0] - swiglu[1] == pytest.approx((3.0 * s * b * h + s * b * ffn) / t)
    # full recompute keeps only the 16-bit layer input either way
    full = [float(activation_bytes_per_layer(s, b, h, 4 * h, a, a, 2, t, 1, RECOMPUTE_FULL, quantized_inputs=q,
                                             **kw)) for q in (0.0, 1.0)]
    assert full[0] == full[1] == pytest.approx(2.0 * s * b * h / t)
    # an nvfp4 copy is half a byte and an e4m3 scale per 16 elements: 2 - 0.5625 bytes saved an element
    nvfp4 = float(activation_bytes_per_layer(s, b, h, 4 * h, a, a, 2, t, 1, RECOMPUTE_SELECTIVE,
                                             quantized_inputs=2.0 - 0.5625, **kw))
    assert bf16 - nvfp4 == pytest.approx(1.4375 * (bf16 - fp8))


def test_the_step_keeps_nvfp4_inputs_at_their_own_width():
    """B200, same layer: the fp8 run keeps 1-byte linear inputs, the nvfp4 run 0.5625-byte ones."""
    import perfmodel as pm

    m, c = pm.load_model("llama3-8b"), pm.ClusterSpec.build(pm.load_gpu("b200"), 8, 8)
    par = pm.ParallelSpec(tp=2, dp=4, micro_batch=1, sp=True, recompute="selective")
    act = {p: pm.estimate(m, c, par, pm.JobSpec(global_batch=8, seq_len=8192, precision=p,
                                                framework="megatron-lm")).memory_breakdown_gib["activations_gib"]
           for p in ("bf16", "fp8", "nvfp4")}
    assert act["bf16"] - act["nvfp4"] == pytest.approx(1.4375 * (act["bf16"] - act["fp8"]), rel=1e-9)


def test_selective_recompute_counts_the_attention_it_rematerialises():
    """Korthikanti's selective recompute drops the attention core and re-runs it in each layer's backward:
    without flash attention that is one layer's s x s scores at the peak, so full recompute (2sbh kept, one
    layer re-materialised) never needs more activation memory than selective, nor selective more than none
    (a fuzzing review found full above selective: 94.5 vs 60.4 GiB for GPT-3 1.3B at 32K tokens)."""
    import perfmodel as pm

    m, c = pm.load_model("gpt3-1.3b"), pm.ClusterSpec.build(pm.load_gpu("a100-sxm4-80gb"), 8, 8)
    job = pm.JobSpec(global_batch=8, seq_len=32768, framework="deepspeed")  # no flash attention
    act = {r: pm.estimate(m, c, pm.ParallelSpec(dp=8, zero_stage=1, recompute=r), job).memory_breakdown_gib[
        "activations_gib"] for r in ("none", "selective", "full")}
    assert act["none"] >= act["selective"] >= act["full"]
