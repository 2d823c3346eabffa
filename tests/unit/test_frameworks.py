"""Framework profiles: fused element-wise work (flash-attention's training stack)."""
from __future__ import annotations

import numpy as np
import pytest

import perfmodel
from perfmodel.calibration_profile import Calibration
from perfmodel.constants import DEFAULT_CONSTANTS
from perfmodel.estimate import build_inputs
from perfmodel.frameworks import framework_profile
from perfmodel.step import step_costs


def _compute_s(framework: str, **override) -> float:
    model = perfmodel.load_model("gpt3-1.3b")
    cluster = perfmodel.ClusterSpec.build(perfmodel.load_gpu("a100-sxm4-80gb"), 8, 8)
    par = perfmodel.ParallelSpec(tp=1, pp=1, dp=8, micro_batch=4, recompute="none")
    job = perfmodel.JobSpec(global_batch=32, seq_len=2048, precision="bf16", framework=framework)
    x = build_inputs(model, cluster, par, job, Calibration())
    x.update(override)
    return float(step_costs({k: np.asarray([v]) for k, v in x.items()})["compute_s"][0])


def test_flash_attn_stack_fuses_its_element_wise_work():
    """dropout_add_layer_norm: 4 passes per sublayer, 8 per layer, against the unfused 16; GELU in the
    fused_dense epilogue: no pass over the s b ffn tensor. Everything else is the generic profile's."""
    fa = framework_profile("flash-attn")
    assert fa.elementwise_passes_per_h == 8.0 and fa.mlp_activation_in_gemm
    assert framework_profile("megatron-lm").elementwise_passes_per_h == 0.0  # the shared constant
    unfused = _compute_s("flash-attn", elementwise_passes_per_h=0.0, mlp_activation_in_gemm=0.0)
    fused = _compute_s("flash-attn")
    assert fused < unfused
    # saved time is linear in the passes removed: 16 -> 8 per h, and the activation pass separately
    half = _compute_s("flash-attn", elementwise_passes_per_h=8.0, mlp_activation_in_gemm=0.0)
    quarter = _compute_s("flash-attn", elementwise_passes_per_h=4.0, mlp_activation_in_gemm=0.0)
    assert (unfused - quarter) == pytest.approx(1.5 * (unfused - half), rel=1e-9)
    assert DEFAULT_CONSTANTS.elementwise_bytes_per_h == 16.0
