"""Framework profiles: fused element-wise work (flash-attention's training stack), gradient width."""
from __future__ import annotations

import numpy as np
import pytest

import perfmodel
from perfmodel.calibration_profile import Calibration
from perfmodel.constants import DEFAULT_CONSTANTS
from perfmodel.estimate import build_inputs, step_outputs
from perfmodel.frameworks import PROFILES, framework_profile
from perfmodel.step import step_costs


def _compute_s(framework: str, **override) -> float:
    model = perfmodel.load_model("gpt3-1.3b")
    cluster = perfmodel.ClusterSpec.build(perfmodel.load_gpu("a100-sxm4-80gb"), 8, 8)
    par = perfmodel.ParallelSpec(tp=1, pp=1, dp=8, micro_batch=4, recompute="none")
    job = perfmodel.JobSpec(global_batch=32, seq_len=2048, precision="bf16", framework=framework)
    return step_outputs(model, cluster, par, job, Calibration(), **override)["compute_s"]


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


def _step(framework: str, precision: str, gpu: str = "a100-sxm4-80gb") -> dict:
    model = perfmodel.load_model("gpt3-1.3b")
    cluster = perfmodel.ClusterSpec.build(perfmodel.load_gpu(gpu), 32, 8, 100.0)
    par = perfmodel.ParallelSpec(tp=1, pp=1, dp=32, micro_batch=4, zero_stage=0, recompute="full")
    job = perfmodel.JobSpec(global_batch=128, seq_len=2048, precision=precision, framework=framework)
    x = build_inputs(model, cluster, par, job, Calibration())
    return {k: float(v[0]) for k, v in step_costs({k: np.asarray([v]) for k, v in x.items()}).items()}


@pytest.mark.parametrize("framework", ["megatron-lm", "megatron-deepspeed", "gpt-neox"])
def test_fp16_runs_reduce_fp16_gradients(framework):
    """Megatron-LM keeps main grads in the parameter dtype unless --accumulate-allreduce-grads-in-fp32,
    which it forces on only for bf16: an fp16 run holds and all-reduces 2-byte gradients, a bf16 run
    4-byte ones; the optimizer's fp32 master copy and moments are the same in both, and the fp16 step
    upcasts its gradients into a 4-byte copy (1.3B parameters, no ZeRO: 4.9 GiB) in the room the freed
    activations (3.6 GiB at micro-batch 4) leave, the excess counted with the optimizer."""
    assert framework_profile(framework).fp16_grads_in_param_dtype
    fp16 = _step(framework, "fp16")
    bf16 = _step(framework, "bf16")
    assert fp16["gradients_gib"] == pytest.approx(bf16["gradients_gib"] / 2.0, rel=1e-12)
    copy_gib = 2.0 * fp16["gradients_gib"]
    assert fp16["activations_gib"] == pytest.approx(bf16["activations_gib"], rel=1e-12)
    assert fp16["activations_gib"] < copy_gib
    assert fp16["optimizer_gib"] - bf16["optimizer_gib"] == pytest.approx(copy_gib - fp16["activations_gib"], rel=1e-9)
    assert 0.0 < fp16["dp_comm_s"] < bf16["dp_comm_s"]


def test_stacks_with_fp32_gradient_reduction_keep_it_in_fp16():
    """torchtitan (FSDP2 reduce_dtype fp32) and nanotron keep 4-byte gradients in fp16 runs too;
    DeepSpeed's are 2 bytes in every precision."""
    for fw in ("torchtitan", "nanotron", "generic"):
        assert not framework_profile(fw).fp16_grads_in_param_dtype
        assert _step(fw, "fp16")["gradients_gib"] == pytest.approx(_step(fw, "bf16")["gradients_gib"])
    assert framework_profile("deepspeed").grad_bytes_per_param == 2.0



def _zero1_args(framework: str, precision: str):
    model = perfmodel.load_model("gpt3-1.3b")
    # data parallelism across 4 nodes of a slow network: the reduction outlasts what gpt-neox's overlap hides
    cluster = perfmodel.ClusterSpec.build(perfmodel.load_gpu("a100-sxm4-80gb"), 32, 8, 10.0)
    par = perfmodel.ParallelSpec(tp=1, pp=1, dp=32, micro_batch=4, zero_stage=1, recompute="full")
    job = perfmodel.JobSpec(global_batch=128, seq_len=2048, precision=precision, framework=framework)
    return model, cluster, par, job


@pytest.mark.parametrize("framework", ["megatron-deepspeed", "gpt-neox"])
def test_deepspeed_bf16_optimizer_all_reduces_fp32_gradients(framework):
    """DeepSpeed's BF16_Optimizer (pipeline engine _bf16_reduce_grads -> buffered_allreduce_fallback on
    the fp32 gradients, then all_gather_dp_groups of the 16-bit parameters): with ZeRO-1 a bf16 run costs
    the whole all-reduce plus the gather, not ZeRO-1's reduce-scatter; fp16 runs keep the reduce-scatter."""
    from perfmodel.estimate import framework_arrays

    prof = framework_profile(framework)
    assert prof.bf16_zero1_all_reduce_grads and not prof.zero1_all_reduce_grads
    assert framework_arrays(prof, False, "bf16")["zero1_all_reduce_grads"] == 1.0
    assert framework_arrays(prof, False, "fp16")["zero1_all_reduce_grads"] == 0.0
    bf16 = step_outputs(*_zero1_args(framework, "bf16"), Calibration())
    rs = step_outputs(*_zero1_args(framework, "bf16"), Calibration(), zero1_all_reduce_grads=0.0)
    # an all-reduce moves twice a reduce-scatter's bytes: the exposed reduction grows, nothing else
    assert bf16["dp_comm_s"] > rs["dp_comm_s"] > 0.0
    assert bf16["iteration_time_s"] - rs["iteration_time_s"] == pytest.approx(bf16["dp_comm_s"] - rs["dp_comm_s"])


def test_a_stack_built_on_another_shares_its_fitted_kernel_efficiency():
    """GPT-NeoX runs Megatron's kernels on DeepSpeed's pipeline engine: without a fit of its own it takes
    Megatron-DeepSpeed's fitted kernel efficiency (not the uncalibrated 1.0), and nothing else of it; a
    value fitted for GPT-NeoX itself wins."""
    from perfmodel.calibration_profile import Calibration

    assert PROFILES["gpt-neox"].calibration_from == "megatron-deepspeed"
    assert PROFILES["gpt-neox"].dp_overlap == PROFILES["megatron-deepspeed"].dp_overlap == 0.0
    cal = Calibration(frameworks={"megatron-deepspeed": {"kernel_efficiency": 0.9, "layer_overhead_s": 0.01}})
    neox = cal.framework("gpt-neox")
    assert neox.kernel_efficiency == 0.9 and neox.layer_overhead_s == PROFILES["gpt-neox"].layer_overhead_s
    own = Calibration(frameworks={"megatron-deepspeed": {"kernel_efficiency": 0.9},
                                  "gpt-neox": {"kernel_efficiency": 1.1}})
    assert own.framework("gpt-neox").kernel_efficiency == 1.1
    assert Calibration().framework("gpt-neox").kernel_efficiency == 1.0  # nothing fitted: datasheet rates
    # the shipped profile fits Megatron-DeepSpeed (BLOOM) and not GPT-NeoX
    from perfmodel.calibration_profile import load_calibration

    shipped = load_calibration(None)
    assert "gpt-neox" not in shipped.frameworks
    assert shipped.framework("gpt-neox").kernel_efficiency == shipped.framework("megatron-deepspeed").kernel_efficiency
    # and DeepSpeed's pipeline engine, which both run: its per-micro-batch cost fitted on BLOOM's runs
    assert shipped.framework("gpt-neox").microbatch_overhead_s == \
        shipped.framework("megatron-deepspeed").microbatch_overhead_s > 0.0
    assert shipped.framework("gpt-neox").layer_overhead_s == PROFILES["gpt-neox"].layer_overhead_s


def test_a_known_stack_without_a_fit_runs_at_the_typical_calibrated_kernel_efficiency():
    """MegaScale and Meta's internal stack have profiles (their overlaps, MegaScale's parallel block) but no
    measured run to fit: they run at the generic profile's kernel efficiency, the median over the calibrated
    stacks, as an unknown stack does -- before, at the uncalibrated 1.0, faster than every stack but two the
    runs measure. A value of their own, or one borrowed from the stack they are built on, wins; with nothing
    fitted anywhere they run at datasheet rates."""
    from perfmodel.calibration_profile import Calibration, load_calibration
    from perfmodel.notes import framework_note

    cal = Calibration(frameworks={"generic": {"kernel_efficiency": 0.9}, "megatron-deepspeed": {"kernel_efficiency": 0.8}})
    for name in ("megascale", "meta-internal"):
        assert PROFILES[name].calibration_from is None
        assert cal.framework(name).kernel_efficiency == 0.9
        assert cal.framework(name).tp_overlap == PROFILES[name].tp_overlap  # nothing else taken
        assert "0.900" in framework_note(name, cal) and "median" in framework_note(name, cal)
    assert cal.framework("gpt-neox").kernel_efficiency == 0.8  # the stack it is built on comes first
    own = Calibration(frameworks={"generic": {"kernel_efficiency": 0.9}, "megascale": {"kernel_efficiency": 1.1}})
    assert own.framework("megascale").kernel_efficiency == 1.1 and framework_note("megascale", own) is None
    assert Calibration().framework("megascale").kernel_efficiency == 1.0
    assert framework_note("megascale", Calibration()) is None
    shipped = load_calibration(None)
    assert "megascale" not in shipped.frameworks and "meta-internal" not in shipped.frameworks
    assert shipped.framework("megascale").kernel_efficiency == shipped.framework("generic").kernel_efficiency < 1.0


def test_a_borrowed_kernel_efficiency_is_fitted_as_it_is_predicted():
    """In the runs fit, a stack without a fit of its own runs at (and informs) the kernel efficiency of the
    stack it is built on, as the written profile will predict it: its fit residuals are its errors after."""
    import pandas as pd
    from pathlib import Path

    from perfmodel.calibrate.fit_runs import fit_runs
    from perfmodel.calibration_profile import load_calibration
    from perfmodel.validate import measured_tokens_per_s_per_gpu, predict_runs

    runs = Path(__file__).resolve().parents[2] / "calibration" / "data" / "runs" / "calibration_runs.csv"
    d = pd.read_csv(runs)
    x = d[d.framework == "megatron-deepspeed"].copy().reset_index(drop=True)
    x["tokens_per_s_per_gpu"] *= 0.8  # a slower cluster: the fit must move the shared efficiency
    x["iteration_time_s"] /= 0.8
    x.loc[:2, "framework"] = "gpt-neox"
    fit = fit_runs(x, load_calibration(None))
    assert "gpt-neox" not in fit.calibration.frameworks
    assert fit.params["megatron-deepspeed.kernel_efficiency"] < 0.85
    during = fit.residuals.set_index("run_id").loc[x.run_id[:3], "log_ratio"].to_numpy()
    pred = predict_runs(x.iloc[:3], fit.calibration).pred_tokens_per_s_per_gpu.to_numpy()
    after = np.log(pred / np.asarray(measured_tokens_per_s_per_gpu(x.iloc[:3])))
    assert np.allclose(during, after, atol=1e-9)


def test_a_stack_too_few_runs_to_fit_is_fitted_at_the_typical_kernel_efficiency_it_is_predicted_at():
    """Three runs of a known stack (MegaScale here) or of an unknown one are too few to fit a kernel efficiency:
    the written profile runs them at the generic one, the median of the fitted stacks, and the fit costs them so
    while it fits (its residuals are their errors after), not at the value they started from."""
    import pandas as pd
    from pathlib import Path

    from perfmodel.calibrate.fit_runs import fit_runs
    from perfmodel.calibration_profile import Calibration
    from perfmodel.validate import measured_tokens_per_s_per_gpu, predict_runs

    runs = Path(__file__).resolve().parents[2] / "calibration" / "data" / "runs" / "calibration_runs.csv"
    d = pd.read_csv(runs)
    x = d[d.framework.isin(["megatron-kwai", "nemo"])].copy().reset_index(drop=True)
    x.loc[:2, "framework"] = "megascale"
    x.loc[3:5, "framework"] = "my-own-stack"
    # the second base holds a generic value of its own, which the written profile replaces with the median
    for base in (Calibration(), Calibration(frameworks={"generic": {"kernel_efficiency": 1.3}})):
        fit = fit_runs(x, base)
        assert {"megascale", "my-own-stack"}.isdisjoint(fit.calibration.frameworks)
        typical = np.median([fit.params["megatron-kwai.kernel_efficiency"], fit.params["nemo.kernel_efficiency"]])
        assert fit.params["generic.kernel_efficiency"] == pytest.approx(typical, rel=1e-12)
        assert fit.calibration.framework("megascale").kernel_efficiency == pytest.approx(typical, rel=1e-12)
        during = fit.residuals.set_index("run_id").loc[x.run_id[:6], "log_ratio"].to_numpy()
        pred = predict_runs(x.iloc[:6], fit.calibration).pred_tokens_per_s_per_gpu.to_numpy()
        after = np.log(pred / np.asarray(measured_tokens_per_s_per_gpu(x.iloc[:6])))
        assert np.allclose(during, after, atol=1e-9)


def test_fp8_runs_reduce_gradients_as_their_bf16_base():
    """fp8 / fp4 matmuls run on bf16 mixed precision: DeepSpeed's BF16_Optimizer all-reduce applies to
    them as to bf16 runs, not to fp16 ones."""
    from perfmodel.estimate import framework_arrays

    p = framework_profile("megatron-deepspeed")
    got = {prec: framework_arrays(p, False, prec)["zero1_all_reduce_grads"] for prec in ("bf16", "fp8", "nvfp4", "fp16")}
    assert got == {"bf16": 1.0, "fp8": 1.0, "nvfp4": 1.0, "fp16": 0.0}


def test_stacks_on_deepspeeds_zero3_engine_share_its_zero3_values():
    """Megatron-DeepSpeed and GPT-NeoX run ZeRO-3 through DeepSpeed's stage-3 engine: the same static
    overlap / latency / live-parameter values, and DeepSpeed's fitted ones (the only ZeRO-3 fit, on the
    ZeRO++ pairs) where a calibration has none of their own. Before, they ran ZeRO-3 at the generic 80%
    overlap: the same 20B job came out three times faster under Megatron-DeepSpeed than under DeepSpeed."""
    from perfmodel.calibration_profile import Calibration, load_calibration

    keys = ("zero3_overlap", "zero3_step_latency_s", "zero3_max_live_params")
    for name in ("megatron-deepspeed", "gpt-neox"):
        assert PROFILES[name].zero3_engine == "deepspeed" and PROFILES["deepspeed"].zero3_engine is None
        assert all(getattr(PROFILES[name], k) == getattr(PROFILES["deepspeed"], k) for k in keys)
        cal = Calibration(frameworks={"deepspeed": {"zero3_overlap": 0.3, "zero3_step_latency_s": 2e-5,
                                                    "kernel_efficiency": 0.7}})
        got = cal.framework(name)
        assert (got.zero3_overlap, got.zero3_step_latency_s) == (0.3, 2e-5)
        assert got.kernel_efficiency != 0.7  # the engine's ZeRO-3 values only, not its kernels
        own = Calibration(frameworks={"deepspeed": {"zero3_overlap": 0.3}, name: {"zero3_overlap": 0.5}})
        assert own.framework(name).zero3_overlap == 0.5
    shipped = load_calibration(None)
    assert shipped.framework("megatron-deepspeed").zero3_step_latency_s == \
        shipped.framework("deepspeed").zero3_step_latency_s
    # every named engine is a profile
    assert all(p.zero3_engine in (None, *PROFILES) for p in PROFILES.values())


def test_the_per_micro_batch_cost_is_a_pipeline_engines():
    """The fitted per-micro-batch cost (BLOOM's pipelined Megatron-DeepSpeed runs) applies to pipelined runs
    only: an 8B model without a pipeline is not slowed by it (the final review's pp = 1 MFU drop, 0.379 to
    0.332, is gone); with a pipeline it adds its cost per micro-batch slot."""
    import perfmodel as pm
    from perfmodel.calibration_profile import load_calibration

    shipped = load_calibration(None)
    bare = shipped.model_copy(update={"frameworks": {**shipped.frameworks, "megatron-deepspeed": {
        k: v for k, v in shipped.frameworks["megatron-deepspeed"].items() if k != "microbatch_overhead_s"}}})
    model, job = pm.load_model("llama3-8b"), pm.JobSpec(global_batch=256, seq_len=4096, framework="megatron-deepspeed")
    cluster = pm.ClusterSpec.build(pm.load_gpu("h100-sxm5-80gb"), 8, 8)
    flat = pm.ParallelSpec(tp=1, pp=1, dp=8, zero_stage=1)
    assert pm.estimate(model, cluster, flat, job).iteration_time_s == pm.estimate(model, cluster, flat, job, bare).iteration_time_s
    piped = pm.ParallelSpec(tp=1, pp=2, dp=4, zero_stage=1)
    extra = pm.estimate(model, cluster, piped, job).iteration_time_s - pm.estimate(model, cluster, piped, job, bare).iteration_time_s
    micro, pp = 256 // 4, 2
    assert extra == pytest.approx(shipped.frameworks["megatron-deepspeed"]["microbatch_overhead_s"] * (micro + pp - 1),
                                  rel=0.05)


def test_nemo_keeps_bf16_gradients_as_its_performance_runs_do():
    """NeMo's performance recipes turn grad_reduce_in_fp32 off (scripts/performance/llm/pretrain_*.py: "bf16
    grad dtype"): its gradient buffer holds 2 bytes a parameter and its data-parallel reduction moves half the
    bytes of Megatron-Bridge's fp32 one, whatever else the two Megatron-Core stacks share."""
    assert PROFILES["nemo"].grad_bytes_per_param == 2.0
    assert PROFILES["megatron-bridge"].grad_bytes_per_param == PROFILES["megatron-lm"].grad_bytes_per_param == 4.0
    same = {k for k in type(PROFILES["nemo"]).model_fields if k not in ("grad_bytes_per_param", "source")}
    assert all(getattr(PROFILES["nemo"], k) == getattr(PROFILES["megatron-bridge"], k) for k in same)
    model = perfmodel.load_model("llama3-70b")
    cluster = perfmodel.ClusterSpec.build(perfmodel.load_gpu("h100-sxm5-80gb"), 64, 8)
    par = perfmodel.ParallelSpec(tp=8, pp=2, dp=4, zero_stage=1)
    out = {fw: step_outputs(model, cluster, par, perfmodel.JobSpec(global_batch=64, seq_len=4096, framework=fw),
                            Calibration(), dp_overlap=0.0)
           for fw in ("nemo", "megatron-bridge")}
    params = out["nemo"]["params_per_gpu"]
    assert out["megatron-bridge"]["gradients_gib"] - out["nemo"]["gradients_gib"] == pytest.approx(
        2.0 * params / 2**30, rel=1e-9)
    assert 0.0 < out["nemo"]["dp_comm_s"] < out["megatron-bridge"]["dp_comm_s"]
