"""Parameter and FLOP counts against published numbers and the papers' closed forms.

Narayanan et al. 2021 (SC'21, arXiv 2104.04473): Table 1 models, eq. 2 (parameters) and eq. 3
(FLOPs per iteration with full recomputation). Llama counts: the parameter counts Hugging Face
reports for the released checkpoints.
"""
from __future__ import annotations

import numpy as np
import pytest

import perfmodel
from perfmodel.costs.flops import (
    attention_flops_per_token,
    layer_gemm_flops_per_token,
    logits_flops_per_token,
    megatron_eq3_flops_per_iteration,
    model_flops_per_token,
    parameter_count,
)

V_MEGATRON = 51200
S_MEGATRON = 2048

# Narayanan et al. 2021 Table 1: (parameters in billions, layers, hidden, heads, GPUs, batch,
# achieved TFLOP/s per GPU, aggregate PFLOP/s)
TABLE1 = [
    (1.7, 24, 2304, 24, 32, 512, 137, 4.4),
    (3.6, 30, 3072, 32, 64, 512, 138, 8.8),
    (7.5, 36, 4096, 32, 128, 512, 142, 18.2),
    (18.4, 40, 6144, 48, 256, 1024, 135, 34.6),
    (39.1, 48, 8192, 64, 512, 1536, 138, 70.8),
    (76.1, 60, 10240, 80, 1024, 1792, 140, 143.8),
    (145.6, 80, 12288, 96, 1536, 2304, 148, 227.1),
    (310.1, 96, 16384, 128, 1920, 2160, 155, 297.4),
    (529.6, 105, 20480, 128, 2520, 2520, 163, 410.2),
    (1008.0, 128, 25600, 160, 3072, 3072, 163, 502.0),
]
IDS = [f"{row[0]}B" for row in TABLE1]


def gpt_params(l, h, a):
    """parameter_count for a Megatron GPT of Table 1 (GELU, ffn=4h, tied, learned positions)."""
    return float(parameter_count(l, h, 4 * h, a, a, V_MEGATRON, 2, True, True, pos_emb_rows=S_MEGATRON))


def narayanan_eq2(l, h, V=V_MEGATRON, s=S_MEGATRON):
    return 12 * l * h**2 * (1 + 13 / (12 * h) + (V + s) / (12 * l * h))


def test_gpt3_175b_parameters_match_narayanan():
    n = perfmodel.load_model("gpt3-175b").n_params()
    assert n == pytest.approx(174.6e9, rel=5e-3)


@pytest.mark.parametrize("row", TABLE1, ids=IDS)
def test_table1_parameter_count(row):
    billions, l, h, a = row[:4]
    p = gpt_params(l, h, a)
    # Table 1 prints one decimal: the count must round to the printed value
    assert round(p / 1e9, 1) == pytest.approx(billions)
    if billions >= 7.5:  # the 0.05B print rounding is < 0.5% from here on
        assert p == pytest.approx(billions * 1e9, rel=5e-3)
    # eq. 2 plus one final LayerNorm (2h), which the closed form leaves out
    assert p == pytest.approx(narayanan_eq2(l, h), rel=1e-5)
    assert p - narayanan_eq2(l, h) == pytest.approx(2 * h, abs=1e-3 * h)


@pytest.mark.parametrize("row", TABLE1, ids=IDS)
def test_table1_flops_per_iteration_from_pieces_equal_eq3(row):
    _, l, h, a, _, B, _, _ = row
    s, V = S_MEGATRON, V_MEGATRON
    layer_fwd = layer_gemm_flops_per_token(h, 4 * h, a, a, 2) + attention_flops_per_token(h, s, causal=False)
    # forward + recomputed forward + backward (2x forward) = 4 forward passes per layer;
    # the logits are not recomputed: forward + backward = 3 passes
    per_token = 4 * l * layer_fwd + 3 * logits_flops_per_token(h, V)
    F = B * s * per_token
    eq3 = megatron_eq3_flops_per_iteration(B, s, l, h, V)
    assert float(F) == pytest.approx(float(eq3), rel=1e-9)
    # and eq. 3 written out independently
    assert float(eq3) == pytest.approx(96 * B * s * l * h**2 * (1 + s / (6 * h) + V / (16 * l * h)), rel=1e-12)


@pytest.mark.parametrize("row", TABLE1, ids=IDS)
def test_model_flops_plus_recompute_forward_equals_eq3(row):
    """MFU's model FLOPs (3 passes, no recompute) + one recomputed forward of the layers = eq. 3."""
    _, l, h, a, _, B, _, _ = row
    s, V = S_MEGATRON, V_MEGATRON
    model = model_flops_per_token(l, h, 4 * h, a, a, V, 2, s, causal=False)
    recompute = l * (layer_gemm_flops_per_token(h, 4 * h, a, a, 2) + attention_flops_per_token(h, s, causal=False))
    assert float(B * s * (model + recompute)) == pytest.approx(
        float(megatron_eq3_flops_per_iteration(B, s, l, h, V)), rel=1e-9
    )


@pytest.mark.parametrize("row", TABLE1, ids=IDS)
def test_table1_achieved_throughput_gives_plausible_iteration_time(row):
    """eq. 3 FLOPs / (achieved TFLOP/s x GPUs) is a plausible step (seconds to a minute), and
    the per-GPU and aggregate throughput of Table 1 agree (3% for the rounding in the table)."""
    _, l, h, _, gpus, B, tflops, agg_pflops = row
    F = float(megatron_eq3_flops_per_iteration(B, S_MEGATRON, l, h, V_MEGATRON))
    t = F / (tflops * 1e12 * gpus)
    assert 1.0 < t < 120.0
    assert tflops * gpus / 1e3 == pytest.approx(agg_pflops, rel=0.03)


def test_layer_gemm_flops_gpt_is_24h2():
    h = np.array([1024.0, 4096.0, 12288.0])
    np.testing.assert_allclose(layer_gemm_flops_per_token(h, 4 * h, 16, 16, 2), 24 * h**2, rtol=1e-12)


def test_causal_attention_halves_flops():
    full = attention_flops_per_token(4096, 8192, causal=False)
    assert float(full) == pytest.approx(4 * 8192 * 4096)
    assert float(attention_flops_per_token(4096, 8192, causal=True)) == pytest.approx(float(full) / 2)


def test_gqa_and_swiglu_gemm_flops_closed_form():
    # Llama-3 70B: h=8192, 64 heads, 8 kv heads (head_dim 128), ffn 28672, SwiGLU
    h, ffn, a, kv = 8192, 28672, 64, 8
    hd = h // a
    expected = 2 * (h * (a * hd) + 2 * h * (kv * hd) + (a * hd) * h + 3 * h * ffn)
    assert float(layer_gemm_flops_per_token(h, ffn, a, kv, 3)) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(
    "name, published",
    [
        ("llama2-7b", 6.74e9),       # HF meta-llama/Llama-2-7b-hf: 6,738,415,616
        ("llama3-8b", 8.03e9),       # HF meta-llama/Meta-Llama-3-8B: 8,030,261,248
        ("llama3-70b", 70.6e9),      # HF meta-llama/Meta-Llama-3-70B: 70,553,706,496
        ("llama3.1-405b", 405.9e9),  # HF meta-llama/Llama-3.1-405B: 405,853,388,800
    ],
)
def test_llama_parameter_counts(name, published):
    assert perfmodel.load_model(name).n_params() == pytest.approx(published, rel=1e-2)


def test_llama2_7b_exact_hf_count():
    """Llama-2-7B has no biases, RMSNorm gamma only, untied embeddings: the HF count is exact."""
    assert perfmodel.load_model("llama2-7b").n_params() == 6_738_415_616


def test_parameter_count_broadcasts_over_arrays():
    l = np.array([24, 96])
    h = np.array([2304, 12288])
    a = np.array([24, 96])
    out = parameter_count(l, h, 4 * h, a, a, V_MEGATRON, 2, True, True, pos_emb_rows=S_MEGATRON)
    assert out.shape == (2,)
    assert out[0] == pytest.approx(gpt_params(24, 2304, 24), rel=1e-12)
    assert out[1] == pytest.approx(gpt_params(96, 12288, 96), rel=1e-12)


def _per_microbatch_s(n_layers, pp, vocab=250880, recompute="none"):
    """Busiest stage's compute per micro-batch (s) of a BLOOM-like model, from one estimate."""
    import perfmodel as pm

    model = pm.ModelSpec(name="b", n_layers=n_layers, hidden_size=14336, ffn_hidden_size=4 * 14336, n_heads=112,
                         n_kv_heads=112, vocab_size=vocab, mlp="gelu", tied_embeddings=True)
    cluster = pm.ClusterSpec.build(pm.load_gpu("a100-sxm4-80gb"), 4 * pp)
    job = pm.JobSpec(global_batch=64, seq_len=2048, framework="megatron-deepspeed")
    par = pm.ParallelSpec(tp=4, pp=pp, dp=1, micro_batch=1, recompute=recompute)
    est = pm.estimate(model, cluster, par, job)
    return (est.time_breakdown_s["compute_s"] + est.time_breakdown_s["recompute_s"]) / 64


def test_pipeline_split_counting_embedding_and_loss_as_layers():
    """BLOOM (70 layers, pp 12, --pp-partition-method 'type:transformer|embedding'): 72 / 12 = 6
    units per stage, the last one 5 layers + the 250K-vocabulary logits, the middle ones 6 layers.
    Without recompute the head outweighs a layer, so the last stage sets the pace: one layer fewer
    than ceil(70 / 12) = 6 layers + logits."""
    bloom = _per_microbatch_s(70, 12)
    assert bloom == pytest.approx(_per_microbatch_s(60, 12), rel=1e-9)   # 5 layers + logits
    assert bloom < _per_microbatch_s(72, 12)                            # 6 layers + logits
    # a small vocabulary: the head is lighter than a layer, a middle stage of 6 layers sets the pace
    small = _per_microbatch_s(70, 12, vocab=1024)
    assert _per_microbatch_s(60, 12, vocab=1024) < small < _per_microbatch_s(72, 12, vocab=1024)
    # full recompute makes a layer 4 forward passes against the head's 3: never above 6 layers + head
    assert _per_microbatch_s(60, 12, recompute="full") <= _per_microbatch_s(70, 12, recompute="full") \
        < _per_microbatch_s(72, 12, recompute="full")
