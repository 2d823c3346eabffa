"""Head dimensions that are not a multiple of 8 elements (16 bytes of fp16/bf16).

cuBLAS's batched GEMMs of plain (non-flash) attention lose their tensor-core kernels' aligned loads
and run at ``misaligned_bmm_efficiency`` of the aligned rate; flash-attention pads q, k and v to the
next multiple of 8 (flash_attn_interface.py) and does the padded math.
"""
from __future__ import annotations

import numpy as np
import pytest

import perfmodel
from perfmodel.calibration_profile import Calibration
from perfmodel.costs.compute import ATTN_HEAD_DIM_HALF
from perfmodel.estimate import build_inputs
from perfmodel.specs import ModelSpec
from perfmodel.step import step_costs


def _compute_s(n_heads: int, framework: str, **override) -> float:
    model = ModelSpec(name=f"h3456-a{n_heads}", n_layers=4, hidden_size=3456, ffn_hidden_size=4 * 3456,
                      n_heads=n_heads, n_kv_heads=n_heads, vocab_size=50304, mlp="gelu", tied_embeddings=True)
    cluster = perfmodel.ClusterSpec.build(perfmodel.load_gpu("a100-sxm4-80gb"), 8, 8)
    par = perfmodel.ParallelSpec(tp=1, pp=1, dp=8, micro_batch=2, recompute="none")
    job = perfmodel.JobSpec(global_batch=16, seq_len=4096, precision="bf16", framework=framework)
    x = build_inputs(model, cluster, par, job, Calibration())
    x.update(override)
    return float(step_costs({k: np.asarray([v]) for k, v in x.items()})["compute_s"][0])


def test_plain_attention_with_a_misaligned_head_dim_runs_at_the_misaligned_rate():
    # 3456 / 32 = 108: misaligned; 3456 / 27 = 128: aligned (Megatron-DeepSpeed: no flash kernels)
    slow = [_compute_s(32, "megatron-deepspeed", misaligned_bmm_efficiency=e) for e in (0.1, 0.25, 1.0)]
    assert slow[0] > slow[1] > slow[2]
    # only the batched GEMMs' FLOP term scales: time(e) = rest + bmm / e
    bmm = (slow[0] - slow[2]) / (1 / 0.1 - 1)
    assert slow[1] == pytest.approx(slow[2] + bmm * (1 / 0.25 - 1), rel=1e-9)
    aligned = [_compute_s(27, "megatron-deepspeed", misaligned_bmm_efficiency=e) for e in (0.1, 1.0)]
    assert aligned[0] == aligned[1]


def test_flash_attention_pays_for_its_padding_not_the_misaligned_rate():
    def attention_s(heads, **kw):
        return _compute_s(heads, "megatron-lm", **kw) - _compute_s(heads, "megatron-lm", attn_efficiency_max=1e12, **kw)

    assert _compute_s(32, "megatron-lm", misaligned_bmm_efficiency=0.1) == _compute_s(
        32, "megatron-lm", misaligned_bmm_efficiency=1.0)

    def head(d):
        return d / (d + ATTN_HEAD_DIM_HALF)

    # d = 108 runs as d = 112 (padded): 112/108 the FLOPs at d = 112's rate, against d = 128
    assert attention_s(32) / attention_s(27) == pytest.approx((112 / 108) * head(128) / head(112), rel=1e-6)
