"""Low-precision GEMMs pay for their casts: Transformer Engine casts every linear's input (forward) and
every linear's output gradient (backward) to fp8 in one fused cast + transpose pass, 2 bytes read and
2 x 1 byte written per element (transformer_engine/common/transpose/cast_transpose)."""
from __future__ import annotations

import pytest

import perfmodel
import perfmodel.step as step
from perfmodel.calibration_profile import Calibration
from perfmodel.estimate import build_inputs, step_outputs


def _specs(precision: str, recompute: str):
    model = perfmodel.load_model("gpt3-1.3b")  # h 2048, ffn 8192, 16 heads, 24 layers, GELU
    cluster = perfmodel.ClusterSpec.build(perfmodel.load_gpu("h100-sxm5-80gb"), 8, 8)
    par = perfmodel.ParallelSpec(tp=2, pp=1, dp=4, micro_batch=2, sp=True, recompute=recompute)
    job = perfmodel.JobSpec(global_batch=16, seq_len=2048, precision=precision, framework="megatron-lm")
    return model, cluster, par, job


@pytest.mark.parametrize("recompute, forward_passes", [("none", 1), ("full", 2)])
def test_fp8_cast_time_is_four_bytes_per_cast_element(monkeypatch, recompute, forward_passes):
    model, cluster, par, job = _specs("fp8", recompute)
    x = build_inputs(model, cluster, par, job, Calibration())
    with_casts = step_outputs(model, cluster, par, job, Calibration())
    monkeypatch.setattr(step, "FP8_CAST_BYTES", 0.0)
    without = step_outputs(model, cluster, par, job, Calibration())
    h, ffn, t = 2048.0, 8192.0, 2.0
    fwd = 2 * h / t + h / t + ffn / t                 # QKV and MLP-up inputs (SP-sharded), proj, MLP-down
    bwd = 3 * h / t + 2 * h / t + ffn / t             # output gradients: QKV (MHA), proj, MLP-down, MLP-up
    tokens, n_micro, layers = 2 * 2048.0, 16 / (4 * 2), 24
    rate = x["hbm_bytes_per_s"] * x["hbm_efficiency"] * x["kernel_efficiency"]
    per_mb = layers * 4.0 * tokens * (fwd + bwd) / rate
    recompute_extra = (forward_passes - 1) * layers * 4.0 * tokens * fwd / rate  # full recompute re-casts
    assert with_casts["compute_s"] - without["compute_s"] == pytest.approx(n_micro * per_mb, rel=1e-9)
    assert with_casts["recompute_s"] - without["recompute_s"] == pytest.approx(n_micro * recompute_extra,
                                                                             rel=1e-9, abs=1e-15)


def test_bf16_pays_no_cast_and_the_casts_weigh_less_on_wider_models(monkeypatch):
    model, cluster, par, job = _specs("bf16", "none")
    before = step_outputs(model, cluster, par, job, Calibration())["compute_s"]
    monkeypatch.setattr(step, "FP8_CAST_BYTES", 0.0)
    assert step_outputs(model, cluster, par, job, Calibration())["compute_s"] == before
    monkeypatch.undo()

    def cast_share(name: str) -> float:
        m = perfmodel.load_model(name)
        _, cl, p, j = _specs("fp8", "none")
        full = step_outputs(m, cl, p, j, Calibration())["compute_s"]
        monkeypatch.setattr(step, "FP8_CAST_BYTES", 0.0)
        bare = step_outputs(m, cl, p, j, Calibration())["compute_s"]
        monkeypatch.undo()
        return (full - bare) / full

    # the cast moves O(h) bytes a token against O(h^2) GEMM FLOPs
    assert cast_share("gpt3-1.3b") > cast_share("gpt3-13b") > 0.0
