"""Low-precision GEMMs pay for their operands' casts (Transformer Engine): every linear's input in the
forward and every linear's output gradient in the backward is cast and transposed. A local operand takes
one fused cast + transpose pass (read 2 bytes, write 2 copies); an operand sequence parallelism gathers is
cast on its shard (read 2, write 1) and transposed after the gather, in the backward (read 1, write 1).
fp8 copies are 1 byte an element, nvfp4 ones half a byte and an e4m3 scale per 16 elements."""
from __future__ import annotations

import pytest

import perfmodel
import perfmodel.step as step
from perfmodel.calibration_profile import Calibration
from perfmodel.estimate import build_inputs, step_outputs

# bytes a token, one layer, worked out by hand from the rules above
CASES = {
    # gpt3-1.3b (h 2048, ffn 8192, MHA, GELU), TP 2 with SP, fp8: forward 2 gathered inputs x 3 B x h/2 +
    # 4 B x (h + ffn)/2; backward 2 x 2 B x h (their transposes) + 2 gathered gradients x (3 B x h/2 + 2 B x h)
    # + 4 B x (3h + ffn)/2
    "sp-fp8": ("gpt3-1.3b", "h100-sxm5-80gb", "fp8", 2, True, 6144 + 20480, 8192 + 14336 + 28672),
    # llama3-8b (h 4096, ffn 14336, 8 of 32 KV heads: 1024 KV width, SwiGLU), TP 2 without SP, fp8: forward
    # 2 x 4 B x h + 4 B x (h + ffn)/2; backward 2 x 4 B x h + 4 B x ((h + 2 x 1024) + 2 ffn)/2
    "gqa-swiglu-fp8": ("llama3-8b", "h100-sxm5-80gb", "fp8", 2, False, 32768 + 36864, 32768 + 69632),
    # gpt3-1.3b, TP 1, nvfp4 on B200: 2 + 2 x 0.5625 = 3.125 B an element; forward 3.125 x (2h + h + ffn),
    # backward 3.125 x (2h + 3h + ffn)
    "fp4": ("gpt3-1.3b", "b200", "nvfp4", 1, False, 3.125 * (3 * 2048 + 8192), 3.125 * (5 * 2048 + 8192)),
}


def _specs(model_name, gpu, precision, tp, sp, recompute="none"):
    model = perfmodel.load_model(model_name)
    cluster = perfmodel.ClusterSpec.build(perfmodel.load_gpu(gpu), 8, 8)
    par = perfmodel.ParallelSpec(tp=tp, pp=1, dp=8 // tp, micro_batch=2, sp=sp, recompute=recompute)
    job = perfmodel.JobSpec(global_batch=32, seq_len=2048, precision=precision, framework="megatron-lm")
    return model, cluster, par, job


def _without_casts(monkeypatch, *specs):
    monkeypatch.setattr(step, "CAST_READ_BYTES", 0.0)
    monkeypatch.setattr(step, "FP8_ELEMENT_BYTES", 0.0)
    monkeypatch.setattr(step, "FP4_ELEMENT_BYTES", 0.0)
    out = step_outputs(*specs, Calibration())
    monkeypatch.undo()
    return out


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("recompute", ["none", "full"])
def test_cast_bytes_per_token_are_the_hand_worked_ones(monkeypatch, case, recompute):
    model_name, gpu, precision, tp, sp, fwd_bytes, bwd_bytes = CASES[case]
    specs = _specs(model_name, gpu, precision, tp, sp, recompute)
    model = specs[0]
    x = build_inputs(*specs, Calibration())
    with_casts = step_outputs(*specs, Calibration())
    without = _without_casts(monkeypatch, *specs)
    tokens, n_micro = 2 * 2048.0, 32 / ((8 // tp) * 2)
    rate = x["hbm_bytes_per_s"] * x["hbm_efficiency"] * x["kernel_efficiency"]
    per_layer_s = tokens / rate
    assert with_casts["compute_s"] - without["compute_s"] == pytest.approx(
        n_micro * model.n_layers * (fwd_bytes + bwd_bytes) * per_layer_s, rel=1e-9)
    recast = fwd_bytes if recompute == "full" else 0.0  # full recompute re-runs the forward's casts
    assert with_casts["recompute_s"] - without["recompute_s"] == pytest.approx(
        n_micro * model.n_layers * recast * per_layer_s, rel=1e-9, abs=1e-15)


def test_bf16_pays_no_cast_and_the_casts_weigh_less_on_wider_models(monkeypatch):
    specs = _specs("gpt3-1.3b", "h100-sxm5-80gb", "bf16", 2, True)
    assert step_outputs(*specs, Calibration())["compute_s"] == _without_casts(monkeypatch, *specs)["compute_s"]

    def cast_share(name: str) -> float:
        s = _specs(name, "h100-sxm5-80gb", "fp8", 2, True)
        full = step_outputs(*s, Calibration())["compute_s"]
        return (full - _without_casts(monkeypatch, *s)["compute_s"]) / full

    # the casts move O(h) bytes a token against O(h^2) GEMM FLOPs
    assert cast_share("gpt3-1.3b") > cast_share("gpt3-13b") > 0.0
