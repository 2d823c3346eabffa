"""Head dimensions that are not a multiple of 8 elements (16 bytes of fp16/bf16).

cuBLAS's batched GEMMs of plain (non-flash) attention lose their tensor-core kernels' aligned loads
and run at ``misaligned_bmm_efficiency`` of the aligned rate; flash-attention's interface (and
PyTorch SDPA) pads q, k and v to the next multiple of 8 and does the padded math; Transformer Engine
turns its flash and fused backends off for such heads (and above 256) and runs unfused attention.
"""
from __future__ import annotations

import pytest

import perfmodel
from perfmodel.calibration_profile import Calibration
from perfmodel.costs.compute import ATTN_HEAD_DIM_HALF
from perfmodel.estimate import step_outputs
from perfmodel.frameworks import framework_profile
from perfmodel.specs import ModelSpec


def _compute_s(n_heads: int, framework: str, hidden: int = 3456, **override) -> float:
    model = ModelSpec(name=f"h{hidden}-a{n_heads}", n_layers=4, hidden_size=hidden, ffn_hidden_size=4 * hidden,
                      n_heads=n_heads, n_kv_heads=n_heads, vocab_size=50304, mlp="gelu", tied_embeddings=True)
    cluster = perfmodel.ClusterSpec.build(perfmodel.load_gpu("a100-sxm4-80gb"), 8, 8)
    par = perfmodel.ParallelSpec(tp=1, pp=1, dp=8, micro_batch=2, recompute="none")
    job = perfmodel.JobSpec(global_batch=16, seq_len=4096, precision="bf16", framework=framework)
    return step_outputs(model, cluster, par, job, Calibration(), **override)["compute_s"]


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
    """flash-attn's own stack pads the heads (flash_pads_misaligned_heads)."""
    def attention_s(heads, **kw):
        return _compute_s(heads, "flash-attn", **kw) - _compute_s(heads, "flash-attn", attn_efficiency_max=1e12, **kw)

    assert framework_profile("flash-attn").flash_pads_misaligned_heads
    assert _compute_s(32, "flash-attn", misaligned_bmm_efficiency=0.1) == _compute_s(
        32, "flash-attn", misaligned_bmm_efficiency=1.0)

    def head(d):
        return d / (d + ATTN_HEAD_DIM_HALF)

    # d = 108 runs as d = 112 (padded): 112/108 the FLOPs at d = 112's rate, against d = 128
    assert attention_s(32) / attention_s(27) == pytest.approx((112 / 108) * head(128) / head(112), rel=1e-6)


@pytest.mark.parametrize("framework", ["megatron-lm", "nemo", "megatron-bridge"])
def test_transformer_engine_stacks_fall_back_to_unfused_attention(framework):
    """Transformer Engine's backend filter: flash needs head_dim % 8 == 0 and head_dim <= 256, cuDNN's
    fused attention head_dim % 8 == 0; otherwise UnfusedDotProductAttention (batched GEMMs)."""
    assert not framework_profile(framework).flash_pads_misaligned_heads
    # d = 108: costed exactly as the same stack with flash attention off
    assert _compute_s(32, framework) == _compute_s(32, framework, flash_attention=0.0)
    assert _compute_s(32, framework) > _compute_s(27, framework)  # d = 128 runs flash
    # d = 288 (> 256, aligned): unfused too, at the aligned rate
    assert _compute_s(12, framework) == _compute_s(12, framework, flash_attention=0.0)
    assert _compute_s(12, framework, misaligned_bmm_efficiency=0.1) == _compute_s(12, framework)
    # a padding stack keeps flash below 257 only
    assert _compute_s(32, "torchtitan") < _compute_s(32, "torchtitan", flash_attention=0.0)
    assert _compute_s(12, "torchtitan") == _compute_s(12, "torchtitan", flash_attention=0.0)


def test_blank_head_count_prefers_an_aligned_head_dimension():
    from perfmodel.runs import default_heads

    assert default_heads(1600, 1) == 10      # d = 160, not 16 heads of d = 100 (nearer 128)
    assert default_heads(4096, 8) == 32      # d = 128
    assert default_heads(1604, 1) == 4       # 1604 = 4 x 401: no aligned choice, the nearest misaligned one


def test_search_never_gives_transformer_engine_context_parallelism_with_a_misaligned_head():
    """No TE attention backend is left for cp > 1 when flash and fused attention refuse the head
    dimension (unfused attention has no context parallelism): the search rejects it with that reason,
    while a padding stack (torchtitan) may still use CP with the same model."""
    from perfmodel.search import enumerate_space, run_search

    model = ModelSpec(name="h3456-a32", n_layers=8, hidden_size=3456, ffn_hidden_size=4 * 3456, n_heads=32,
                      n_kv_heads=32, vocab_size=50304, mlp="gelu", tied_embeddings=True)
    cluster = perfmodel.ClusterSpec.build(perfmodel.load_gpu("h100-sxm5-80gb"), 16, 8)
    te = perfmodel.JobSpec(global_batch=16, seq_len=32768, framework="megatron-lm")
    space = enumerate_space(model, cluster, te)
    assert any("Transformer Engine" in r for r in space.rejected)
    found = run_search(model, cluster, te, top=50).candidates
    assert len(found) > 0 and (found.cp == 1).all()
    titan = perfmodel.JobSpec(global_batch=16, seq_len=32768, framework="torchtitan")
    assert not any("Transformer Engine" in r for r in enumerate_space(model, cluster, titan).rejected)
    assert (run_search(model, cluster, titan, top=50).candidates.cp > 1).any()


def test_estimate_says_when_the_stack_cannot_run_the_configuration(tmp_path):
    from typer.testing import CliRunner

    from perfmodel.cli import app

    model = tmp_path / "h3456_a32.yaml"
    model.write_text("name: h3456-a32\nn_layers: 8\nhidden_size: 3456\nffn_hidden_size: 13824\nn_heads: 32\n"
                     "n_kv_heads: 32\nvocab_size: 50304\nmlp: gelu\ntied_embeddings: true\n")
    args = ["estimate", "--model", str(model), "--gpu", "h100-sxm5-80gb", "--gpus", "16", "--global-batch", "16",
            "--seq-len", "32768", "--cp", "2"]
    te = CliRunner().invoke(app, args + ["--framework", "megatron-lm"])
    assert te.exit_code == 0, te.output
    assert "note: megatron-lm cannot run this configuration (cp with Transformer Engine" in te.output
    titan = CliRunner().invoke(app, args + ["--framework", "torchtitan", "--zero-stage", "3"])
    assert titan.exit_code == 0, titan.output
    assert "cannot run" not in titan.output
