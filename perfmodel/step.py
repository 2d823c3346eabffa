"""The one place that composes the cost functions into the time and memory of a training step.

``step_costs`` takes a mapping of equally-shaped (or broadcastable) numpy arrays, one entry per
input named in ``STEP_INPUTS``, and returns arrays: every part of the time and memory breakdown,
their totals (the sums of the parts, so they cannot drift apart), throughput, MFU and ``fits``.
The same function serves one ``estimate`` (arrays of length 1), ``validate`` (one element per
measured run) and the search (one element per candidate configuration).

Schedule (Narayanan et al. 2021, Sec. 2.2): with m = B / (d b) micro-batches and v virtual
stages, one pipeline stage takes (m + (p-1)/v) (t_f + t_b), where the (p-1)/v slots are the
bubble. The gradient reduction, ZeRO gathers and the optimizer step follow, minus the part the
framework overlaps with compute.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np

from perfmodel.costs.comm import OPS, collective_time_s, congestion_factor, group_layout
from perfmodel.costs.compute import (
    FLASH_MAX_HEAD_DIM, HEAD_DIM_ALIGN, elementwise_time_s, flash_attention_efficiency, gemm_time_s,
)
from perfmodel.costs.flops import (
    model_flops_per_token,
    parameter_count,
)
from perfmodel.costs.pipeline_split import (
    balanced_split_table, busiest_of_split, fill_drain_stage_s, uneven_busiest_stage,
)
from perfmodel.costs.memory import (
    RECOMPUTE_BALANCED,
    RECOMPUTE_FULL,
    RECOMPUTE_SELECTIVE,
    layer_activation_bytes,
    in_flight_layers,
    last_stage_in_flight_layers,
    offloaded_layers,
    model_state_bytes,
    fp32_grad_copy_bytes,
)
from perfmodel.units import GIB_BYTES
from perfmodel.zeropp import (
    ZERO3_PARTS,
    dp_ranks_per_domain,
    hpz_members_dividing,
    hpz_secondary_bytes,
    layer_weight_numels,
    zero3_microbatch,
)

#: inputs of ``step_costs``; all numeric arrays (booleans as 0/1)
STEP_INPUTS = (
    # model
    "n_layers", "hidden_size", "ffn_hidden_size", "n_heads", "n_kv_heads", "vocab_size",
    "mlp_matrices", "tied_embeddings", "parallel_block", "biases", "dropout",
    # job
    "seq_len", "global_batch", "gemm_peak_flop_per_s", "bf16_peak_flop_per_s",
    # hardware / cluster
    "matmul_efficiency_max", "n_sms", "hbm_bytes_per_s", "hbm_capacity_bytes",
    "nvlink_bytes_per_s", "nic_bytes_per_s_per_gpu", "nvlink_domain_gpus", "job_nodes", "congestion_nodes",
    "congestion_max_nodes",
    "ring_inter_node", "latency_log2_coeff", "ring_step_latency_s", "ll_latency_s", "ll_bandwidth_ratio",
    "intra_latency_s", "inter_latency_s",
    # parallel
    "tp", "pp", "dp", "cp", "vpp", "micro_batch", "sp", "zero_stage", "recompute", "qwz", "hpz", "qgz",
    "cp_ulysses", "offload_fraction", "host_link_bytes_per_s", "host_memory_bytes_per_gpu",
    # framework
    "flash_attention", "kernel_efficiency", "tp_overlap", "dp_overlap", "param_gather_overlap", "zero1_all_reduce_grads",
    "fp8_saves_quantized_inputs",
    "pp_overlap", "layer_overhead_s", "microbatch_overhead_s", "p2p_overhead_s", "step_overhead_s", "grad_bytes_per_param",
    "runtime_reserved_bytes", "loss_bytes_per_logit", "zero3_overlap", "zero3_step_latency_s", "zero3_max_live_params",
    "zero3_keep_params_with_pp", "pp_reduces_after_backward", "stack_parallel_block", "selective_alternate_mm",
    "sp_batch_copies", "pp_balances_head",
    "elementwise_passes_per_h", "mlp_activation_in_gemm", "flash_pads_misaligned_heads",
    # constants
    "attn_efficiency_max", "attn_fwd_speedup", "attn_bwd_speedup", "attn_seq_half", "attn_bwd_over_fwd",
    "nonflash_attn_efficiency", "misaligned_bmm_efficiency",
    "elementwise_bytes_per_h", "hbm_efficiency", "optimizer_bytes_per_param", "fp8_matmul_efficiency_ratio",
    "matmul_training_efficiency", "fp4_matmul_efficiency_ratio", "tp_internode_efficiency",
)

TIME_PARTS = (
    "compute_s", "recompute_s", "tp_comm_s", "cp_comm_s", "offload_s", "pp_comm_s", "bubble_s",
    "dp_comm_s", "optimizer_s", "overhead_s",
)
MEMORY_PARTS = ("weights_gib", "gradients_gib", "optimizer_gib", "activations_gib", "reserved_gib")

ACT_BYTES = 2.0  # 16-bit activations (fp8 recipes still keep activations in bf16)
#: casting a 16-bit operand to a GEMM's low precision: bytes read per element, and written per element of
#: each low-precision copy (fp8 / mxfp8: 1 byte; nvfp4: half a byte and one e4m3 scale per 16 elements)
CAST_READ_BYTES, FP8_ELEMENT_BYTES, FP4_ELEMENT_BYTES = 2.0, 1.0, 0.5 + 1.0 / 16.0


class _Subset:
    """The elements of a broadcast batch where ``mask`` holds: a costly term is computed on them only
    (``take`` its inputs) and scattered back (``put``), so a search pays for it only where it applies."""

    def __init__(self, mask, *shaped):
        self.shape = np.broadcast(mask, *shaped).shape
        self.idx = np.flatnonzero(np.broadcast_to(mask, self.shape))

    def take(self, x) -> np.ndarray:
        x = np.asarray(x, dtype=float)
        if x.size == 1:  # a scalar input (a search's model and hardware): a zero-stride view of the subset's
            # length, so that it lines up with the subset's arrays (a stacked tensor axis included)
            return np.broadcast_to(x.reshape(()), self.idx.shape) if self.shape else x.reshape(())
        return np.broadcast_to(x, self.shape).reshape(-1)[self.idx]

    def put(self, base, vals) -> np.ndarray:
        out = np.broadcast_to(np.asarray(base, dtype=float), self.shape).astype(float).reshape(-1)
        out[self.idx] = np.broadcast_to(vals, self.idx.shape)
        return out.reshape(self.shape)


#: the step inputs a fabric's calibration may hold a value of one collective's own for
#: (``networks.<fabric>: {<op>.<key>: ...}``, what ``perfmodel calibrate --nccl-tests`` fits per op;
#: ``"<op>.<input>"`` keys of the inputs)
OP_NETWORK_INPUTS = (
    "nvlink_bytes_per_s", "nic_bytes_per_s_per_gpu", "intra_latency_s", "inter_latency_s", "congestion_nodes",
    "congestion_max_nodes", "ring_inter_node", "latency_log2_coeff", "ring_step_latency_s", "ll_latency_s",
    "ll_bandwidth_ratio",
)


def op_input_keys(inputs: Mapping) -> list[str]:
    """The optional ``"<op>.<input>"`` keys among ``inputs``: a fabric's values of one collective's own
    (``estimate.op_network_arrays``), which ``step_costs`` uses for that collective where given."""
    return [k for k in inputs if "." in k and k.split(".", 1)[0] in OPS]


def stack_inputs(rows: list[Mapping]) -> dict[str, np.ndarray]:
    """One batch of step inputs from per-configuration dicts (``estimate.build_inputs``): every
    STEP_INPUTS key, and a collective's own fabric values where some row has them (the others take their
    op-less value there)."""
    op_keys = sorted({k for r in rows for k in op_input_keys(r)})
    return {**{k: np.array([r[k] for r in rows], dtype=float) for k in STEP_INPUTS},
            **{k: np.array([op_value(r, k) for r in rows], dtype=float) for k in op_keys}}


def op_value(row: Mapping, key: str) -> float:
    """``row``'s value of an ``"<op>.<input>"`` key: the collective's own, else the op-less ``<input>``."""
    return row.get(key, row[key.split(".", 1)[1]])


def step_costs(x: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Time and memory of one training step for every element of the input arrays."""
    f64 = {k: np.asarray(x[k], dtype=float) for k in STEP_INPUTS}
    # a fabric's values of one collective's own ("<op>.<input>", estimate.op_network_arrays), where given
    f64.update({k: np.asarray(x[k], dtype=float) for k in op_input_keys(x)})
    f64["job_gpus"] = f64["tp"] * f64["pp"] * f64["dp"] * f64["cp"]  # where a group may straddle NVLink domains
    # the batch's shape over every input (a network value may vary where the layout does not): a
    # zero-stride view that the subsets below broadcast their masks to
    batch = np.broadcast_to(0.0, np.broadcast_shapes(*{arr.shape for arr in f64.values()}))
    L, h, ffn = f64["n_layers"], f64["hidden_size"], f64["ffn_hidden_size"]
    a, kv, V, mm = f64["n_heads"], f64["n_kv_heads"], f64["vocab_size"], f64["mlp_matrices"]
    s, B = f64["seq_len"], f64["global_batch"]
    tp, pp, dp, cp, v, b = (f64[k] for k in ("tp", "pp", "dp", "cp", "vpp", "micro_batch"))
    sp, zero, rc = f64["sp"], f64["zero_stage"], f64["recompute"]
    flash, ke = f64["flash_attention"], f64["kernel_efficiency"]
    peak, peak16 = f64["gemm_peak_flop_per_s"], f64["bf16_peak_flop_per_s"]
    hbm = f64["hbm_bytes_per_s"]
    eff_max, sms = f64["matmul_efficiency_max"], f64["n_sms"]

    # low-precision GEMMs reach a smaller fraction of their (doubled) peak: MAMF fp8/bf16 ratio
    # (4-bit peaks are ~4x the 16-bit ones, 8-bit ~2x)
    lowp, fp4 = peak > peak16, peak > 2.5 * peak16
    lowp_ratio = np.where(fp4, f64["fp4_matmul_efficiency_ratio"],
                          np.where(lowp, f64["fp8_matmul_efficiency_ratio"], 1.0))
    # bytes an element of a low-precision operand copy takes
    lowp_element_bytes = np.where(fp4, FP4_ELEMENT_BYTES, FP8_ELEMENT_BYTES)
    gemm_eff = eff_max * f64["matmul_training_efficiency"] * lowp_ratio

    # a low-precision GEMM reads its operands in that precision and writes its 16-bit output
    operand_bytes = np.where(lowp, lowp_element_bytes, ACT_BYTES)

    def gemm(m_, n_, k_):
        return gemm_time_s(m_, n_, k_, peak, gemm_eff, sms, hbm, operand_bytes, ACT_BYTES) / ke

    placements: dict = {}  # one placement per process group (its arrays kept alive, so ids stay unique)
    fabrics: dict = {}  # one set of fabric values per (collective, net) (net kept alive: its id stays unique)
    # power-of-two parallel sizes and NVLink domains: every group's block lines up with the domains
    # (hpz is 0 when off: a size of 1 there)
    # (frexp's mantissa is exactly 0.5 for a power of two)
    lined_up = all(bool(np.all(np.frexp(np.maximum(w, 1.0))[0] == 0.5))
                   for w in (tp, pp, dp, cp, f64["nvlink_domain_gpus"], f64["hpz"]))

    def coll(op, size, n, stride, nic_scale=1.0, net=f64):
        """Two-tier collective on the cluster described by ``net`` (f64, or a subset of it)."""
        key = (id(n), id(stride), id(net))
        if key not in placements:
            placements[key] = (n, stride, group_layout(n, stride, net["nvlink_domain_gpus"], net["job_gpus"], lined_up))
        fkey = (op, id(net))
        if fkey not in fabrics:  # the fabric's values for this collective, where its calibration has its own
            fabrics[fkey] = (net, {name: op_value(net, f"{op}.{name}") for name in OP_NETWORK_INPUTS})
        v = fabrics[fkey][1]
        return collective_time_s(
            op, size, n, stride, net["nvlink_domain_gpus"], v["nvlink_bytes_per_s"],
            v["nic_bytes_per_s_per_gpu"] * nic_scale, v["intra_latency_s"], v["inter_latency_s"],
            congestion_nodes=v["congestion_nodes"], congestion_max_nodes=v["congestion_max_nodes"],
            ring_inter_node=v["ring_inter_node"] > 0,
            latency_log2_coeff=v["latency_log2_coeff"], ring_step_latency_s=v["ring_step_latency_s"],
            ll_latency_s=v["ll_latency_s"], ll_bandwidth_ratio=v["ll_bandwidth_ratio"], job_gpus=net["job_gpus"],
            placement=placements[key][2],
        )

    s_loc = s / cp                      # tokens of one sequence on one CP rank
    tokens = b * s_loc                  # GEMM rows per micro-batch
    n_micro = B / (dp * b)              # micro-batches per step per pipeline
    layers = np.ceil(L / pp)            # layers on the fullest stage (uneven splits round up)
    # key/value heads as one TP group holds them: a rank keeps whole heads, so a tp above the
    # head count replicates them (each rank one head); Megatron-Core, nanotron and torchtitan refuse
    # such a tp instead (rules.TP_KV_STACK), the search never proposes it
    kv_held = np.maximum(kv, tp)
    kv_w = kv_held * h / a
    sp_div = np.where(sp > 0, tp, 1.0)

    # ---- compute of one layer, one micro-batch (forward) -------------------------------------
    gemm_f = (
        gemm(tokens, (h + 2 * kv_w) / tp, h)          # QKV
        + gemm(tokens, h, h / tp)                     # attention output projection
        + gemm(tokens, (mm - 1) * ffn / tp, h)        # MLP up (and gate for SwiGLU)
        + gemm(tokens, h, ffn / tp)                   # MLP down
    )
    # attention core: 4 b s_q s_kv h / t FLOPs, causal half skipped by flash kernels; with CP
    # each rank holds s/cp queries against all s keys (load-balanced ring, Megatron CP)
    attn_flops_full = 4.0 * b * s_loc * s * h / tp
    # a head dimension d that is not a multiple of HEAD_DIM_ALIGN elements (16 bytes of fp16/bf16):
    # flash-attention's interface and PyTorch's SDPA pad q, k, v to the next multiple
    # (flash_attn_interface.py: "if head_size_og % 8 != 0: ... pad"), so their kernels do the padded
    # math; Transformer Engine instead turns its flash and cuDNN fused backends off (its backend
    # filter: "head_dim_qk % 8 = 0"; cuDNN's "requires head_dim % 8 == 0") and runs unfused attention,
    # as it does above FLASH_MAX_HEAD_DIM. Unfused, cuBLAS's batched GEMMs (QK^T and AV, whose leading
    # dimension is d) lose the tensor-core kernels' aligned loads (cuBLAS "Tensor Core Usage"
    # restrictions) and run at misaligned_bmm_efficiency of the aligned rate
    d_head = h / a
    misaligned = np.mod(d_head, HEAD_DIM_ALIGN) != 0
    bmm_eff = f64["nonflash_attn_efficiency"]
    d_padded = d_head
    if np.any(misaligned | (d_head > FLASH_MAX_HEAD_DIM)):  # (rare: skipped otherwise, keeps the search fast)
        d_padded = np.ceil(d_head / HEAD_DIM_ALIGN) * HEAD_DIM_ALIGN
        bmm_eff = bmm_eff * np.where(misaligned, f64["misaligned_bmm_efficiency"], 1.0)
        flash = flash * (d_head <= FLASH_MAX_HEAD_DIM) * (~misaligned | (f64["flash_pads_misaligned_heads"] > 0))
    attn_flash_f = 0.5 * attn_flops_full * (d_padded / d_head) / (
        peak16 * flash_attention_efficiency(
            np.where(f64["cp_ulysses"] > 0, s, s_loc), f64["attn_efficiency_max"], f64["attn_seq_half"], d_padded
        ) * ke
    )
    scores_bytes = ACT_BYTES * b * (a / tp) * s_loc * s
    attn_plain_f = attn_flops_full / (peak16 * eff_max * bmm_eff * ke) + elementwise_time_s(
        6.0 * scores_bytes, hbm, f64["hbm_efficiency"]
    )
    # an exponential-unit upgrade (Blackwell Ultra) speeds flash attention beyond its tensor-core rate:
    # the forward by attn_fwd_speedup, the backward (same exponentials, 2.5x the matmuls) by attn_bwd_speedup
    attn_f = np.where(flash > 0, attn_flash_f / f64["attn_fwd_speedup"], attn_plain_f)
    attn_b = np.where(flash > 0, f64["attn_bwd_over_fwd"] * attn_flash_f / f64["attn_bwd_speedup"], 2.0 * attn_plain_f)
    # element-wise passes: the stack's own count where it fuses them, else the shared (unfused) constant;
    # the MLP activation's pass over s b ffn is gone where it runs in the GEMM epilogue
    passes_h = np.where(f64["elementwise_passes_per_h"] > 0, f64["elementwise_passes_per_h"], f64["elementwise_bytes_per_h"])
    act_ffn = np.where(f64["mlp_activation_in_gemm"] > 0, 0.0, mm * ffn / tp)
    elem_f = elementwise_time_s(
        ACT_BYTES * tokens * (passes_h * h / sp_div + act_ffn), hbm, f64["hbm_efficiency"]
    ) / ke
    # low-precision GEMMs (fp8 / mxfp8 / nvfp4 through Transformer Engine) take their operands in that
    # precision: every linear's input is cast in the forward, every linear's output gradient in the
    # backward, and each also transposed for the other backward GEMM. Where the operand is local, one
    # fused cast + transpose pass (read 2 bytes, write the copy and its transpose); where sequence
    # parallelism gathers it (the QKV and MLP-up inputs, the projection and MLP-down output gradients),
    # the local shard is cast (read 2, write 1), gathered, and the gathered tensor transposed in the
    # backward (read and write 1) (TE Linear / grad_output_preprocess: cast_to_fp8, gather, fp8_transpose;
    # transformer_engine/common/transpose/cast_transpose). nvfp4 writes half a byte and a scale per 16.
    cast_f = cast_b = 0.0
    if np.any(lowp):  # (skipped for an all-16-bit batch: keeps the search fast)
        w = lowp_element_bytes
        cast_transpose, cast_only, transpose = CAST_READ_BYTES + 2.0 * w, CAST_READ_BYTES + w, 2.0 * w
        sp_on = sp > 0
        # bytes a token of one gathered operand costs: forward (cast) and backward (transpose), or all at once
        gathered_f = np.where(sp_on, cast_only * h / tp, cast_transpose * h)
        gathered_b = np.where(sp_on, transpose * h, 0.0)
        grad_gathered = np.where(sp_on, cast_only * h / tp + transpose * h, cast_transpose * h)
        fwd_bytes = 2.0 * gathered_f + cast_transpose * (h + ffn) / tp          # QKV and MLP-up; proj, MLP-down
        bwd_bytes = (2.0 * gathered_b + 2.0 * grad_gathered                      # their transposes; proj, MLP-down
                     + cast_transpose * ((h + 2.0 * kv_w) + (mm - 1.0) * ffn) / tp)  # QKV, MLP-up output gradients
        cast_f = np.where(lowp, elementwise_time_s(tokens * fwd_bytes, hbm, f64["hbm_efficiency"]) / ke, 0.0)
        cast_b = np.where(lowp, elementwise_time_s(tokens * bwd_bytes, hbm, f64["hbm_efficiency"]) / ke, 0.0)
    # the host's dispatch time of a layer (layer_overhead_s, fwd + bwd, split 1:2 like the FLOPs): the host
    # enqueues a layer's kernels and returns before they run (PyTorch "CUDA semantics: asynchronous
    # execution"), so it runs ahead of long kernels and its time hides; the GPU waits on it only where a
    # layer's kernels are shorter (small micro-batches, narrow layers, wide TP). A phase of a layer takes
    # the longer of the two.
    host = f64["layer_overhead_s"]
    layer_f = np.maximum(gemm_f + attn_f + elem_f + cast_f, host / 3.0)
    layer_b = np.maximum(2.0 * gemm_f + attn_b + 2.0 * elem_f + cast_b, 2.0 * host / 3.0)
    # balanced (Kuaishou): the two norms and the MLP activation are re-run: element-wise passes
    balanced_rc = elementwise_time_s(
        ACT_BYTES * tokens * (4.0 * h / sp_div + mm * ffn / tp), hbm, f64["hbm_efficiency"]
    ) / ke
    # torchtitan's op-level selective recompute re-runs the unsaved matmuls (k, o and the MLP's
    # second one in forward order) and all element-wise work, not the attention
    alt_mm = f64["selective_alternate_mm"] > 0
    if np.any(alt_mm):  # (skipped when no stack in the batch uses it: keeps the search fast)
        alternate_rc = gemm(tokens, kv_w / tp, h) + gemm(tokens, h, h / tp) + gemm(tokens, ffn / tp, h) + elem_f
        selective_rc = np.where(alt_mm, alternate_rc, attn_f)
    else:
        selective_rc = attn_f
    layer_rc = np.select(
        [rc == RECOMPUTE_FULL, rc == RECOMPUTE_SELECTIVE, rc == RECOMPUTE_BALANCED],
        [layer_f, selective_rc, balanced_rc], 0.0,
    )

    # ---- tensor parallel: 2 all-reduce-equivalents forward, 2 backward per layer ------------
    # (all-gather + reduce-scatter of s b h with SP, all-reduce without; Korthikanti Sec. 4.2.2)
    tp_bytes = ACT_BYTES * tokens * h
    # TP collectives are many mid-size messages on the critical path; across nodes a stack may reach
    # only a fraction of the NIC rate with them (tp_internode_efficiency: shared, or the fabric's own;
    # fitted on the runs)
    tp_ar = coll("all_reduce", tp_bytes, tp, 1.0, nic_scale=f64["tp_internode_efficiency"])
    # full recompute re-runs the forward's two; torchtitan's op-level selective recompute re-runs the
    # sequence-parallel all-gathers in front of the recomputed k and w3 matmuls (half a pass each)
    # and keeps the reduce-scatter outputs
    sel_alt = (rc == RECOMPUTE_SELECTIVE) & (f64["selective_alternate_mm"] > 0) & (sp > 0)
    # a parallel attention + MLP block sums the two row-parallel outputs before one reduction in forward
    # (GPT-NeoX gpt_j_residual); the backward keeps one per column-parallel input (each branch's copy)
    fwd_passes = 2.0 - ((f64["parallel_block"] > 0) | (f64["stack_parallel_block"] > 0))
    tp_passes = fwd_passes + 2.0 + fwd_passes * (rc == RECOMPUTE_FULL) + 1.0 * sel_alt
    tp_layer_s = (1.0 - f64["tp_overlap"]) * tp_passes * tp_ar
    # sequence sharding on dim 1 of [b, s, h] (torchtitan's Shard(1)): with b > 1 the gathered and the
    # to-be-scattered tensors are not contiguous per rank, so each all-gather / reduce-scatter adds a
    # copy of the whole s b h tensor (read + write); torchtitan's Llama parallelize module notes the
    # batch/sequence folding that would avoid it (pytorch/torchtitan PR #437)
    sp_copy = (f64["sp_batch_copies"] > 0) & (sp > 0) & (tp > 1) & (b > 1)
    tp_layer_s = tp_layer_s + np.where(sp_copy, tp_passes * 2.0 * elementwise_time_s(
        2.0 * ACT_BYTES * tokens * h, hbm, f64["hbm_efficiency"]), 0.0)

    # ---- context parallel: ring exchange of K,V blocks, overlapped with attention -----------
    # (each kind is costed only where some element of the batch runs it: keeps the search fast)
    ulysses_on = f64["cp_ulysses"] > 0
    kv_block = ACT_BYTES * 2.0 * b * s_loc * kv_w / tp
    cp_step = coll("send_recv", kv_block, cp, tp) if not np.all(ulysses_on) else 0.0
    cp_f = (cp - 1.0) * cp_step
    # the exchange runs on its own stream behind the attention kernels and, where the host's dispatch time
    # sets the phase (layer_f above its kernels), behind the GPU's idle wait for the host too: a faster
    # attention then leaves the phase as long and the exchange no more exposed
    ring_hide_f = attn_f + (layer_f - (gemm_f + attn_f + elem_f + cast_f))
    ring_hide_b = attn_b + (layer_b - (2.0 * gemm_f + attn_b + 2.0 * elem_f + cast_b))
    ring_layer_s = np.maximum(cp_f - ring_hide_f, 0.0) + np.maximum(2.0 * cp_f - ring_hide_b, 0.0)
    # Ulysses (Jacobs et al. 2023, arXiv 2309.14509): all-to-all of Q, K, V before attention and of
    # the output after it (heads scattered, sequence gathered), the same again in backward; not overlapped.
    # One collective per tensor (DeepSpeed's DistributedAttention: _SeqAllToAll of query, key, value and
    # the context layer), so four latencies a direction
    q_bytes = ACT_BYTES * tokens * h / tp
    kv_bytes = ACT_BYTES * tokens * kv_w / tp
    ulysses_layer_s = 2.0 * (2.0 * coll("all_to_all", q_bytes, cp, tp) + 2.0 * coll("all_to_all", kv_bytes, cp, tp)) \
        if np.any(ulysses_on) else 0.0
    cp_layer_s = np.where(ulysses_on, ulysses_layer_s, ring_layer_s)
    # a recompute that re-runs the attention re-runs its exchange too (full recompute, and Megatron's
    # selective one, which checkpoints the core attention where Transformer Engine runs the CP
    # exchange; torchtitan's op-level policy keeps the attention output): the ring's exposed forward
    # part, or Ulysses' forward all-to-alls
    reruns_attention = (rc == RECOMPUTE_FULL) | ((rc == RECOMPUTE_SELECTIVE) & np.logical_not(alt_mm))
    cp_rerun_s = np.where(ulysses_on, 0.5 * ulysses_layer_s, np.maximum(cp_f - ring_hide_f, 0.0))
    cp_layer_s = cp_layer_s + np.where(reruns_attention, cp_rerun_s, 0.0)
    # the CP exchange each phase waits on (the forward's is what a re-run repeats; the backward's is the
    # rest, the re-run's included): a phase lasts its compute plus this, and every other collective that
    # hides behind the phase (DP reduction, ZeRO gathers, offload copies) hides behind all of it -- a
    # faster attention that leaves more of the ring exposed leaves the phase as long
    cp_fwd_wait_s = cp_rerun_s
    cp_bwd_wait_s = cp_layer_s - cp_fwd_wait_s

    # logits + cross-entropy on the last stage: 2 b s h V / t forward, twice that backward
    logits_f = gemm(tokens, V / tp, h) + elementwise_time_s(6.0 * tokens * V / tp, hbm, f64["hbm_efficiency"])
    # the busiest pipeline stage and whether it runs the head (perfmodel.costs.pipeline_split): the
    # last stage holds floor(n_layers / pp) layers and the head when pp does not divide n_layers;
    # nanotron balances its split by block costs, the head included
    layer_s, head_s = layer_f + layer_b + layer_rc + tp_layer_s + cp_layer_s, 3.0 * logits_f
    busy_layers, busy_logits = uneven_busiest_stage(L, pp, layer_s, head_s)
    # memory keeps the conservative ceil(n_layers / pp) layers; nanotron's split may hold more on a stage
    mem_layers = layers
    logits_p2p = np.zeros(())  # nanotron: the head's rank is not the last, the logits cross a p2p link
    head_rank = np.zeros(())
    balanced = (f64["pp_balances_head"] > 0) & (pp > 1)
    if np.any(balanced):  # (skipped when no stack in the batch balances: keeps the search fast)
        sub = _Subset(balanced, batch, busy_layers, L, h, ffn, V, layer_s)
        # nanotron's block costs (get_block_compute_costs): a layer 4 h^2 + 3 ffn h (its Llama), the head V h
        split = balanced_split_table(sub.take(L), sub.take(pp), sub.take(4.0 * h * h + 3.0 * ffn * h), sub.take(V * h))
        bl, bh = busiest_of_split(split, sub.take(layer_s), sub.take(head_s))
        busy_layers, busy_logits = sub.put(busy_layers, bl), sub.put(busy_logits, bh)
        mem_layers = sub.put(layers, np.maximum(split["max_layers"], sub.take(layers)))
        logits_p2p = sub.put(0.0, (split["head_rank"] < sub.take(pp) - 1.0).astype(float))
        head_rank = sub.put(0.0, split["head_rank"])
    # a pipeline engine's fixed cost per micro-batch (instruction dispatch, p2p set-up, Python): pipelined runs
    # only, where it was measured (BLOOM's Megatron-DeepSpeed runs, DeepSpeed's PipelineEngine)
    compute_mb = busy_layers * (layer_f + layer_b) + busy_logits * 3.0 * logits_f + f64["microbatch_overhead_s"] * (
        pp > 1)
    recompute_mb = busy_layers * layer_rc
    tp_mb = busy_layers * tp_layer_s
    cp_mb = busy_layers * cp_layer_s

    # activation offloading (Yuan et al. ATC'24): the share alpha of a micro-batch's activations goes
    # to host memory after its forward and comes back before its backward, on a copy stream that
    # overlaps the forward / backward compute of the stage
    # Transformer Engine keeps the fp8 copies of the linear inputs in fp8/fp4 runs
    # (the bytes an element saves: 2 - 1 for an fp8 copy, 2 - 0.5625 for an nvfp4 one)
    quantized_inputs = np.where(lowp & (f64["fp8_saves_quantized_inputs"] > 0), ACT_BYTES - lowp_element_bytes, 0.0)
    act_layer, act_working = layer_activation_bytes(
        s_loc, b, h, ffn, a, kv_held, mm, tp, sp, rc, flash, f64["dropout"], seq_len_kv=s,
        quantized_inputs=quantized_inputs, selective_alternate_mm=f64["selective_alternate_mm"],
    )
    act_mb_bytes = act_layer * layers
    copy_s = f64["offload_fraction"] * act_mb_bytes / f64["host_link_bytes_per_s"]
    fwd_phase_s, bwd_phase_s = layers * (layer_f + cp_fwd_wait_s), layers * (layer_b + cp_bwd_wait_s)
    offloads = f64["offload_fraction"] > 0
    offload_fwd_wait_s = np.where(offloads, np.maximum(copy_s - fwd_phase_s, 0.0), 0.0)
    offload_bwd_wait_s = np.where(offloads, np.maximum(copy_s - bwd_phase_s, 0.0), 0.0)
    offload_mb = offload_fwd_wait_s + offload_bwd_wait_s
    # a phase that waits on its copy lasts as long as the copy, and what hides behind the phase (the DP
    # reduction, the ZeRO gathers) hides behind all of it: a faster GPU that leaves more of the copy
    # exposed leaves the phase as long, and exposes nothing more
    fwd_hiding_s, bwd_hiding_s = fwd_phase_s + offload_fwd_wait_s, bwd_phase_s + offload_bwd_wait_s

    per_mb = compute_mb + recompute_mb + tp_mb + cp_mb + offload_mb
    pp_slots = (pp - 1.0) / v
    # the bubble's (p - 1) slots run at the pace of the stages other than the busiest (fill and drain
    # of unequal stages, perfmodel.costs.pipeline_split.fill_drain_stage_s); the engine's per-micro-batch
    # overhead, which every stage pays, stays as it is, the exposed offload copies scale with the stages (below)
    busy_stage_s = busy_layers * layer_s + busy_logits * head_s
    fill_drain_s = fill_drain_stage_s(L, pp, layer_s, head_s, busy_stage_s)
    # the other stages copy and compute in proportion to their layers (a copy and its phase are both per
    # layer), so their exposed copies are the fullest stage's scaled by their mean layer count: a count, not
    # a time ratio, which a faster GEMM would tilt (the head, on one stage, shrinks), exposing more copy
    light = np.clip((L - busy_layers) / np.maximum(pp - 1.0, 1.0) / np.maximum(layers, 1.0), 0.0, 1.0)
    bubble_mb_s = per_mb - busy_stage_s - offload_mb + fill_drain_s + light * offload_mb

    # ---- pipeline: send/recv of b s h / t per micro-batch and virtual stage, both ways ------
    pp_stride = tp * cp * dp
    domain = f64["nvlink_domain_gpus"]
    # stage i's ranks are o + i * stride (placement tp-cp-dp-pp, o < stride): the hop from stage i to
    # i + 1 leaves the NVLink domain iff a domain boundary falls in (i s, (i + 2) s - 1]. The pipeline
    # runs at its slowest hop, so every stage's send is costed as a cross-domain one as soon as the
    # stages span more than one domain (pp * stride, i.e. the whole job, > domain), even when stride < domain
    def hop_stride(crosses):
        return np.where(crosses, np.maximum(pp_stride, domain), pp_stride)

    p2p_crosses = pp * pp_stride > domain
    # fixed per-message costs grow with the whole job's load on a congesting fabric (1 + nodes / N_c)
    fabric_slowdown = congestion_factor(f64["job_nodes"], f64["congestion_nodes"], f64["congestion_max_nodes"])
    p2p = coll("send_recv", ACT_BYTES * tokens * h / tp, np.minimum(pp, 2.0), hop_stride(p2p_crosses)) + np.where(
        p2p_crosses, f64["p2p_overhead_s"] * fabric_slowdown, 0.0
    )
    pp_comm = (1.0 - f64["pp_overlap"]) * 2.0 * p2p * (n_micro * v + pp - 1.0) * (pp > 1)
    # nanotron: when the balanced split leaves the head short of the last rank, the fp32 cast and the
    # loss run there and every micro-batch's b s V / t logits (and their gradient) go straight from the
    # head's stage to the last one, a hop that leaves the domain iff a boundary falls in (r s, pp s - 1]
    if np.any(logits_p2p > 0):
        last_hop_crosses = np.floor((pp * pp_stride - 1.0) / domain) > np.floor(head_rank * pp_stride / domain)
        logits_link_s = coll("send_recv", ACT_BYTES * tokens * V / tp, np.minimum(pp, 2.0), hop_stride(last_hop_crosses))
        pp_comm = pp_comm + (1.0 - f64["pp_overlap"]) * 2.0 * n_micro * logits_link_s * logits_p2p

    # ---- data parallel: gradients and ZeRO gathers -----------------------------------------
    p_layer = parameter_count(1, h, ffn, a, kv_held, 0, mm, 1, f64["biases"]) - np.where(f64["biases"] > 0, 2 * h, h)
    embed = V * h * np.where(pp > 1, 1.0, np.where(f64["tied_embeddings"] > 0, 1.0, 2.0))
    params_gpu = (mem_layers * p_layer + embed) / tp
    grad_bytes = f64["grad_bytes_per_param"]
    # CP ranks hold the same weights and see different tokens, so gradients are reduced, and ZeRO
    # shards, over the dp x cp ranks of one TP rank (Megatron-Core: DDP and the distributed optimizer
    # use get_data_parallel_group(with_context_parallel=True); torchtitan: FSDP over the dp_shard_cp
    # mesh). With the rank order tp-cp-dp that group is contiguous at stride tp.
    dpc = dp * cp
    dp_stride = tp
    # the all-reduce (no ZeRO; ZeRO-1 as an all-reduce), the reduce-scatter (ZeRO-1, ZeRO-2) and the parameter
    # all-gather (ZeRO-1, ZeRO-2), each costed only where some element of the batch runs it (ZeRO-3 has its own)
    all_reduces = (zero <= 0) | ((zero == 1) & (f64["zero1_all_reduce_grads"] > 0))
    sharded = (zero == 1) | (zero == 2)
    ar = coll("all_reduce", grad_bytes * params_gpu, dpc, dp_stride) if np.any(all_reduces) else 0.0
    rs = coll("reduce_scatter", grad_bytes * params_gpu, dpc, dp_stride) if np.any(sharded & ~all_reduces) else 0.0
    ag = coll("all_gather", 2.0 * params_gpu, dpc, dp_stride) if np.any(sharded) else 0.0
    last_bwd = bwd_hiding_s
    first_fwd = fwd_hiding_s
    # a pipeline engine that reduces after the last backward hides nothing (DeepSpeed's ReduceGrads)
    dp_overlap = np.where((pp > 1) & (f64["pp_reduces_after_backward"] > 0), 0.0, f64["dp_overlap"])
    dp_hidden_red = dp_overlap * last_bwd
    exposed_red0 = np.maximum(ar - dp_hidden_red, 0.0)
    exposed_gather = np.maximum(ag - f64["param_gather_overlap"] * first_fwd, 0.0)
    # ZeRO-1 as reduce-scatter + all-gather (Megatron distributed optimizer, DeepSpeed), or as the full
    # all-reduce followed by the parameter all-gather after the step (nanotron ZeroDistributedOptimizer)
    exposed_red1 = np.where(f64["zero1_all_reduce_grads"] > 0, exposed_red0,
                            np.maximum(rs - dp_hidden_red, 0.0)) + exposed_gather
    # ZeRO-2 reduces gradients every micro-batch (DeepSpeed stage 2); the last one is exposed
    exposed_red2 = (n_micro - 1.0) * np.maximum(rs - dp_overlap * bwd_hiding_s, 0.0) + np.maximum(
        rs - dp_hidden_red, 0.0) + exposed_gather
    # ZeRO-3 (ZeRO Sec. 7: fwd all-gather, bwd all-gather, grad reduce-scatter = 3 Psi) and ZeRO++
    # (Wang et al. 2023, arXiv 2306.10209; DeepSpeed partition_parameters.py, coalesced_collectives.py):
    # one collective per weight matrix, every micro-batch, in perfmodel.zeropp.zero3_microbatch.
    # hpZ: alpha = zero_hpz_partition_size ranks of the dp x cp group (input hpz > 1), or one NVLink
    # domain's that divide the group (hpz = 1: default_hpz_members, what --emit deepspeed writes); its
    # secondary shard serves every gather until the optimizer step, so only the first micro-batch's
    # forward gather leaves the domain.
    qwz, hpz, qgz = f64["qwz"] * (zero >= 3), f64["hpz"] * (zero >= 3), f64["qgz"] * (zero >= 3)
    dp_per_node = dp_ranks_per_domain(f64["nvlink_domain_gpus"], dpc, dp_stride)
    hpz_group = np.where(hpz > 1, np.minimum(hpz, dpc), hpz_members_dividing(dp_per_node, dpc))
    # ZeRO-3 is costed only where it is used (zero_stage 3, dp x cp > 1): the same vectorized code on
    # the subset of elements, scattered back (zeros elsewhere). This keeps the search fast.
    z3_rows = _Subset((zero >= 3) & (dpc > 1), batch, tp, L)
    # parameters kept gathered for the step (torchtitan FSDP2 with PP): the first forward's gather and
    # the last backward's reduce-scatter, each behind one micro-batch's compute
    keep = (f64["zero3_keep_params_with_pp"] > 0) & (pp > 1)
    if z3_rows.idx.size:  # (skipped for a batch without ZeRO-3: keeps the search fast)
        sub = z3_rows.take
        net_sub = {k: sub(f64[k]) for k in ("nvlink_domain_gpus", "job_gpus", *OP_NETWORK_INPUTS)}
        net_sub.update({k: sub(f64[k]) for k in op_input_keys(f64)})

        def coll_sub(op, size, n, stride):
            return coll(op, size, n, stride, net=net_sub)

        z3_sub = zero3_microbatch(
            coll_sub, lambda n_bytes: elementwise_time_s(n_bytes, sub(hbm), sub(f64["hbm_efficiency"])),
            tensors=[(sub(e_), sub(c_)) for e_, c_ in layer_weight_numels(h, ffn, a, kv_held, mm, tp)],
            layers=sub(layers), embed_numel=sub(embed / tp), dp=sub(dpc), dp_stride=sub(dp_stride),
            dp_per_node=sub(dp_per_node), hpz_group=sub(hpz_group), qwz=sub(qwz), hpz=sub(hpz), qgz=sub(qgz),
            grad_bytes=sub(grad_bytes), step_latency_s=sub(f64["zero3_step_latency_s"]),
        )
        z3 = {key: z3_rows.put(0.0, val) for key, val in z3_sub.items()}
        # prefetch / overlap_comm hide each phase's collectives behind a fraction of that phase's compute
        psi = f64["zero3_overlap"]
        fwd_compute, bwd_compute = fwd_hiding_s, bwd_hiding_s + recompute_mb
        z3_fwd_first = np.maximum(z3["fwd_global_s"] - psi * fwd_compute, 0.0) + z3["fwd_kernel_s"]
        z3_fwd_later = np.maximum(z3["fwd_secondary_s"] - psi * fwd_compute, 0.0) + z3["fwd_kernel_s"] * (hpz <= 0)
        z3_bwd = np.maximum(z3["bwd_s"] - psi * bwd_compute, 0.0) + z3["bwd_kernel_s"]
        exposed_red3 = z3_fwd_first + (n_micro - 1.0) * z3_fwd_later + n_micro * z3_bwd
        exposed_keep3 = z3_fwd_first + np.maximum(z3["red_s"] - psi * bwd_compute, 0.0) + z3["bwd_kernel_s"]
        exposed_red3 = np.where(keep, exposed_keep3, exposed_red3)
    else:
        z3, exposed_red3 = dict.fromkeys(ZERO3_PARTS, np.zeros(z3_rows.shape)), 0.0
    dp_comm = np.select(
        [zero <= 0, zero == 1, zero == 2], [exposed_red0, exposed_red1, exposed_red2], exposed_red3
    ) * (dpc > 1)

    # ---- optimizer --------------------------------------------------------------------------
    params_opt = params_gpu / np.where(zero >= 1, dpc, 1.0)
    optimizer = elementwise_time_s(f64["optimizer_bytes_per_param"] * params_opt, hbm, f64["hbm_efficiency"])

    time = {
        "compute_s": n_micro * compute_mb,
        "recompute_s": n_micro * recompute_mb,
        "tp_comm_s": n_micro * tp_mb,
        "cp_comm_s": n_micro * cp_mb,
        "offload_s": n_micro * offload_mb,
        "pp_comm_s": pp_comm,
        "bubble_s": pp_slots * bubble_mb_s,
        "dp_comm_s": dp_comm,
        "optimizer_s": optimizer,
        "overhead_s": f64["step_overhead_s"] * np.ones_like(optimizer),
    }
    iteration_time = sum(time[k] for k in TIME_PARTS)

    # ---- memory ------------------------------------------------------------------------------
    weights, grads, optim = model_state_bytes(params_gpu, dpc, zero, grad_bytes)
    # ZeRO-3 keeps up to two gathered layers (current + prefetched), capped by the framework's live-
    # parameter budget (DeepSpeed stage3_max_live_parameters, 1e9 elements by default; FSDP: no cap)
    live = np.minimum(np.minimum(2.0, layers) * p_layer / tp, f64["zero3_max_live_params"])
    weights = weights + np.where(zero >= 3, 2.0 * live * (1.0 - 1.0 / dpc), 0.0)
    # kept for the step instead: all the stage's 16-bit parameters and their unsharded gradients in the
    # reduce precision (FSDP2 accumulates unsharded gradients in reduce_dtype, fp32 in torchtitan)
    kept = (zero >= 3) & keep & (dpc > 1)
    weights = weights + np.where(kept, 2.0 * params_gpu * (1.0 - 1.0 / dpc) - 2.0 * live * (1.0 - 1.0 / dpc), 0.0)
    grads = grads + np.where(kept, grad_bytes * params_gpu * (1.0 - 1.0 / dpc), 0.0)
    # hpZ secondary partition: 16-bit weights sharded over alpha GPUs, 2 Psi / alpha bytes per GPU
    # (ZeRO++ paper, hpZ; DeepSpeed _partition_param_sec), rebuilt after every optimizer step
    hpz_secondary = np.where(hpz > 0, hpz_secondary_bytes(params_gpu, hpz_group), 0.0)
    weights = weights + hpz_secondary
    # full recompute re-materialises one layer's activations during its backward (act_working, above)
    offloaded = act_layer * offloaded_layers(L, pp, v, n_micro, f64["offload_fraction"])
    first_stage = act_layer * in_flight_layers(np.maximum(L, mem_layers * pp), pp, v, n_micro) + act_working - offloaded
    # the vocab-parallel loss: the 16-bit logits and the stack's fp32 working copies (FrameworkProfile)
    logits_bytes = f64["loss_bytes_per_logit"] * tokens * V / tp
    # the last stage's interleaved warm-up is offloaded alike (the share alpha beyond one micro-batch's layers)
    last_layers = last_stage_in_flight_layers(mem_layers, pp, v, n_micro)
    last_resident = np.minimum(mem_layers, mem_layers * n_micro)
    last_offloaded = f64["offload_fraction"] * np.maximum(last_layers - last_resident, 0.0)
    last_stage = act_layer * (last_layers - last_offloaded) + act_working + logits_bytes
    activations = np.where(pp > 1, np.maximum(first_stage, last_stage), first_stage + logits_bytes)
    # the optimizer step's fp32 copy of 16-bit gradients lives after the backward has freed the
    # activations: the peak holds the larger of the two, the excess counted with the optimizer
    step_copy = fp32_grad_copy_bytes(params_gpu, dpc, zero, grad_bytes)
    optim = optim + np.maximum(step_copy - activations, 0.0)
    memory = {
        "weights_gib": weights / GIB_BYTES,
        "gradients_gib": grads / GIB_BYTES,
        "optimizer_gib": optim / GIB_BYTES,
        "activations_gib": activations / GIB_BYTES,
        "reserved_gib": f64["runtime_reserved_bytes"] / GIB_BYTES * np.ones_like(weights),
    }
    memory_gib = sum(memory[k] for k in MEMORY_PARTS)

    n_gpus = tp * pp * dp * cp
    tokens_per_step = B * s
    # MFU numerator: PaLM (Chowdhery et al. 2022, App. B) model FLOPs, attention not causally halved
    flops_per_token = model_flops_per_token(L, h, ffn, a, kv, V, mm, s, causal=False)
    out = {**time, **memory}
    out["iteration_time_s"] = iteration_time
    out["memory_gib"] = memory_gib
    out["tokens_per_s_per_gpu"] = tokens_per_step / iteration_time / n_gpus
    out["mfu"] = flops_per_token * out["tokens_per_s_per_gpu"] / peak16
    out["host_offload_gib"] = offloaded / GIB_BYTES
    out["fits"] = (memory_gib * GIB_BYTES <= f64["hbm_capacity_bytes"]) & (
        offloaded <= f64["host_memory_bytes_per_gpu"]
    )
    out["n_micro"] = n_micro
    out["params_per_gpu"] = params_gpu
    out["hpz_secondary_gib"] = hpz_secondary / GIB_BYTES  # part of weights_gib
    out["qgz_fallback_numel"] = z3["qgz_fallback_numel"]
    # every output has the batch's shape, also where a term that an input varies in was skipped for the batch
    return {k: v if np.shape(v) == batch.shape else np.broadcast_to(v, batch.shape).copy() for k, v in out.items()}
