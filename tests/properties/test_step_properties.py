"""Properties of the composed step model over random valid configurations (hypothesis):
breakdowns sum to totals, more bandwidth is never slower (and matters only across NVLink
domains), no bubble without a pipeline,
one estimate == one element of the batched path, ZeRO never adds memory, outputs finite."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import perfmodel
from perfmodel.estimate import build_inputs
from perfmodel.step import MEMORY_PARTS, STEP_INPUTS, TIME_PARTS, step_costs

MODELS = ["gpt3-1.3b", "gpt3-13b", "gpt3-175b", "bloom-176b", "llama2-7b", "llama2-70b", "llama3-8b",
          "llama3-70b", "llama3.1-405b", "mt-nlg-530b"]
GPUS = ["a100-sxm4-80gb", "h100-sxm5-80gb", "h200-sxm-141gb", "b200", "gb200", "v100-sxm3-32gb"]
FRAMEWORKS = ["megatron-lm", "nemo", "deepspeed", "torchtitan", "megatron-deepspeed", "some-unknown-stack"]
SETTINGS = dict(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@dataclass(frozen=True)
class Config:
    model: perfmodel.ModelSpec
    gpu: perfmodel.AcceleratorSpec
    par: perfmodel.ParallelSpec
    job: perfmodel.JobSpec
    scale_out: float | None
    #: GPUs per node when drawn (6 or 8 need not divide the GPU count: the last node is part-used);
    #: None: the largest of 8, 4, 2, 1 that divides it
    gpn: int | None = None

    @property
    def n_gpus(self) -> int:
        return self.par.n_gpus

    def cluster(self, scale_out=None) -> perfmodel.ClusterSpec:
        n = self.n_gpus
        gpn = self.gpn or next(g for g in (8, 4, 2, 1) if n % g == 0)
        return perfmodel.ClusterSpec.build(self.gpu, n, gpn, scale_out or self.scale_out)

    def with_par(self, **update) -> "Config":
        return Config(self.model, self.gpu, self.par.model_copy(update=update), self.job, self.scale_out, self.gpn)


def divisors(n: int, limit: int) -> list[int]:
    return [d for d in range(1, min(n, limit) + 1) if n % d == 0]


@st.composite
def configs(draw, pp_one: bool = False) -> Config:
    model = perfmodel.load_model(draw(st.sampled_from(MODELS)))
    gpu = perfmodel.load_gpu(draw(st.sampled_from(GPUS)))
    tp = draw(st.sampled_from([t for t in divisors(model.n_heads, 8)
                               if model.n_kv_heads % t == 0 or t % model.n_kv_heads == 0]))
    pp = 1 if pp_one else draw(st.sampled_from(divisors(model.n_layers, 16)))
    per_stage = model.n_layers // pp
    vpp = 1 if pp == 1 else draw(st.sampled_from(divisors(per_stage, 6)))
    seq_len = draw(st.sampled_from([1024, 2048, 4096, 8192]))
    cp = draw(st.sampled_from([1, 1, 2, 4]))
    dp = draw(st.sampled_from([1, 2, 4, 8, 16, 64]))
    micro_batch = draw(st.sampled_from([1, 1, 2, 4]))
    global_batch = dp * micro_batch * draw(st.sampled_from([1, 2, 4, 8, 16, 32]))
    zero = draw(st.integers(0, 3))
    par = perfmodel.ParallelSpec(
        tp=tp, pp=pp, dp=dp, cp=cp, vpp=vpp, micro_batch=micro_batch, sp=draw(st.booleans()),
        zero_stage=zero, recompute=draw(st.sampled_from(["none", "selective", "full"])),
    )
    job = perfmodel.JobSpec(
        global_batch=global_batch, seq_len=seq_len,
        # a precision the GPU has tensor cores for (V100: fp16 only; fp8 from Hopper on)
        precision=draw(st.sampled_from([p for p in ("bf16", "bf16", "fp16", "fp8", "mxfp8", "nvfp4")
                                        if gpu.supports_precision(p)])),
        framework=draw(st.sampled_from(FRAMEWORKS)),
    )
    scale_out = draw(st.sampled_from([None, 400.0, 1600.0, 3200.0]))
    return Config(model, gpu, par, job, scale_out, draw(st.sampled_from([None, None, 6, 8])))


def run(cfg: Config, scale_out=None) -> perfmodel.Estimate:
    return perfmodel.estimate(cfg.model, cfg.cluster(scale_out), cfg.par, cfg.job)


@settings(**SETTINGS)
@given(configs())
def test_breakdowns_sum_to_totals(cfg):
    est = run(cfg)
    assert set(est.time_breakdown_s) == set(TIME_PARTS)
    assert set(est.memory_breakdown_gib) == set(MEMORY_PARTS)
    assert sum(est.time_breakdown_s.values()) == pytest.approx(est.iteration_time_s, rel=1e-9)
    assert sum(est.memory_breakdown_gib.values()) == pytest.approx(est.memory_gib, rel=1e-9)


@settings(**SETTINGS)
@given(configs())
def test_outputs_finite_and_positive(cfg):
    est = run(cfg)
    for v in (est.iteration_time_s, est.tokens_per_s_per_gpu, est.mfu, est.memory_gib):
        assert np.isfinite(v) and v > 0
    # MFU is counted against the dense bf16 peak; a faster GEMM precision may exceed it only by
    # that precision's peak ratio
    assert est.mfu < cfg.gpu.peak_flop_per_s(cfg.job.precision) / cfg.gpu.peak_flop_per_s("bf16")
    if cfg.job.precision in ("bf16", "fp16"):
        assert est.mfu < 1.0
    for k, v in {**est.time_breakdown_s, **est.memory_breakdown_gib}.items():
        assert np.isfinite(v) and v >= 0, k
    assert est.time_breakdown_s["compute_s"] > 0
    # the fixed per-iteration time is the stack's stated one: none unless a calibration sets it
    assert est.time_breakdown_s["overhead_s"] == 0.0
    for k in ("weights_gib", "optimizer_gib", "activations_gib"):
        assert est.memory_breakdown_gib[k] > 0
    # throughput is the definition: tokens per step / time / GPUs
    tokens = cfg.job.global_batch * cfg.job.seq_len
    assert est.tokens_per_s_per_gpu == pytest.approx(tokens / est.iteration_time_s / cfg.n_gpus, rel=1e-9)


@settings(**SETTINGS)
@given(configs(), st.sampled_from([100.0, 200.0, 400.0, 800.0, 1600.0]), st.sampled_from([2.0, 4.0, 8.0]))
def test_more_scale_out_bandwidth_is_never_slower(cfg, bw, factor):
    """No part grows with the bandwidth but the DP traffic hidden behind a context-parallel exchange: a
    phase hides it behind its compute and its CP wait (step.py fwd/bwd_hiding_s), so a shorter wait can
    expose some (GPT-3 1.3B, tp 8 cp 4 dp 8 ZeRO-3, 100 -> 400 Gbit/s: cp_comm 1.567 -> 0.387 s, dp_comm
    0 -> 0.0002 s); the two together never grow."""
    slow = run(cfg, scale_out=bw)
    fast = run(cfg, scale_out=bw * factor)
    assert fast.iteration_time_s <= slow.iteration_time_s * (1 + 1e-12)
    for k in TIME_PARTS:
        if k not in ("dp_comm_s", "cp_comm_s"):
            assert fast.time_breakdown_s[k] <= slow.time_breakdown_s[k] * (1 + 1e-12) + 1e-15, k
    both = [e.time_breakdown_s["dp_comm_s"] + e.time_breakdown_s["cp_comm_s"] for e in (fast, slow)]
    assert both[0] <= both[1] * (1 + 1e-12) + 1e-15
    if slow.time_breakdown_s["cp_comm_s"] == 0.0:  # no CP wait to hide behind: each part on its own
        assert fast.time_breakdown_s["dp_comm_s"] <= slow.time_breakdown_s["dp_comm_s"] * (1 + 1e-12) + 1e-15
    assert fast.memory_gib == pytest.approx(slow.memory_gib, rel=1e-12)


@settings(**SETTINGS)
@given(configs(), st.sampled_from([100.0, 400.0]))
def test_the_network_matters_exactly_when_the_job_spans_nvlink_domains(cfg, bw):
    """A job inside one NVLink domain never touches the scale-out network (its step time does not
    depend on it); a pipeline spread over several domains pays it on every hop, whatever the stride."""
    slow, fast = run(cfg, scale_out=bw), run(cfg, scale_out=bw * 16)
    if cfg.n_gpus <= cfg.cluster().nvlink_domain_gpus:
        assert slow.iteration_time_s == pytest.approx(fast.iteration_time_s, rel=1e-12)
    elif cfg.par.pp > 1:
        assert slow.time_breakdown_s["pp_comm_s"] > fast.time_breakdown_s["pp_comm_s"]


@settings(**SETTINGS)
@given(configs(pp_one=True))
def test_no_pipeline_no_bubble(cfg):
    est = run(cfg)
    assert est.time_breakdown_s["bubble_s"] == 0.0
    assert est.time_breakdown_s["pp_comm_s"] == 0.0


@settings(**SETTINGS)
@given(configs())
def test_pipeline_bubble_is_schedule_fraction(cfg):
    """Narayanan et al. 2021: bubble / ideal = (p - 1) / (v m) with m micro-batches when the stages are
    equal; the head on one stage (and an uneven split's lighter stages) only shortens the fill and
    drain, never below half the lightest stage's share of the busiest (which may hold the head: a stage
    of two Llama-3 8B layers plus its 128K-vocabulary head is 2.2x a stage of two layers; weights stand
    for the work, attention's s^2 term would only make the layers heavier)."""
    est = run(cfg)
    t = est.time_breakdown_s
    m = cfg.job.global_batch / (cfg.par.dp * cfg.par.micro_batch)
    p, v = cfg.par.pp, cfg.par.vpp
    work = t["compute_s"] + t["recompute_s"] + t["tp_comm_s"] + t["cp_comm_s"]
    busiest_pace = work * (p - 1) / (v * m)
    assert t["bubble_s"] <= busiest_pace * (1 + 1e-9) + 1e-15
    if p > 1:
        mdl = cfg.model
        h, a, kv = mdl.hidden_size, mdl.n_heads, mdl.n_kv_heads
        layer_w = h * (h + 2 * kv * h / a) + h * h + (3 if mdl.mlp == "swiglu" else 2) * h * mdl.ffn_hidden_size
        layers = mdl.n_layers
        # the lightest stage's weights over the busiest's, the head counted on the busiest
        lighter = (layers // p) * layer_w / (-(-layers // p) * layer_w + mdl.vocab_size * h)
        assert t["bubble_s"] >= busiest_pace * lighter * 0.5


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(configs(), min_size=2, max_size=6))
def test_estimate_equals_row_of_batched_step_costs(cfgs):
    rows = [build_inputs(c.model, c.cluster(), c.par, c.job) for c in cfgs]
    assert all(set(r) >= set(STEP_INPUTS) for r in rows)
    stacked = {k: np.array([r[k] for r in rows], dtype=float) for k in STEP_INPUTS}
    out = step_costs(stacked)
    for i, cfg in enumerate(cfgs):
        est = run(cfg)
        assert float(out["iteration_time_s"][i]) == pytest.approx(est.iteration_time_s, rel=1e-12)
        assert float(out["tokens_per_s_per_gpu"][i]) == pytest.approx(est.tokens_per_s_per_gpu, rel=1e-12)
        assert float(out["mfu"][i]) == pytest.approx(est.mfu, rel=1e-12)
        assert float(out["memory_gib"][i]) == pytest.approx(est.memory_gib, rel=1e-12)
        assert bool(out["fits"][i]) == est.fits
        for k in TIME_PARTS:
            assert float(out[k][i]) == pytest.approx(est.time_breakdown_s[k], rel=1e-12, abs=1e-300), k
        for k in MEMORY_PARTS:
            assert float(out[k][i]) == pytest.approx(est.memory_breakdown_gib[k], rel=1e-12, abs=1e-300), k


@settings(**SETTINGS)
@given(configs())
def test_memory_never_grows_with_zero_stage(cfg):
    # over the stages the stack implements: torchtitan has DDP and FSDP only, and its FSDP keeps the
    # gathered parameters and unsharded gradients through the step under pipelining (ZeRO-1-like)
    stages = (0, 3) if cfg.job.framework == "torchtitan" else (0, 1, 2, 3)
    mems = [run(cfg.with_par(zero_stage=z)).memory_gib for z in stages]
    for lo, hi in zip(mems[1:], mems):
        assert lo <= hi * (1 + 1e-12)
    if cfg.par.dp * cfg.par.cp == 1:  # ZeRO shards over the dp x cp ranks
        assert mems[-1] == pytest.approx(mems[0], rel=1e-12)


@settings(**SETTINGS)
@given(configs())
def test_recompute_trades_memory_for_time(cfg):
    """none -> selective -> full: activations never grow, recompute time never shrinks."""
    ests = [run(cfg.with_par(recompute=r)) for r in ("none", "selective", "full")]
    acts = [e.memory_breakdown_gib["activations_gib"] for e in ests]
    rec = [e.time_breakdown_s["recompute_s"] for e in ests]
    assert ests[0].time_breakdown_s["recompute_s"] == 0.0
    # torchtitan's op-level policy saves row-parallel partial sums nobody needs: with TP it may keep more
    if not (cfg.job.framework == "torchtitan" and cfg.par.tp > 1):
        assert acts[1] <= acts[0] * (1 + 1e-12)
    assert rec[1] <= rec[2] * (1 + 1e-12)
    # full recompute keeps only layer inputs: less than keeping everything
    assert acts[2] <= acts[0] * (1 + 1e-12)


@settings(**SETTINGS)
@given(configs())
def test_batched_call_on_length_one_arrays_is_shape_preserving(cfg):
    inp = build_inputs(cfg.model, cfg.cluster(), cfg.par, cfg.job)
    out = step_costs({k: np.full(3, inp[k], dtype=float) for k in STEP_INPUTS})
    for k in ("iteration_time_s", "memory_gib", "mfu", *TIME_PARTS, *MEMORY_PARTS):
        arr = np.broadcast_to(out[k], (3,))
        assert np.all(arr == arr[0]), k


@settings(**SETTINGS)
@given(configs(), st.sampled_from([2, 4]))
def test_bigger_batch_takes_longer_but_is_never_less_efficient(cfg, factor):
    """More micro-batches per step: the step gets longer, the bubble and the per-step costs are
    amortised, so tokens/s/GPU never drops."""
    big = Config(cfg.model, cfg.gpu, cfg.par, cfg.job.model_copy(update={"global_batch": cfg.job.global_batch * factor}),
                 cfg.scale_out, cfg.gpn)
    small_est, big_est = run(cfg), run(big)
    assert big_est.iteration_time_s > small_est.iteration_time_s
    assert big_est.tokens_per_s_per_gpu >= small_est.tokens_per_s_per_gpu * (1 - 1e-9)


@settings(**SETTINGS)
@given(configs(), st.integers(2, 200))
def test_tp_not_dividing_heads_is_an_input_error(cfg, tp):
    if cfg.model.n_heads % tp == 0:
        return
    bad = cfg.with_par(tp=tp, dp=1, cp=1, pp=1, vpp=1)
    with pytest.raises(perfmodel.InputError) as exc:
        perfmodel.estimate(bad.model, bad.cluster(), bad.par, bad.job)
    assert exc.value.field == "tp"


def test_zeropp_quantized_gathers_reduce_dp_communication():
    """ZeRO++ (Wang et al. 2023, arXiv 2306.10209): qwz all-gathers int8 weights (half of bf16)
    and qgz reduce-scatters int4 gradients, so the exposed DP communication of a ZeRO-3 step
    whose gathers are not fully hidden must shrink."""
    model = perfmodel.load_model("llama3-70b")
    cluster = perfmodel.ClusterSpec.build(perfmodel.load_gpu("h100-sxm5-80gb"), 64, 8, 400.0)
    job = perfmodel.JobSpec(global_batch=64, seq_len=4096, framework="deepspeed")
    plain = perfmodel.estimate(model, cluster, perfmodel.ParallelSpec(tp=8, dp=8, zero_stage=3), job)
    assert plain.time_breakdown_s["dp_comm_s"] > 0
    zpp = perfmodel.estimate(
        model, cluster, perfmodel.ParallelSpec(tp=8, dp=8, zero_stage=3, zeropp="qwz,qgz"), job
    )
    assert zpp.time_breakdown_s["dp_comm_s"] < plain.time_breakdown_s["dp_comm_s"]


@settings(**SETTINGS)
@given(configs())
def test_nanotron_zero1_adds_the_parameter_gather_to_the_all_reduce(cfg):
    """nanotron's ZeRO-1 (src/nanotron/optim/zero.py) keeps the full gradient all-reduce and then
    all-gathers the parameters after the step: its DP time is ZeRO-0's plus an exposed gather, so
    it is never faster in communication than ZeRO-0 (while reduce-scatter stacks may be)."""
    from dataclasses import replace

    nt = replace(cfg, job=cfg.job.model_copy(update={"framework": "nanotron"}))
    z0 = run(nt.with_par(zero_stage=0)).time_breakdown_s["dp_comm_s"]
    z1 = run(nt.with_par(zero_stage=1)).time_breakdown_s["dp_comm_s"]
    assert z1 >= z0 * (1 - 1e-12)
    if cfg.par.dp * cfg.par.cp > 1:  # gradients are reduced over dp x cp
        assert z1 > z0


@settings(**SETTINGS)
@given(configs(), st.sampled_from([1.25, 1.5, 2.0]), st.sampled_from(["attention", "hbm", "both"]),
       st.sampled_from([0.0, 0.0, 0.5, 1.0]))
def test_a_faster_gpu_is_never_slower(cfg, factor, what, offload):
    """Faster attention (its fraction of peak) or faster HBM never lengthens a step. With ring CP the
    exchange an attention no longer hides is exposed instead, and a phase lasts as long: the collectives
    that hide behind the phase (DP reduction, ZeRO gathers, offload copies) hide behind all of it
    (GB300, GB200's silicon with faster attention, came out 1.9% slower on a CP 4 job). Likewise a phase
    that waits on its activation offload copy (H200 came out up to 4.6% slower than H100 with offloading
    on: the shorter phases hid less of the DP reduction, and the bubble charged the longer exposed copy
    on every slot). The bubble's other stages copy in proportion to their layers (until 2026-12-02 to their
    time, which a faster GEMM tilted: up to 0.56% slower with offloading on)."""
    offload = offload if cfg.par.pp >= 3 else 0.0  # (activation offloading needs pp >= 3: Megatron-Kwai)
    cfg = cfg.with_par(offload_fraction=offload)
    gpu = cfg.gpu
    update = {}
    if what in ("attention", "both"):  # (Blackwell Ultra's kind of speed-up: the flash kernels' exponentials)
        update["attention_fwd_speedup"] = gpu.attention_fwd_speedup * factor
        update["attention_bwd_speedup"] = gpu.attention_bwd_speedup * factor
    if what in ("hbm", "both"):
        update["hbm_bandwidth_gb_per_s"] = gpu.hbm_bandwidth_gb_per_s * factor
    faster = Config(cfg.model, gpu.model_copy(update=update), cfg.par, cfg.job, cfg.scale_out, cfg.gpn)
    assert run(faster).iteration_time_s <= run(cfg).iteration_time_s * (1 + 1e-9)
