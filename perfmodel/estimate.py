"""The Python API for one configuration: check it, turn the specs into arrays, cost it.

    import perfmodel
    model = perfmodel.load_model("llama3-70b")
    cluster = perfmodel.ClusterSpec.build(perfmodel.load_gpu("h100-sxm5-80gb"), n_gpus=512)
    par = perfmodel.ParallelSpec(tp=8, pp=4, dp=16, vpp=5, recompute="selective")
    job = perfmodel.JobSpec(global_batch=512, seq_len=8192, framework="megatron-lm")
    est = perfmodel.estimate(model, cluster, par, job)
    est.iteration_time_s, est.time_breakdown_s, est.memory_breakdown_gib
    est.notes   # what changes the answer without an error (perfmodel.notes)
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import get_args

import numpy as np

from perfmodel import rules
from perfmodel.calibration_profile import NETWORK_OP_SPECIFIC, Calibration, load_calibration
from perfmodel.constants import CostConstants
from perfmodel.errors import InputError
from perfmodel.frameworks import FrameworkProfile, gpu_runs_fused_attention
from perfmodel.notes import capability_notes, job_notes
from perfmodel.rules import first_broken
from perfmodel.specs import AcceleratorSpec, ClusterSpec, JobSpec, ModelSpec, ParallelSpec
from perfmodel.specs.job import Precision
from perfmodel.specs.parallel import RECOMPUTE_CODES, zeropp_text
from perfmodel.step import MEMORY_PARTS, OP_NETWORK_INPUTS, TIME_PARTS, step_costs
from perfmodel.units import GIB_BYTES, US_S, gb_per_s_to_bytes_per_s, gbit_per_s_to_bytes_per_s
from perfmodel.zeropp import FP16_BYTES


def config_arrays(model: ModelSpec, cluster: ClusterSpec, par: ParallelSpec, job: JobSpec) -> dict:
    """One configuration as the scalars ``perfmodel.rules`` reads."""
    return {
        **rules.job_values(model, cluster, job),
        "tp": par.tp, "pp": par.pp, "dp": par.dp, "cp": par.cp, "vpp": par.vpp, "micro_batch": par.micro_batch,
        "sp": int(par.sp), "zero_stage": par.zero_stage, "recompute": RECOMPUTE_CODES[par.recompute],
        "cp_ulysses": int(par.cp_kind == "ulysses"), "offload_fraction": par.offload_fraction,
        "qwz": int("qwz" in par.zeropp), "hpz": int("hpz" in par.zeropp), "qgz": int("qgz" in par.zeropp),
    }


def check_model_split(model: ModelSpec, tp: int, pp: int, framework: str | None = None) -> None:
    """Rules between the model's shape and its TP/PP split (``perfmodel.rules``; the framework decides
    whether pipeline stages may hold unequal layer counts)."""
    x = {"tp": tp, "pp": pp, "n_heads": model.n_heads, "n_layers": model.n_layers,
         "framework": (framework or "").strip().lower()}
    broken = first_broken((rules.TP_HEADS, rules.PP_LAYERS), x)
    if broken is not None:
        raise InputError(broken.field, broken.message(x))


def check_precision(gpu: AcceleratorSpec, precision: str) -> None:
    """The job's precision must be one the GPU has tensor cores for (fp8 needs Hopper or later,
    mxfp8/nvfp4 Blackwell, bf16 Ampere or later): a run in another cannot happen, so nothing is
    costed at a stand-in rate."""
    if not gpu.supports_precision(precision):
        native = ", ".join(p for p in get_args(Precision) if gpu.supports_precision(p))
        raise InputError("precision", f"{gpu.name} has no {precision} tensor cores (it trains in {native})")


def check_config(model: ModelSpec, cluster: ClusterSpec, par: ParallelSpec, job: JobSpec) -> None:
    """The precision (``check_precision``) and the cross-field rules (``perfmodel.rules.CONFIG_RULES``);
    raise InputError naming the field, the rule and the values."""
    check_precision(cluster.gpu, job.precision)
    x = config_arrays(model, cluster, par, job)
    broken = first_broken(rules.CONFIG_RULES, x)
    if broken is not None:
        raise InputError(broken.field, broken.message(x))


def derive_dp(n_gpus: int, tp: int, pp: int, cp: int) -> int:
    """dp = gpus / (tp pp cp), which must be a whole number."""
    mp = tp * pp * cp
    if n_gpus % mp:
        raise InputError("dp", f"gpus must be a multiple of tp*pp*cp (gpus={n_gpus}, tp*pp*cp={mp})")
    return n_gpus // mp


def model_arrays(model: ModelSpec) -> dict[str, float]:
    return {
        "n_layers": model.n_layers,
        "hidden_size": model.hidden_size,
        "ffn_hidden_size": model.ffn_hidden_size,
        "n_heads": model.n_heads,
        "n_kv_heads": model.n_kv_heads,
        "vocab_size": model.vocab_size,
        "mlp_matrices": model.mlp_matrices,
        "tied_embeddings": float(model.tied_embeddings),
        "parallel_block": float(model.parallel_block),
        "biases": float(model.mlp == "gelu"),
        # GPT-era models train with dropout (Korthikanti's masks); Llama-family without
        "dropout": float(model.mlp == "gelu"),
    }


def cluster_arrays(
    cluster: ClusterSpec, precision: str, constants: CostConstants, congestion_nodes: float = float("inf"),
    shape: dict[str, float] | None = None,
) -> dict[str, float]:
    """Hardware inputs in SI. Fabric congestion (``congestion_nodes``) derates each collective by the
    nodes it spans (``collective_time_s``) and, through the job's node count, inflates fixed
    per-message costs under the whole job's load (``step_costs``)."""
    gpu = cluster.gpu
    return {
        "gemm_peak_flop_per_s": gpu.peak_flop_per_s(precision),
        "bf16_peak_flop_per_s": gpu.peak_flop_per_s("bf16"),
        "matmul_efficiency_max": gpu.matmul_efficiency_max,
        "n_sms": gpu.n_sms,
        "hbm_bytes_per_s": gpu.hbm_bandwidth_bytes_per_s,
        "hbm_capacity_bytes": gpu.hbm_capacity_bytes,
        "nvlink_bytes_per_s": gpu.intra_node_bandwidth_bytes_per_s * constants.nvlink_efficiency,
        "nic_bytes_per_s_per_gpu": gbit_per_s_to_bytes_per_s(cluster.scale_out_gbit_per_s_per_node)
        / cluster.gpus_per_node
        * constants.nic_efficiency,
        "congestion_nodes": congestion_nodes,
        # the congestion load is not extrapolated beyond the most nodes it was measured on
        "congestion_max_nodes": (shape or {}).get("congestion_max_nodes", math.inf),
        # the fabric's collective shape (fit_collectives): flat ring across nodes, latency growth, ring steps
        "ring_inter_node": (shape or {}).get("ring_inter_node", 0.0),
        "latency_log2_coeff": (shape or {}).get("latency_log2_coeff", 0.5),
        "ring_step_latency_s": (shape or {}).get("ring_step_latency_us", 0.0) * US_S,
        "ll_latency_s": (shape or {}).get("ll_latency_us", 0.0) * US_S,
        "ll_bandwidth_ratio": (shape or {}).get("ll_bandwidth_ratio", 0.0),
        "nvlink_domain_gpus": cluster.nvlink_domain_gpus,
        "job_nodes": float(cluster.n_nodes),  # the last one may be part-used
        "intra_latency_s": gpu.intra_node_latency_us * US_S,
        "attn_efficiency_max": gpu.attention_efficiency_max or constants.attn_efficiency_max,
        "attn_fwd_speedup": gpu.attention_fwd_speedup,
        "attn_bwd_speedup": gpu.attention_bwd_speedup,
        # fp8 GEMMs: the GPU's measured fp8 MAMF relative to its bf16 one, else the global ratio
        "fp8_matmul_efficiency_ratio": (
            gpu.fp8_matmul_efficiency_max / gpu.matmul_efficiency_max
            if gpu.fp8_matmul_efficiency_max is not None else constants.fp8_matmul_efficiency_ratio
        ),
        "host_link_bytes_per_s": gb_per_s_to_bytes_per_s(gpu.host_link_gb_per_s) * constants.host_link_efficiency,
        "host_memory_bytes_per_gpu": constants.host_memory_gib_per_gpu * GIB_BYTES,
        "inter_latency_s": cluster.scale_out_latency_us * US_S,
    }


def op_network_arrays(cal: Calibration, catalog_gpu: AcceleratorSpec, cluster: ClusterSpec, precision: str,
                      base: dict[str, float], stated_latency_us: float | None = None) -> dict[str, float]:
    """``"<op>.<input>"`` for every collective (``NETWORK_OP_SPECIFIC``) whose fabric values differ from the
    op-less ones in ``base`` (``cluster_arrays`` of the same cluster): ``step_costs`` costs that collective
    with them, as ``perfmodel comm`` does (``calibrate.comm.collective_inputs``). Empty for a fabric
    without per-op values, the usual case."""
    if not any("." in k for k in cal.networks.get((cluster.network or "").strip().lower(), {})):
        return {}
    out: dict[str, float] = {}
    for op in NETWORK_OP_SPECIFIC:
        constants, gpu, shape = cal.for_network(catalog_gpu, cluster.network, op)
        latency_us = stated_latency_us if stated_latency_us is not None else gpu.scale_out_latency_us
        op_cluster = cluster.model_copy(update={"gpu": gpu, "scale_out_latency_us": latency_us})
        congestion = cal.network_values(cluster.network, op).get("congestion_nodes",
                                                                 cal.congestion_nodes(cluster.network))
        arr = cluster_arrays(op_cluster, precision, constants, congestion, shape)
        out.update({f"{op}.{k}": arr[k] for k in OP_NETWORK_INPUTS if arr[k] != base[k]})
    return out


def framework_arrays(profile: FrameworkProfile, flash: bool, precision: str = "bf16") -> dict[str, float]:
    """The stack's STEP_INPUTS; ``precision`` picks the gradient width (``fp16_grads_in_param_dtype``) and
    the bf16 optimizer's gradient all-reduce (``bf16_zero1_all_reduce_grads``). fp8 and fp4 matmuls run
    on top of bf16 mixed precision (bf16 weights, optimizer and gradient path), as the Transformer Engine
    and torchao recipes do: for these two switches such a run is a bf16 one."""
    fp16_grads = precision == "fp16" and profile.fp16_grads_in_param_dtype
    return {
        "flash_attention": float(flash),
        "kernel_efficiency": profile.kernel_efficiency,
        "tp_overlap": profile.tp_overlap,
        "dp_overlap": profile.dp_overlap,
        "param_gather_overlap": profile.param_gather_overlap,
        "zero1_all_reduce_grads": float(profile.zero1_all_reduce_grads or (
            precision != "fp16" and profile.bf16_zero1_all_reduce_grads)),
        "fp8_saves_quantized_inputs": float(profile.fp8_saves_quantized_inputs),
        "pp_overlap": profile.pp_overlap,
        "layer_overhead_s": profile.layer_overhead_s,
        "microbatch_overhead_s": profile.microbatch_overhead_s,
        "p2p_overhead_s": profile.p2p_overhead_s,
        "step_overhead_s": profile.step_overhead_s,
        "grad_bytes_per_param": FP16_BYTES if fp16_grads else profile.grad_bytes_per_param,
        "runtime_reserved_bytes": profile.runtime_reserved_gib * GIB_BYTES,
        "loss_bytes_per_logit": profile.loss_bytes_per_logit,
        "zero3_overlap": profile.zero3_overlap,
        "zero3_step_latency_s": profile.zero3_step_latency_s,
        "zero3_max_live_params": profile.zero3_max_live_params,
        "zero3_keep_params_with_pp": float(profile.zero3_keep_params_with_pp),
        "pp_reduces_after_backward": float(profile.pp_reduces_after_backward),
        "stack_parallel_block": float(profile.parallel_block),
        "selective_alternate_mm": float(profile.selective_alternate_mm),
        "sp_batch_copies": float(profile.sp_batch_copies),
        "pp_balances_head": float(profile.pp_balances_head),
        "elementwise_passes_per_h": profile.elementwise_passes_per_h,
        "mlp_activation_in_gemm": float(profile.mlp_activation_in_gemm),
        "flash_pads_misaligned_heads": float(profile.flash_pads_misaligned_heads),
    }


def constant_arrays(constants: CostConstants) -> dict[str, float]:
    keys = (
        "attn_seq_half", "attn_bwd_over_fwd", "nonflash_attn_efficiency", "misaligned_bmm_efficiency",
        "elementwise_bytes_per_h", "hbm_efficiency", "optimizer_bytes_per_param",
        "matmul_training_efficiency", "fp4_matmul_efficiency_ratio", "tp_internode_efficiency",
    )
    return {k: getattr(constants, k) for k in keys}


def parallel_arrays(par: ParallelSpec) -> dict[str, float]:
    return {
        "tp": par.tp, "pp": par.pp, "dp": par.dp, "cp": par.cp, "vpp": par.vpp,
        "micro_batch": par.micro_batch, "sp": float(par.sp and par.tp > 1),
        "zero_stage": par.zero_stage, "recompute": RECOMPUTE_CODES[par.recompute],
        "qwz": float("qwz" in par.zeropp), "hpz": float("hpz" in par.zeropp), "qgz": float("qgz" in par.zeropp),
        "cp_ulysses": float(par.cp_kind == "ulysses" and par.cp > 1), "offload_fraction": par.offload_fraction,
    }


@dataclass(frozen=True)
class Estimate:
    """One configuration's predicted step: totals and their breakdowns (parts sum to totals)."""

    iteration_time_s: float
    tokens_per_s_per_gpu: float
    mfu: float
    memory_gib: float
    fits: bool
    time_breakdown_s: dict[str, float]
    memory_breakdown_gib: dict[str, float]
    config: dict = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    """What changes the answer without an error (``perfmodel.notes``): a stack or fabric without a
    profile, a borrowed kernel efficiency, what the stack cannot run (costed as a what-if)."""
    hbm_capacity_gib: float = math.inf
    """The GPU memory ``fits`` holds ``memory_gib`` to."""
    host_offload_gib: float = 0.0
    """Activations offloaded to host memory per GPU (``offload_fraction`` > 0), which ``fits`` also
    holds to ``host_memory_gib_per_gpu``."""
    host_memory_gib_per_gpu: float = math.inf

    @property
    def fits_gpu_memory(self) -> bool:
        return self.memory_gib <= self.hbm_capacity_gib

    @property
    def fits_host_memory(self) -> bool:
        return self.host_offload_gib <= self.host_memory_gib_per_gpu

    def to_dict(self) -> dict:
        return {
            "iteration_time_s": self.iteration_time_s,
            "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu,
            "mfu": self.mfu,
            "memory_gib": self.memory_gib,
            "fits": self.fits,
            "time_breakdown_s": self.time_breakdown_s,
            "memory_breakdown_gib": self.memory_breakdown_gib,
            "config": self.config,
            "notes": list(self.notes),
            "host_offload_gib": self.host_offload_gib,
        }


def build_inputs(
    model: ModelSpec,
    cluster: ClusterSpec,
    par: ParallelSpec,
    job: JobSpec,
    calibration: Calibration | None = None,
    hpz_partition_size: int | None = None,
) -> dict[str, float]:
    """STEP_INPUTS of one configuration. ``hpz_partition_size``: DeepSpeed's zero_hpz_partition_size
    alpha in ranks (default: the ranks of one NVLink domain that divide dp x cp, as --emit deepspeed
    writes); the step input ``hpz`` then holds alpha / tp members of the dp x cp group that ZeRO shards
    over (stride tp)."""
    cal = calibration if calibration is not None else load_calibration(None)
    catalog_gpu = cluster.gpu
    constants, gpu, shape = cal.for_network(catalog_gpu, cluster.network)
    # the calibrated GPU (and fabric) replaces the catalog one, its scale-out latency included, unless
    # the cluster states its own, as runs_to_inputs does: one configuration costs the same in
    # estimate, recommend and validate
    stated = cluster.scale_out_latency_us if cluster.scale_out_latency_stated else None
    latency_us = stated if stated is not None else gpu.scale_out_latency_us
    base_cluster = cluster
    cluster = cluster.model_copy(update={"gpu": gpu, "scale_out_latency_us": latency_us})
    hardware = cluster_arrays(cluster, job.precision, constants, cal.congestion_nodes(cluster.network), shape)
    profile = cal.framework(job.framework)
    stack_flash = profile.flash_attention if job.flash_attention is None else job.flash_attention
    flash = gpu_runs_fused_attention(cluster.gpu) and stack_flash
    inputs = {
        **model_arrays(model),
        "seq_len": job.seq_len,
        "global_batch": job.global_batch,
        **hardware,
        **op_network_arrays(cal, catalog_gpu, base_cluster, job.precision, hardware, stated),
        **parallel_arrays(par),
        **framework_arrays(profile, flash, job.precision),
        **constant_arrays(constants),
    }
    if "hpz" in par.zeropp and hpz_partition_size is not None and hpz_partition_size > 1:
        inputs["hpz"] = max(hpz_partition_size / par.tp, 1.0)
    return inputs


def step_outputs(model: ModelSpec, cluster: ClusterSpec, parallel: ParallelSpec, job: JobSpec,
                 calibration: Calibration | None = None, **overrides: float) -> dict[str, float]:
    """Every output of the step model for one configuration, with some STEP_INPUTS replaced
    (``overrides``, e.g. ``misaligned_bmm_efficiency=0.5``): a sensitivity of one input, nothing checked."""
    inputs = {**build_inputs(model, cluster, parallel, job, calibration), **overrides}
    out = step_costs({k: np.atleast_1d(np.asarray(v, dtype=float)) for k, v in inputs.items()})
    return {k: float(np.asarray(v).reshape(-1)[0]) for k, v in out.items()}


def estimate(
    model: ModelSpec | str,
    cluster: ClusterSpec,
    parallel: ParallelSpec,
    job: JobSpec,
    calibration: Calibration | None = None,
    hpz_partition_size: int | None = None,
) -> Estimate:
    """Predict one training step. Raises InputError if the configuration breaks a rule.
    ``hpz_partition_size``: ZeRO++ hpZ secondary group in ranks (default: the ranks of one NVLink domain that
    divide dp x cp, ``zeropp.default_hpz_members``). A ``job`` whose
    precision was left out trains in the GPU's default (``JobSpec.for_gpu``); a ``parallel`` that does not
    state its ZeRO stage runs the stack's default (``rules.default_zero_stage``: 3 under torchtitan's FSDP,
    else 1), as the CLI and a fixed what-if do. ``model`` may be a catalog name or a model file, as in
    ``search`` and ``whatif``, and ``calibration`` a profile's path."""
    from perfmodel.api_inputs import api_inputs

    from perfmodel.deepspeed_config import check_hpz_partition

    if parallel is None:
        raise InputError("parallel", "is required: the ParallelSpec to estimate (perfmodel.search finds one)")
    # every spec through its validators (a model_copy(update=...) skips them); a model or calibration by path
    model, cluster, job, parallel, calibration = api_inputs(model, cluster, job, parallel, calibration)
    if hpz_partition_size is not None:
        if isinstance(hpz_partition_size, bool) or not isinstance(hpz_partition_size, int) or hpz_partition_size < 1:
            raise InputError("hpz_partition_size", f"must be a whole number of ranks >= 1 (1: the default group; "
                             f"DeepSpeed's zero_hpz_partition_size; got {hpz_partition_size!r})")
        check_hpz_partition(hpz_partition_size, cluster.n_gpus, parallel.dp * parallel.cp, parallel.tp,
                            field="hpz_partition_size")  # the API's argument (the CLI checks the config key first)
    job = job.for_gpu(cluster.gpu)
    if "zero_stage" not in parallel.model_fields_set:
        parallel = parallel.model_copy(update={"zero_stage": rules.default_zero_stage(job.framework)})
    check_config(model, cluster, parallel, job)
    cal = calibration if calibration is not None else load_calibration(None)
    inputs = build_inputs(model, cluster, parallel, job, cal, hpz_partition_size)
    out = step_costs({k: np.atleast_1d(v) for k, v in inputs.items()})
    first = {k: np.asarray(v).reshape(-1)[0] for k, v in out.items()}
    return Estimate(
        iteration_time_s=float(first["iteration_time_s"]),
        tokens_per_s_per_gpu=float(first["tokens_per_s_per_gpu"]),
        mfu=float(first["mfu"]),
        memory_gib=float(first["memory_gib"]),
        fits=bool(first["fits"]),
        time_breakdown_s={k: float(first[k]) for k in TIME_PARTS},
        memory_breakdown_gib={k: float(first[k]) for k in MEMORY_PARTS},
        config={
            "model": model.name, "gpu": cluster.gpu.name, "gpus": cluster.n_gpus,
            "gpus_per_node": cluster.gpus_per_node,
            "scale_out_gbit_per_s_per_node": cluster.scale_out_gbit_per_s_per_node,
            **parallel.model_dump(mode="json"), **job.model_dump(mode="json"),
            "zeropp": zeropp_text(parallel.zeropp),  # same form as recommend's (a comma list)
            "sp": parallel.sp and parallel.tp > 1,  # as costed: sequence parallelism needs a TP group
        },
        notes=tuple(job_notes(job, cluster, cal, model) + capability_notes(model, cluster, parallel, job)),
        hbm_capacity_gib=float(inputs["hbm_capacity_bytes"]) / GIB_BYTES,
        host_offload_gib=float(first["host_offload_gib"]),
        host_memory_gib_per_gpu=float(inputs["host_memory_bytes_per_gpu"]) / GIB_BYTES,
    )
