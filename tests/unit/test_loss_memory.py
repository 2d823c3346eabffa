"""The loss's logits at the activations' peak: bytes per vocabulary logit by stack (FrameworkProfile
.loss_bytes_per_logit), from each stack's cross-entropy code."""
from __future__ import annotations

import numpy as np
import pytest

from perfmodel.catalog import load_gpu, load_model
from perfmodel.estimate import build_inputs
from perfmodel.frameworks import framework_profile
from perfmodel.specs import ClusterSpec, JobSpec, ParallelSpec
from perfmodel.step import step_costs
from perfmodel.units import GIB_BYTES


@pytest.mark.parametrize("framework, expected", [
    ("megatron-lm", 6.0),   # bf16 logits + one fp32 copy worked on in place (.float(), sub_, exp out=)
    ("nemo", 6.0),
    ("nanotron", 10.0),     # sharded_cross_entropy: .to(fp32), then logits - max out of place
    ("torchtitan", 10.0),   # F.cross_entropy(pred.float()): fp32 copy + fp32 log-softmax saved
])
def test_loss_bytes_per_logit_by_stack(framework, expected):
    assert framework_profile(framework).loss_bytes_per_logit == expected


@pytest.mark.parametrize("pp", [1, 2])
def test_logits_memory_is_bytes_per_logit_times_tokens_times_vocab_over_tp(pp):
    """Raising the bytes per logit by 4 adds 4 b s V / t to the activations (last stage with a pipeline),
    nothing else: Llama-3 8B (V 128,256), tp 2, micro-batch 2 of 4,096 tokens."""
    model = load_model("llama3-8b")
    cluster = ClusterSpec.build(load_gpu("h100-sxm5-80gb"), 16, 8, 3200.0)
    par = ParallelSpec(tp=2, pp=pp, dp=8 // pp, micro_batch=2, sp=True, zero_stage=1, recompute="full")
    job = JobSpec(global_batch=64, seq_len=4096, precision="bf16", framework="nanotron")
    x = build_inputs(model, cluster, par, job)
    out = {}
    for b in (6.0, 10.0):
        out[b] = step_costs({k: np.atleast_1d(v) for k, v in {**x, "loss_bytes_per_logit": b}.items()})
    extra_gib = 4.0 * 2 * 4096 * model.vocab_size / 2 / GIB_BYTES
    assert out[10.0]["activations_gib"][0] - out[6.0]["activations_gib"][0] == pytest.approx(extra_gib, rel=1e-9)
    assert out[10.0]["iteration_time_s"][0] == out[6.0]["iteration_time_s"][0]
    assert x["loss_bytes_per_logit"] == 10.0
