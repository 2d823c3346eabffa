"""Framework profiles: what a training stack overlaps and how efficient its kernels are.

The same configuration runs at different speeds in different stacks (shared/data/README.md).
Each profile holds a few parameters with a physical meaning; ``perfmodel calibrate`` refits
them from measured runs. The defaults below are set from what each stack documents doing.
An unknown framework name gets the ``generic`` profile (not an error).
"""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from perfmodel.specs.checks import strict_boolean, strict_number

#: the longest fixed overhead (per layer, micro-batch, send/recv or step) a profile may state: an hour
MAX_OVERHEAD_S = 3600.0


class FrameworkProfile(BaseModel):
    """Every number finite and within its physical range (zero3_max_live_params alone may be .inf:
    no limit), so a calibrated override cannot make a step infinite or negative."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    @field_validator("*", mode="before")
    @classmethod
    def _numbers_are_not_booleans(cls, value, info):
        # the on/off switches take true/false, the numbers numbers: 0, 'no' or '0.5' is a typo, not a
        # switch or a value to coerce
        annotation = cls.model_fields[info.field_name].annotation
        if annotation is float:
            return strict_number(value)
        return strict_boolean(value) if annotation is bool else value

    flash_attention: bool = Field(True, description="Fused flash attention (Dao et al. 2022) is used.")
    flash_pads_misaligned_heads: bool = Field(
        True, description="A head dimension that is not a multiple of 8 still runs flash attention, padded "
        "(flash-attn's interface, PyTorch SDPA); False: the stack falls back to unfused attention (Transformer "
        "Engine's backend filter turns flash and cuDNN fused attention off for it).")
    kernel_efficiency: float = Field(
        1.0, ge=0.05, le=1.5, allow_inf_nan=False, description="Multiplier on kernel rates (fusion quality).")
    tp_overlap: float = Field(0.0, ge=0, le=1, allow_inf_nan=False, description="Fraction of TP comm hidden behind GEMMs (TE userbuffers).")
    dp_overlap: float = Field(0.8, ge=0, le=1, allow_inf_nan=False, description="Fraction of the gradient reduce hidden behind backward.")
    param_gather_overlap: float = Field(
        0.0, ge=0, le=1, allow_inf_nan=False, description="Fraction of the ZeRO param all-gather hidden behind forward.")
    pp_overlap: float = Field(0.0, ge=0, le=1, allow_inf_nan=False, description="Fraction of pipeline send/recv hidden.")
    layer_overhead_s: float = Field(
        0.0, ge=0, le=MAX_OVERHEAD_S, allow_inf_nan=False, description="Host dispatch time per layer and micro-batch (fwd+bwd, split "
        "1:2): kernels are enqueued asynchronously, so a layer takes the longer of its kernels and this; it shows where "
        "the kernels are short (small micro-batches, narrow layers, wide TP)."
    )
    microbatch_overhead_s: float = Field(
        0.0, ge=0, le=MAX_OVERHEAD_S, allow_inf_nan=False, description="Fixed time per micro-batch of a pipeline "
        "schedule (pp > 1: the engine's instruction dispatch, p2p set-up, Python)."
    )
    p2p_overhead_s: float = Field(
        0.0, ge=0, le=MAX_OVERHEAD_S, allow_inf_nan=False, description="Fixed time per inter-node pipeline send/recv (handshake, metadata exchange, "
        "stream sync) on an idle fabric; it grows with the fabric's congestion like its bandwidth shrinks."
    )
    step_overhead_s: float = Field(
        0.0, ge=0, le=MAX_OVERHEAD_S, allow_inf_nan=False, description="Fixed time per iteration (data loading, logging, "
        "synchronisation) beyond the modelled optimizer step; none unless a calibration states one. Until 2026-12-02 "
        "every stack carried an unmeasured 50 ms: refitted at 0 / 20 / 50 ms the measured runs' macro-averaged MAPE "
        "was 10.0 / 10.2 / 10.5%, and plain PyTorch steps of 90 ms came out 44% slow.")
    zero3_overlap: float = Field(
        0.8, ge=0, le=1, allow_inf_nan=False, description="ZeRO-3: fraction of a phase's (forward or backward) compute that hides "
        "its parameter gathers and gradient reduction (prefetch + overlap_comm)."
    )
    zero3_max_live_params: float = Field(
        float("inf"), ge=1, description="ZeRO-3: most gathered parameters resident at once (DeepSpeed "
        "stage3_max_live_parameters, default 1e9); inf = two whole layers (FSDP block prefetch)."
    )
    zero3_step_latency_s: float = Field(
        0.0, ge=0, le=MAX_OVERHEAD_S, allow_inf_nan=False, description="ZeRO-3: latency per inter-node hop of each per-parameter "
        "gather/reduce (a ring over N nodes has N - 1, an all-to-all one: NCCL's cost model, src/graph/tuning.cc, puts "
        "a ring's latency in its inter-node steps): launch, hook and NCCL cost of fetching one weight across nodes."
    )
    zero1_all_reduce_grads: bool = Field(
        False, description="ZeRO-1 keeps the full gradient all-reduce (overlapped like plain DP) and then "
        "all-gathers the updated parameters after the optimizer step, instead of a reduce-scatter."
    )
    bf16_zero1_all_reduce_grads: bool = Field(
        False, description="In bf16 runs with ZeRO-1, gradients are reduced as zero1_all_reduce_grads says: "
        "DeepSpeed's BF16_Optimizer accumulates fp32 gradients and its pipeline engine all-reduces them whole "
        "(runtime/pipe/engine.py _exec_reduce_grads -> _bf16_reduce_grads -> buffered_allreduce_fallback on "
        "optimizer.get_grads_for_reduction()), then the optimizer all-gathers the updated 16-bit parameters "
        "(bf16_optimizer.py all_gather_dp_groups)."
    )
    zero3_keep_params_with_pp: bool = Field(
        False, description="ZeRO-3 with pipeline parallelism keeps the gathered parameters and the unsharded "
        "gradients for the whole step: one all-gather and one reduce-scatter per step, not per micro-batch "
        "(torchtitan: fsdp_reshard_after_forward 'default' = not pp_enabled; torch.distributed.pipelining "
        "turns off reshard-after-backward and gradient sync until the last backward)."
    )
    parallel_block: bool = Field(
        False, description="The stack builds every model with attention and MLP in parallel (one TP reduction per "
        "layer in forward), whatever the model's own layout (MegaScale, Jiang et al. NSDI'24 Sec. 3.1: parallel "
        "transformer block).")
    pp_reduces_after_backward: bool = Field(
        False, description="With pipeline parallelism the gradient reduction runs after the last backward, not "
        "overlapped with it (DeepSpeed's PipelineEngine: TrainSchedule ends with ReduceGrads, "
        "deepspeed/runtime/pipe/schedule.py), whatever dp_overlap the stack reaches without pipelining."
    )
    selective_alternate_mm: bool = Field(
        False, description="'selective' recompute is torchtitan's op-level policy (selective_ac_option = "
        "'op'): every other matmul output and the attention output are kept, the other matmuls and all "
        "element-wise work are recomputed (instead of Korthikanti's attention-only recompute)."
    )
    sp_batch_copies: bool = Field(
        False, description="Sequence parallelism shards dim 1 of [b, s, h] tensors: with micro-batches of more "
        "than one sequence every TP all-gather and reduce-scatter also copies the whole tensor (torchtitan)."
    )
    pp_balances_head: bool = Field(
        False, description="The pipeline split balances block costs with the output head counted as a block "
        "(nanotron build_model with get_block_compute_costs: a layer 4 h^2 + m ffn h, the head V h)."
    )
    fp8_saves_quantized_inputs: bool = Field(
        False, description="In fp8/fp4 runs the linear layers keep the 1-byte quantized copy of their input "
        "for backward (Transformer Engine), not the 16-bit one (torchao Float8Linear keeps the 16-bit input)."
    )
    elementwise_passes_per_h: float = Field(
        0.0, ge=0, le=1e3, allow_inf_nan=False, description="Passes over an s*b*h activation per layer forward "
        "(norms, residual adds, dropout, rope) where the stack fuses them; 0: the shared constant "
        "elementwise_bytes_per_h (unfused, 16)."
    )
    mlp_activation_in_gemm: bool = Field(
        False, description="The MLP activation runs in the first MLP GEMM's epilogue (fused matmul + bias + "
        "GELU), not as its own pass over the s*b*ffn tensor."
    )
    grad_bytes_per_param: float = Field(
        4.0, gt=0, le=16, allow_inf_nan=False, description="Gradient buffer precision (fp32 main grads = 4).")
    fp16_grads_in_param_dtype: bool = Field(
        False, description="In fp16 runs the gradient buffer and its all-reduce / reduce-scatter are fp16 (2 bytes "
        "per parameter), not grad_bytes_per_param: Megatron-LM keeps main grads in the parameter dtype unless "
        "--accumulate-allreduce-grads-in-fp32, which it forces on only for bf16 (megatron/training/arguments.py: "
        "'bfloat16 requires gradient accumulation and all-reduce to be done in fp32'); DeepSpeed's fp16 "
        "optimizers reduce fp16 gradients (communication_data_type defaults to the model dtype)."
    )
    loss_bytes_per_logit: float = Field(
        6.0, ge=0, le=64, allow_inf_nan=False, description="Bytes per vocabulary logit alive at the loss (the "
        "activations' peak): Megatron's vocab-parallel cross entropy keeps the 16-bit logits and one fp32 copy it "
        "works on in place (megatron/core/tensor_parallel/cross_entropy.py: .float(), sub_, exp out=): 2 + 4 = 6.")
    runtime_reserved_gib: float = Field(
        3.0, ge=0, le=1e4, allow_inf_nan=False, description="CUDA context, NCCL and cuBLAS buffers, fragmentation.")
    zero3_engine: str | None = Field(
        None, description="The stack whose ZeRO-3 engine this one trains through: its zero3_overlap and "
        "zero3_step_latency_s, as a calibration fits them there, are this one's too (the same stage-3 code).")
    calibration_from: str | None = Field(
        None, description="The stack this one is built on: where a calibration fits no kernel_efficiency (or "
        "microbatch_overhead_s) for this one, it runs at that stack's fitted value (the same kernels and pipeline "
        "engine), not at the uncalibrated one.")
    source: str = ""


#: DeepSpeed's stage-3 engine (deepspeed/runtime/zero/stage3.py, partitioned_param_coordinator.py), which
#: Megatron-DeepSpeed and GPT-NeoX train through: prefetch and overlap_comm hide little of the per-parameter
#: gathers (zero3_overlap and zero3_step_latency_s fitted on the 16 ZeRO-3/ZeRO++ pairs of
#: shared/data/runs/zeropp_pairs.csv, benchmarks/zeropp_whatif.py --fit), stage3_max_live_parameters 1e9
_DEEPSPEED_ZERO3 = dict(zero3_overlap=0.0, zero3_step_latency_s=8.9e-5, zero3_max_live_params=1e9)

_MEGATRON_TE = dict(
    tp_overlap=0.6, dp_overlap=0.9, param_gather_overlap=0.9, pp_overlap=0.5, flash_pads_misaligned_heads=False,
    fp8_saves_quantized_inputs=True,
    source="Megatron-Core + TransformerEngine: --tp-comm-overlap, --overlap-grad-reduce, --overlap-param-gather "
    "(NeMo/Megatron-Bridge performance recipes)",
)

#: NeMo's performance runs reduce and keep the gradients in bf16, not in fp32 (Megatron-Core's
#: grad_reduce_in_fp32 off): NeMo 2.0's scripts/performance/llm/pretrain_*.py ("recipe.trainer.plugins.
#: grad_reduce_in_fp32 = False  # bf16 grad dtype") and its recipes' pretrain_performance_optimizations
#: (nemo/collections/llm/recipes/nemotron4_340b.py); NeMo 1.x performance configs set
#: model.optim.grad_sync_dtype: bf16. The gradient buffer is 2 bytes a parameter and the data-parallel
#: reduction moves bf16; the optimizer casts its shard to fp32 for the step. (Megatron-Bridge's recipes keep
#: its _pretrain_common default, fp32, except where one says "grad_reduce_in_fp32 = False": its MoE recipes.)
_NEMO_PERF = {**_MEGATRON_TE, "grad_bytes_per_param": 2.0,
              "source": _MEGATRON_TE["source"] + "; bf16 gradient buffer and reduction (grad_reduce_in_fp32 off)"}

PROFILES: dict[str, FrameworkProfile] = {
    "generic": FrameworkProfile(source="no stack-specific overlap assumed beyond DDP bucketing"),
    "megatron-lm": FrameworkProfile(
        tp_overlap=0.0, dp_overlap=0.0, param_gather_overlap=0.0, zero3_overlap=0.0, pp_overlap=0.3,
        fp8_saves_quantized_inputs=True, fp16_grads_in_param_dtype=True, flash_pads_misaligned_heads=False,
        source="Megatron-LM as its arguments default (megatron/training/arguments.py): --overlap-grad-reduce and "
        "--overlap-param-gather off (store_true, default False; NeMo / Megatron-Bridge recipes turn them on; the "
        "same switches overlap Megatron-FSDP's gathers and reduce-scatters, so ZeRO-3 is not overlapped either), no TP "
        "overlap; fp16 main grads unless --accumulate-allreduce-grads-in-fp32 (forced on for bf16); fp8 through "
        "TransformerEngine",
    ),
    "nemo": FrameworkProfile(**_NEMO_PERF),
    "megatron-bridge": FrameworkProfile(**_MEGATRON_TE),
    "megascale": FrameworkProfile(**{**_MEGATRON_TE, "parallel_block": True, "source": _MEGATRON_TE["source"] + (
        "; MegaScale's parallel transformer block (Jiang et al. NSDI'24 Sec. 3.1)")}),
    "megatron-kwai": FrameworkProfile(**_MEGATRON_TE),
    "megatron-deepspeed": FrameworkProfile(
        flash_attention=False, tp_overlap=0.0, dp_overlap=0.0, fp16_grads_in_param_dtype=True,
        bf16_zero1_all_reduce_grads=True, zero3_engine="deepspeed", **_DEEPSPEED_ZERO3,
        source="Megatron-DeepSpeed (BLOOM era): fused softmax, no flash attention; ZeRO-0/1 gradients reduced after "
        "the last backward, not overlapped (DeepSpeed's pipeline schedule ends with ReduceGrads and OptimizerStep, "
        "runtime/pipe/schedule.py TrainSchedule; without pipelining DeepSpeedEngine.backward all-reduces at the "
        "accumulation boundary); bf16 with ZeRO-1 through BF16_Optimizer: fp32 gradient all-reduce, then the "
        "parameter all-gather",
    ),
    "deepspeed": FrameworkProfile(
        flash_attention=False, dp_overlap=0.7, param_gather_overlap=0.7, grad_bytes_per_param=2.0,
        **_DEEPSPEED_ZERO3, pp_reduces_after_backward=True,
        source="DeepSpeed ZeRO: overlap_comm, fp16 gradients; zero3_overlap and zero3_step_latency_s fitted "
        "(least_squares, soft_l1) on the 16 ZeRO-3/ZeRO++ pairs of shared/data/runs/zeropp_pairs.csv "
        "(benchmarks/zeropp_whatif.py --fit)",
    ),
    "oneflow": FrameworkProfile(flash_attention=False, dp_overlap=0.5, source="OneFlow GPT (2021)"),
    "gpt-neox": FrameworkProfile(flash_attention=False, dp_overlap=0.0, fp16_grads_in_param_dtype=True,
                                 bf16_zero1_all_reduce_grads=True, calibration_from="megatron-deepspeed",
                                 zero3_engine="deepspeed", **_DEEPSPEED_ZERO3,
                                 source="GPT-NeoX (Black et al. 2022, arXiv 2204.06745: 'a codebase built on Megatron and "
                                 "DeepSpeed'): Megatron's fused kernels, DeepSpeed's pipeline engine (its schedule ends "
                                 "with ReduceGrads: the gradient reduction is not overlapped, as in Megatron-DeepSpeed) and "
                                 "BF16_Optimizer"),
    "nanotron": FrameworkProfile(
        dp_overlap=0.5, zero1_all_reduce_grads=True, pp_balances_head=True, loss_bytes_per_logit=10.0,
        source="nanotron: DP all-reduce bucketed in backward; eager PyTorch kernels; ZeRO-1 "
        "(src/nanotron/optim/zero.py ZeroDistributedOptimizer) updates its shard of the all-reduced "
        "gradient, then step() all-gathers the parameters (_all_gather_params), after the backward; its "
        "sharded_cross_entropy (parallel/tensor_parallel/functional.py) casts the bf16 logits to fp32 and "
        "subtracts the max out of place: 2 + 4 + 4 bytes per logit at the loss",
    ),
    "torchtitan": FrameworkProfile(
        dp_overlap=0.9, param_gather_overlap=0.9, zero3_overlap=0.9, zero3_keep_params_with_pp=True,
        selective_alternate_mm=True, sp_batch_copies=True, loss_bytes_per_logit=10.0,
        source="torchtitan FSDP2: prefetching all-gathers and overlapped reduce-scatter; with PP the "
        "parameters stay gathered for the step (torchtitan/distributed/fsdp.py reshard policy 'default'); its "
        "loss is F.cross_entropy on pred.float(): the bf16 logits, the fp32 copy and the fp32 log-softmax it "
        "saves for backward, 2 + 4 + 4 bytes per logit",
    ),
    "flash-attn": FrameworkProfile(
        dp_overlap=0.8, elementwise_passes_per_h=8.0, mlp_activation_in_gemm=True,
        source="flash-attention training scripts (Lightning DDP; Dao-AILab/flash-attention training/README.md: "
        "optimized MLP, LayerNorm, cross-entropy and rotary layers). Each sublayer's dropout + residual add + "
        "LayerNorm is one fused kernel (dropout_add_layer_norm: read the input and the residual, write the output "
        "and the new residual: 4 passes, 8 per layer) and the GELU runs in the fused_dense GEMM epilogue "
        "(csrc/fused_dense_lib: 'fused matmul + bias + gelu'); its GPT experiment configs turn both on "
        "(training/configs/experiment/pile/gpt3s-flash.yaml: fused_dropout_add_ln, fused_mlp, fused_bias_fc)",
    ),
    "meta-internal": FrameworkProfile(**_MEGATRON_TE),
}


def framework_profile(name: str | None) -> FrameworkProfile:
    return PROFILES.get((name or "generic").strip().lower() or "generic", PROFILES["generic"])


def gpu_runs_fused_attention(gpu) -> bool:
    """Whether ``gpu`` (an AcceleratorSpec) can run flash / cuDNN fused attention: Ampere or newer
    (FlashAttention README: 'Ampere, Ada, or Hopper GPUs'; Transformer Engine's fused backends need sm80+).
    Told by the hardware, not the name: pre-Ampere GPUs have no bf16 tensor cores (Volta, Turing: their
    profiles list bf16 in unsupported_precisions), so a profile YAML given by path is treated like its
    catalog twin."""
    return gpu.supports_precision("bf16")


def uses_flash_attention(framework: str | None, gpu) -> bool:
    """Flash attention needs Ampere or newer (``gpu_runs_fused_attention``); old stacks lack it."""
    return gpu_runs_fused_attention(gpu) and framework_profile(framework).flash_attention
