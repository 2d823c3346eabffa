"""The step model's kernel-level constants against kernels measured on a real NVIDIA H200.

calibration/data/kernels_h200/ holds what ``calibration/collect/one_gpu_session.sh`` measured on one
H200 SXM (700 W, PyTorch 2.11, cuDNN 9.19; PROVENANCE.md): GEMM sweeps of Llama-3 layer shapes,
causal SDPA sweeps (FlashAttention-2 and cuDNN backends), an 8192^3 GEMM kept busy for 30 s,
memory-bound kernels and fused AdamW, and torch.profiler traces of one layer. None of it is
fitted into the shipped profile; these tests hold the profile's numbers to it.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from perfmodel.calibrate.command import fit_gemm
from perfmodel.calibrate.parsers import parse_gemm_csv, parse_kineto_trace
from perfmodel.catalog import load_gpu
from perfmodel.constants import DEFAULT_CONSTANTS as C
from perfmodel.costs.compute import elementwise_time_s, flash_attention_efficiency, gemm_time_s

DATA = Path(__file__).resolve().parents[2] / "calibration" / "data" / "kernels_h200"
GEMM_FILES = ("gemm_llama3-8b_tp1.csv", "gemm_llama3-70b_tp8.csv", "gemm_llama3-405b_tp8.csv")
H200 = load_gpu("h200-sxm-141gb")
PEAK_BF16 = H200.peak_flop_per_s("bf16")


@pytest.fixture(scope="module")
def gemms() -> pd.DataFrame:
    return pd.concat([parse_gemm_csv(DATA / f) for f in GEMM_FILES], ignore_index=True)


def _layer(gemms: pd.DataFrame, dtype: str) -> pd.DataFrame:
    return gemms[(gemms.op != "grid") & (gemms.dtype == dtype)]


def test_files_say_they_were_measured_on_an_h200():
    for f in [*GEMM_FILES, "attention_flash.csv", "attention_cudnn.csv", "memory.csv", "sustained_gemm.csv"]:
        first = (DATA / f).read_text().splitlines()[0]
        assert first.startswith("# source: perfmodel calibration/collect/") and "device=NVIDIA H200" in first, f


def test_best_layer_gemm_is_the_profiles_best_shape_rate(gemms):
    """matmul_efficiency_max is a best-shape rate (MAMF, stas00's H100 row: 794.5 / 989.4): the best
    bf16 layer GEMM measured on the H200 reaches 790 TFLOP/s, within 1% of it; fp8's best, 1,373
    TFLOP/s (0.694), is within 6% of the profile's 0.734 (a brute-force MAMF search finds more)."""
    best16 = _layer(gemms, "bf16").tflop_per_s.max() * 1e12 / PEAK_BF16
    assert best16 == pytest.approx(H200.matmul_efficiency_max, rel=0.01)
    best8 = _layer(gemms, "fp8").tflop_per_s.max() * 1e12 / H200.peak_flop_per_s("fp8")
    assert best8 < H200.fp8_matmul_efficiency_max
    assert best8 == pytest.approx(H200.fp8_matmul_efficiency_max, rel=0.06)


def test_step_gemm_rate_predicts_the_measured_layer_gemms(gemms):
    """The step model runs a training GEMM at matmul_efficiency_max x matmul_training_efficiency of
    peak (0.683 on an H200) through the wave-quantized roofline: the 41 distinct bf16 Llama-3 layer GEMM shapes
    (8B, 70B and 405B shapes at 8,192 tokens) come out within 5% in the median (+3.9%, slower),
    none off by more than 25%."""
    b = _layer(gemms, "bf16")
    eff = H200.matmul_efficiency_max * C.matmul_training_efficiency
    err = gemm_time_s(b.m, b.n, b.k, PEAK_BF16, eff, H200.n_sms, H200.hbm_bandwidth_bytes_per_s) / b.time_s - 1
    assert len(b) >= 40
    assert np.median(np.abs(err)) < 0.07 and abs(np.median(err)) < 0.06
    assert np.abs(err).max() < 0.25


def test_calibrate_gemm_estimates_the_best_shape_rate_and_keeps_the_end_to_end_error(gemms, tmp_path):
    """``perfmodel calibrate --gemm`` over the three sweeps estimates the best-shape rate 0.812 (the
    profile's 0.803 is stas00's H100 MAMF); under it, x 0.85 for training GEMMs, the layer shapes are
    predicted with median error < 7% (5.9%), and the 13 whole training steps measured on the same H200 stay
    at 6.0% MAPE (the shipped profile: 5.9%). A least-squares fit through the middle of the shapes (0.705,
    what calibrate wrote before) makes them 8.6%: the shapes' shortfall from the best one counted twice.
    (10.7%, 11.2% and 17.5% with the fixed 50 ms a step every stack carried until 2026-12-02; 9.4%, 9.8% and
    15.8% while the generic kernel efficiency these steps run at was 0.953; see below.)"""
    from perfmodel.calibrate.parsers import read_runs_csv
    from perfmodel.calibration_profile import load_calibration
    from perfmodel.validate import error_table, predict_runs

    effs, errs = fit_gemm(gemms, H200)
    assert effs["matmul_efficiency_max"] == pytest.approx(H200.matmul_efficiency_max, rel=0.03)
    assert effs["fp8_matmul_efficiency_max"] == pytest.approx(H200.fp8_matmul_efficiency_max, rel=0.06)  # 0.700
    assert np.nanmedian(errs.abs_err_pct) < 7.0
    runs = read_runs_csv(DATA / "train_steps.csv")
    base = load_calibration(None)
    mape = {}
    for name, value in (("best-shape", effs["matmul_efficiency_max"]), ("least-squares", 0.705)):
        gpus = {**base.gpus, "h200-sxm-141gb": {**base.gpus.get("h200-sxm-141gb", {}), "matmul_efficiency_max": value}}
        mape[name] = error_table(runs, predict_runs(runs, base.model_copy(update={"gpus": gpus})))[1]["mape_pct"]
    assert mape["best-shape"] < 7.0 < mape["least-squares"]


def test_sustained_gemm_rate_is_the_training_efficiency():
    """Kept busy, the 700 W H200 lowers its SM clock (1,980 MHz boost -> 1,440) and an 8192^3 bf16 GEMM
    settles at 653 TFLOP/s: 0.83 of the best measured shape, 0.82 of the profile's best-shape rate, where
    the step model assumes 0.85 for training GEMMs ('clock throttling under sustained load'); the first batch after idle is not counted."""
    df = pd.read_csv(DATA / "sustained_gemm.csv", comment="#")
    settled = df[df.t_s > 2.0]
    assert settled.t_s.max() > 25 and len(settled) > 100
    rate = settled.tflop_per_s.median() * 1e12 / PEAK_BF16
    assert rate / H200.matmul_efficiency_max == pytest.approx(C.matmul_training_efficiency, abs=0.04)
    assert settled.sm_clock_mhz.median() < 0.8 * 1980  # power-capped, not at boost


def test_fp8_gemm_speedup_matches_the_profile(gemms):
    """fp8 over bf16 on the same layer shapes: 1.78x measured (median), 2 x 0.734 / 0.803 = 1.83x modelled."""
    pair = pd.merge(_layer(gemms, "bf16"), _layer(gemms, "fp8"), on=["m", "n", "k", "op"], suffixes=("_16", "_8"))
    measured = float((pair.time_s_16 / pair.time_s_8).median())
    modelled = 2.0 * H200.fp8_matmul_efficiency_max / H200.matmul_efficiency_max
    assert len(pair) >= 40 and measured == pytest.approx(modelled, rel=0.05)


def _attention(backend: str) -> pd.DataFrame:
    df = pd.read_csv(DATA / f"attention_{backend}.csv", comment="#")
    return df[(df.direction == "fwd+bwd") & (df.causal == "yes")]


def test_flash_attention_ramp_and_head_dim_against_fa2_on_h200():
    """flash_attention_efficiency with the H200 profile's 0.33 (the FlashAttention-2 H100 figure) and
    attn_seq_half 512 against PyTorch's FlashAttention-2 backend on the H200, fwd+bwd, causal: within
    10% from 4K tokens on (head dim 128: the model 1.5-8.5% fast; 64: -0.1 to 6.5%), faster than measured below (25% at 512:
    the measured ramp's half point is ~740 tokens, the published H100 curve's ~530). Head dim 64 over
    128: 0.91 measured, 0.89 modelled (ATTN_HEAD_DIM_HALF)."""
    fa = _attention("flash")
    for d in (64, 128):
        x = fa[fa.head_dim == d]
        model = flash_attention_efficiency(x.seq_len, H200.attention_efficiency_max, C.attn_seq_half, d) * PEAK_BF16
        rel = model / (x.tflop_per_s.to_numpy() * 1e12) - 1
        long = x.seq_len.to_numpy() >= 4096
        assert np.all(np.abs(rel[long]) < 0.10), (d, rel)
        assert np.all(rel[~long] > 0)  # short sequences: the model is optimistic, and says so above
    at16k = fa[fa.seq_len == 16384].set_index("head_dim").tflop_per_s
    model_ratio = (flash_attention_efficiency(16384, 1.0, C.attn_seq_half, 64)
                   / flash_attention_efficiency(16384, 1.0, C.attn_seq_half, 128))
    assert at16k[64] / at16k[128] == pytest.approx(model_ratio, abs=0.04)


def test_cudnn_attention_is_faster_than_the_fa2_figure():
    """cuDNN's fused attention, which TransformerEngine prefers on Hopper (get_attention_backend:
    'Disabling FlashAttention to give FusedAttention preference on Hopper+ for performance reasons') and
    PyTorch 2.11's SDPA picks on its own (the layer traces' attention kernels are cudnn_generated_fort_native_sdpa),
    runs fwd+bwd at 0.50-0.54 of peak from 4K tokens (head dim 128), 1.5-1.9x PyTorch's FlashAttention-2
    (which is within 10% of the figure the profile holds). The runs fit keeps the difference in the stacks' kernel efficiency (NeMo's long-sequence rows,
    attention-bound, are predicted within 1.2% with it), so the profile keeps the FA2 figure."""
    cu, fa = _attention("cudnn"), _attention("flash")
    long = cu[(cu.seq_len >= 4096) & (cu.head_dim == 128)].tflop_per_s * 1e12 / PEAK_BF16
    assert long.between(0.45, 0.6).all()
    speedup = cu.set_index(["seq_len", "head_dim"]).tflop_per_s / fa.set_index(["seq_len", "head_dim"]).tflop_per_s
    assert speedup.between(1.45, 1.9).all()
    assert (long > H200.attention_efficiency_max * 1.4).all()


def test_layer_trace_uses_cudnn_attention_and_its_gemms_match_the_sweep():
    """The profiled Llama-3 8B layer (8K tokens, fwd+bwd): 36 GEMM kernels (12 per step: 4 linears x
    fwd, dgrad, wgrad) doing 10.7 TFLOP per step in 13.8 ms (777 TFLOP/s, interleaved with memory-bound
    kernels the GPU holds its clock); the step model's GEMM time for them is within 20% (slower: it
    costs sustained load); the attention kernels are cuDNN's."""
    s = parse_kineto_trace(DATA / "layer_llama3-8b_s8192.json")
    steps = len(s.step_time_s)
    assert steps == 3 and s.kernel_count["gemm"] == 12 * steps and s.kernel_count["nccl"] == 0
    h, ffn, q, kv, d, tokens = 4096, 14336, 32, 8, 128, 8192
    fwd = [(tokens, (q + 2 * kv) * d, h), (tokens, h, q * d), (tokens, 2 * ffn, h), (tokens, h, ffn)]
    shapes = [sh for (m, n, k) in fwd for sh in ((m, n, k), (m, k, n), (k, n, m))]
    eff = H200.matmul_efficiency_max * C.matmul_training_efficiency
    model_s = sum(float(gemm_time_s(m, n, k, PEAK_BF16, eff, H200.n_sms, H200.hbm_bandwidth_bytes_per_s))
                  for m, n, k in shapes)
    measured_s = s.kernel_time_s["gemm"] / steps
    assert 2 * sum(m * n * k for m, n, k in shapes) / measured_s / 1e12 == pytest.approx(777, rel=0.02)
    assert model_s / measured_s == pytest.approx(1.0, abs=0.20) and model_s > measured_s
    import json
    names = {e["name"] for e in json.loads((DATA / "layer_llama3-8b_s8192.json").read_text())["traceEvents"]
             if e.get("cat") == "kernel" and "sdpa" in e["name"]}
    assert names and all(n.startswith("cudnn_generated") for n in names)


def test_streaming_bandwidth_and_the_optimizer_step():
    """Memory-bound kernels at 1 GiB and more: copy and residual add reach 0.88-0.92 of the 4.8 TB/s
    datasheet (hbm_efficiency 0.8 is the step model's figure for its mix of norms, casts and adds, at or
    below these); fused AdamW moves its 28 B a parameter at 0.73. The step model's optimizer step,
    optimizer_bytes_per_param 36 B at hbm_efficiency, costs 45 B at the datasheet rate a parameter; the
    measured fused kernel alone is 38.6, plus the 8 B of gradient-norm read, zeroing and 16-bit copy at
    the copy rate 47.5: within 6%."""
    df = pd.read_csv(DATA / "memory.csv", comment="#")
    big = df[df.bytes_moved >= 2**31]
    stream = big[big.op.isin(["copy", "add"])].gb_per_s * 1e9 / H200.hbm_bandwidth_bytes_per_s
    assert stream.between(C.hbm_efficiency, 0.95).all()
    adamw = big[big.op == "adamw"]
    copy_eff = float(stream.min())
    measured_s_per_param = adamw.time_s / adamw.n_elements + 8.0 / (H200.hbm_bandwidth_bytes_per_s * copy_eff)
    model_s_per_param = elementwise_time_s(C.optimizer_bytes_per_param, H200.hbm_bandwidth_bytes_per_s, C.hbm_efficiency)
    assert (model_s_per_param / measured_s_per_param).between(0.94, 1.06).all()


def test_whole_training_steps_on_the_h200_out_of_sample():
    """13 configurations of plain PyTorch training steps (an 8-layer Llama-3 8B-shaped model, 2K-16K
    tokens, micro-batch 1-8, gradient accumulation, full recompute; train_step_sweep.py), never fitted:
    the shipped profile predicts them with 5.9% MAPE, every step within 14%, and ranks them with Spearman
    0.95. Their stack ('pytorch') has no profile: they run at the generic kernel efficiency, the median over
    the calibrated stacks (0.908). Until 2026-12-02 every stack carried a fixed, unmeasured 50 ms a step,
    more than an eager loop spends: the 90 ms step came out 44% slow and the MAPE was 11.2% (9.8% at that
    morning's generic kernel efficiency, 0.953), every step from 0.25 s on within 19%."""
    from scipy.stats import spearmanr

    from perfmodel.calibrate.parsers import read_runs_csv
    from perfmodel.validate import error_table, predict_runs

    runs = read_runs_csv(DATA / "train_steps.csv")
    pred = predict_runs(runs)
    assert len(runs) == 13 and (pred.status == "ok").all()
    overall = error_table(runs, pred)[1]
    assert overall["mape_pct"] < 7.0
    measured = pd.to_numeric(runs.iteration_time_s).to_numpy()
    err = pred.pred_iteration_time_s.to_numpy() / measured - 1
    assert np.all(np.abs(err) < 0.15)
    assert abs(err[np.argmin(measured)]) < 0.12  # the shortest step carries no fixed overhead it does not have
    rho = spearmanr(pd.to_numeric(runs.tokens_per_s_per_gpu), pred.pred_tokens_per_s_per_gpu).statistic
    assert rho > 0.9
