"""Memory per GPU: model states (ZeRO, Rajbhandari et al. 2020) and activations
(Korthikanti et al. 2022, arXiv 2205.05198, Sec. 4 and Table 2).

Activations of one layer for one micro-batch, in bytes with 16-bit activations, s b h being
the layer's input size. For GPT (MHA, ffn = 4h, GELU, dropout, no flash attention) these are
exactly Korthikanti's Table 2:

    tensor parallel           s b h (10 + 24/t + 5 a s / (h t))
    + sequence parallel       s b h (34/t + 5 a s / (h t))
    + selective recompute     s b h (10 + 24/t)        (34/t with SP)
    full recompute            2 s b h                  (layer input only; /t with SP)

Generalised term by term: the 10 s b h that TP alone does not split are the two norm inputs
(4), the QKV and first-MLP inputs (4) and the two dropout masks (2); the 24/t part is Q and
K (4, K scaled by kv/a for GQA), V (2, likewise), the projection input (2) and the MLP's
intermediate tensors (2 bytes x 2 tensors x ffn for GELU, x 3 for SwiGLU). Flash attention
(Dao et al. 2022) keeps no s x s tensors, only the fp32 log-sum-exp (4 a s b bytes).

Low-precision GEMM inputs: Transformer Engine's fp8 Linear keeps the quantized (1-byte) copy of
its input for the weight-gradient GEMM instead of the 16-bit one (transformer_engine/pytorch/
module/linear.py and layernorm_linear.py: ``saved_inputmat`` is the fp8 ``inputmat`` / its
transpose unless the recipe overrides wgrad precision). With fp8 copies the inputs of the four
linear layers shrink by half: the QKV and first-MLP inputs (2 s b h of the unsplit part), the
projection input (s b h) and the second-MLP input (s b ffn). For GPT, 34 -> 27 s b h. An nvfp4 copy
is 0.5625 bytes an element (half a byte and an e4m3 scale per 16 elements).

Balanced recompute (Yuan et al., USENIX ATC'24, "compute-memory balanced checkpointing";
Megatron-Kwai --kaimm-recompute-norm --kaimm-recompute-mlp-activation-func) re-runs the two
norms and the MLP activation in backward: the norm outputs (QKV and first-MLP inputs, 4 s b h,
split by t with SP) and the activation's output (2 s b ffn / t) are not kept.
"""
from __future__ import annotations

import numpy as np

#: bytes of an fp32 value (master weights, fp32 gradients)
FP32_BYTES = 4.0
#: DeepSpeed zero_optimization.sub_group_size default (runtime/zero/config.py): elements a ZeRO-3
#: optimizer step processes at once
ZERO3_SUB_GROUP_ELEMS = 1e9

RECOMPUTE_NONE, RECOMPUTE_SELECTIVE, RECOMPUTE_FULL, RECOMPUTE_BALANCED = 0, 1, 2, 3


def activation_bytes_per_layer(*args, **kwargs):
    """Bytes of activations one layer keeps for backward, for one micro-batch on one GPU (the first
    of ``layer_activation_bytes``)."""
    return layer_activation_bytes(*args, **kwargs)[0]


def layer_activation_bytes(
    seq_len,
    micro_batch,
    hidden_size,
    ffn_hidden_size,
    n_heads,
    n_kv_heads,
    mlp_matrices,
    tp,
    sp,
    recompute,
    flash_attention,
    dropout,
    seq_len_kv=None,
    quantized_inputs=0.0,
    selective_alternate_mm=0.0,
):
    """(kept, working): the bytes of activations one layer keeps for backward, for one micro-batch on
    one GPU, and what its backward re-materialises: under full recompute the whole layer's activations,
    under Korthikanti's selective recompute the attention core it drops (the s x s scores of non-flash
    attention), 0 under the other modes.

    ``seq_len`` is the local sequence (s / cp); ``seq_len_kv`` the key length (s) for the s x s
    attention scores of non-flash attention; ``quantized_inputs``: the bytes an element of a
    linear-layer input saves when it is kept as its low-precision copy (0: the 16-bit one is kept;
    1: an fp8 copy; 2 - 0.5625: an nvfp4 one, half a byte and a scale per 16);
    ``selective_alternate_mm`` (0/1): selective recompute is torchtitan's op-level policy
    (``selective_alternate_mm_bytes``) instead of Korthikanti's.
    """
    s = np.asarray(seq_len, dtype=float)
    s_kv = s if seq_len_kv is None else seq_len_kv
    sbh = s * micro_batch * hidden_size
    kv_ratio = np.asarray(n_kv_heads, dtype=float) / n_heads
    sp_div = np.where(sp, tp, 1.0)
    unsplit = (8.0 + 2.0 * dropout) * sbh / sp_div
    mlp_intermediate = 2.0 * mlp_matrices * s * micro_batch * ffn_hidden_size
    split = (2.0 + 2.0 * kv_ratio + 2.0 * kv_ratio + 2.0) * sbh + mlp_intermediate
    scores = np.where(
        flash_attention,
        4.0 * n_heads * s * micro_batch,
        (2.0 + 3.0 * dropout) * n_heads * s * s_kv * micro_batch,
    )
    core = scores  # what selective recompute drops and re-materialises in one layer's backward
    scores = np.where(recompute == RECOMPUTE_SELECTIVE, 0.0, scores)
    balanced = recompute == RECOMPUTE_BALANCED
    unsplit = unsplit - np.where(balanced, 4.0 * sbh / sp_div, 0.0)
    split = split - np.where(balanced, 2.0 * s * micro_batch * ffn_hidden_size, 0.0)
    # fp8 copies of the linear inputs: the projection input, and the QKV / first-MLP inputs (norm
    # outputs) and second-MLP input (activation output) unless balanced recompute already drops them
    q = np.asarray(quantized_inputs, dtype=float)
    unsplit = unsplit - np.where(~balanced, q * 2.0 * sbh / sp_div, 0.0)
    split = split - q * (sbh + np.where(balanced, 0.0, s * micro_batch * ffn_hidden_size))
    full = unsplit + (split + scores) / tp
    alt = np.asarray(selective_alternate_mm, dtype=float) > 0
    if np.any(alt):  # (skipped when no stack in the batch uses it: keeps the search fast)
        full = np.where(alt & (recompute == RECOMPUTE_SELECTIVE), selective_alternate_mm_bytes(
            s, micro_batch, hidden_size, ffn_hidden_size, n_heads, n_kv_heads, mlp_matrices, tp, sp), full)
    is_full = recompute == RECOMPUTE_FULL
    # torchtitan's op-level policy saves the flash kernel's output; without flash the s x s scores and
    # probabilities of the unfused attention are not among the saved ops and are re-materialised in
    # backward, as under Korthikanti's selective recompute
    reruns_core = (recompute == RECOMPUTE_SELECTIVE) & (~alt | ~np.asarray(flash_attention, dtype=bool))
    # under full recompute ``full`` is the no-recompute layer (neither selective nor balanced applies)
    working = np.where(is_full, full, np.where(reruns_core, core / tp, 0.0))
    return np.where(is_full, 2.0 * sbh / sp_div, full), working


def selective_alternate_mm_bytes(seq_len, micro_batch, hidden_size, ffn_hidden_size, n_heads, n_kv_heads,
                                 mlp_matrices, tp, sp):
    """Activations of torchtitan's op-level selective checkpointing (``selective_ac_option = "op"``,
    torchtitan/distributed/activation_checkpoint.py ``_custom_policy``): the outputs of the flash
    attention and of every other matmul in forward order are saved (QKV order q, k, v, o, then the MLP
    w1, w3, w2 or w1, w2), plus the outputs of TP's reduce-scatters; the rest is recomputed from the
    layer input. Saved, in 16-bit: the layer input; q and v (column-parallel, / t); the attention output
    (/ t) and its fp32 log-sum-exp; w1's output (/ t); for SwiGLU also w2's local matmul output, which
    under TP is the row-parallel partial sum, full width on every rank; with TP the outputs of the
    reduce-scatters after o and w2 (/ t), which the policy also saves. With SwiGLU and TP >= 8 this
    can keep as much as no checkpointing at all, or a little more (Llama 3.1 405B, TP 8: 63.5 against
    62.7 GiB): the saved partial sums are never needed for backward."""
    sb = np.asarray(seq_len, dtype=float) * micro_batch
    h = np.asarray(hidden_size, dtype=float)
    kv_w = np.asarray(n_kv_heads, dtype=float) * h / n_heads
    sp_div = np.where(sp, tp, 1.0)
    tp_ = np.asarray(tp, dtype=float)
    width = (
        h / sp_div                                  # layer input (checkpoint boundary)
        + (h + kv_w) / tp_                          # q, v projections
        + h / tp_                                   # attention output
        + ffn_hidden_size / tp_                     # w1
        + np.where(np.asarray(mlp_matrices) >= 3, h, 0.0)  # w2 (7th matmul): its local output
        + np.where(tp_ > 1, 2.0 * h / tp_, 0.0)     # reduce-scatter outputs of o and w2
    )
    return 2.0 * sb * width + 4.0 * sb * n_heads / tp_


def in_flight_layers(n_layers, pp, vpp, n_micro):
    """Layers' worth of activations the first pipeline stage holds at its peak.

    1F1B: p micro-batches of l/p layers = l (Narayanan et al. 2021). Interleaved with v chunks:
    l (1 + (p-1)/(p v)) (Korthikanti et al. 2022, Sec. 4.2.3). Never more than all micro-batches.
    """
    interleaved = np.where(vpp > 1, (pp - 1.0) / (pp * vpp), 0.0)
    peak = n_layers * (1.0 + interleaved)
    return np.minimum(peak, n_layers / pp * n_micro)


def last_stage_in_flight_layers(stage_layers, pp, vpp, n_micro):
    """Layers' worth of activations the last pipeline stage holds at its peak (``stage_layers`` per stage).

    1F1B: one micro-batch. Interleaved with v chunks: Megatron's schedule warms the last rank up with
    (v - 1) p chunks (``get_num_warmup_microbatches``: (p - rank - 1) 2 + (v - 1) p, microbatch groups of
    p), and its steady state runs one more forward before the first backward, so (v - 1) p + 1 chunks of
    l/(p v) layers: l/p ((v - 1) p + 1) / v. Never more than all micro-batches.
    """
    vpp = np.asarray(vpp, dtype=float)
    chunks = np.where(vpp > 1, (vpp - 1.0) * pp + 1.0, 1.0)
    return np.minimum(stage_layers * chunks / vpp, stage_layers * n_micro)


def model_state_bytes(params_per_gpu, dp, zero_stage, grad_bytes_per_param, weight_bytes_per_param=2.0,
                      optimizer_bytes_per_param=12.0):
    """(weights, gradients, optimizer states) per GPU for mixed-precision Adam
    (fp32 master weights, momentum and variance: K = 12, ZeRO paper Sec. 3.1), sharded over dp
    by ZeRO stage: 1 shards the optimizer, 2 the gradients too, 3 the weights too."""
    dp = np.asarray(dp, dtype=float)
    weights = weight_bytes_per_param * params_per_gpu / np.where(zero_stage >= 3, dp, 1.0)
    grads = grad_bytes_per_param * params_per_gpu / np.where(zero_stage >= 2, dp, 1.0)
    optim = optimizer_bytes_per_param * params_per_gpu / np.where(zero_stage >= 1, dp, 1.0)
    return weights, grads, optim


def fp32_grad_copy_bytes(params_per_gpu, dp, zero_stage, grad_bytes_per_param):
    """The optimizer step's fp32 copy of its 16-bit gradients, per GPU: 4 bytes a parameter of the
    optimizer's shard (all of the GPU's parameters below ZeRO-1) where gradients are kept in 16 bits,
    none where they are fp32 already. Megatron-LM's mixed-precision optimizers upcast the fp16 main
    grads into the fp32 main params' .grad before the update and free them at the next zero_grad
    (Megatron Core "Distributed Optimizer": fp16 param / fp16 grads 20 bytes a parameter, 4 + 16/d
    distributed, against 18 and 6 + 12/d with fp32 grads); DeepSpeed's ZeRO optimizers do the same for
    their partition (single_partition_of_fp32_groups[i].grad, set to None after the step). It lives
    while the step runs, after the backward pass has freed the activations: the peak holds the larger of
    the two (``step.py``). Under ZeRO-3 (DeepSpeed's stage3.py, the stage-3 engine that keeps 16-bit
    gradients; FSDP reduces in fp32) the step runs one sub-group at a time and frees each sub-group's copy
    before the next: at most ``sub_group_size`` elements, 1e9 by default, are upcast at once."""
    zero = np.asarray(zero_stage)
    shard = np.asarray(params_per_gpu, dtype=float) / np.where(zero >= 1, np.asarray(dp, dtype=float), 1.0)
    # (ZeRO-3 over one rank is costed as no ZeRO, as everywhere in step.py)
    shard = np.where((zero >= 3) & (np.asarray(dp) > 1), np.minimum(shard, ZERO3_SUB_GROUP_ELEMS), shard)
    return np.where(np.asarray(grad_bytes_per_param) < FP32_BYTES, FP32_BYTES * shard, 0.0)


def offloaded_layers(n_layers, pp, vpp, n_micro, offload_fraction):
    """Layers' worth of activations moved to host memory on the first stage: the share alpha of
    everything the warm-up micro-batches hold beyond the one being computed (pipeline-parallel
    aware offloading, Yuan et al. ATC'24 Sec. 3; Megatron-Kwai --kaimm-offload-activation-ratio)."""
    resident_one = np.minimum(n_layers / pp, n_layers / pp * n_micro)
    return offload_fraction * np.maximum(in_flight_layers(n_layers, pp, vpp, n_micro) - resident_one, 0.0)
