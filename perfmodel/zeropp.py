"""ZeRO-3 and ZeRO++ communication of one micro-batch, as pure numpy over arrays.

Sources (cited next to each formula below):
- [Z]   Rajbhandari et al., "ZeRO", SC'20, arXiv 1910.02054, Sec. 7: ZeRO-3 moves 3 Psi per step
        (forward all-gather, backward all-gather, gradient reduce-scatter).
- [ZPP] Wang et al., "ZeRO++", arXiv 2306.10209 (2023) and the DeepSpeed blog/tutorial
        (blogs/zeropp, docs/_tutorials/zeropp.md): cross-node volume 3M -> 0.75M (M = model bytes):
        qwZ fwd all-gather fp16 -> int8 (0.5M), hpZ bwd all-gather inside the node (0),
        qgZ gradient reduce-scatter -> hierarchical int4 all-to-all (M/Z per node, Z = 4: 0.25M).
- [DS]  DeepSpeed's implementation: ``partition_parameters.py`` (CUDAQuantizer: symmetric int8, one
        fp32 scale per group, ``target_group_size = 8000``; data and scales are two all-gathers;
        ``_partition_param_sec``: secondary shard in the parameter dtype over
        ``zero_hpz_partition_size`` consecutive ranks, used by every gather until
        ``invalidate_secondary_tensor()`` after the optimizer step), ``coalesced_collectives.py``
        (``all_to_all_quant_reduce``: swizzled int4 quant, intra-node all-to-all of data and
        scales, fused dequant-reduce-requant, inter-node all-to-all, final dequant and average;
        falls back to ``reduce_scatter_coalesced`` when numel % (2 world_size) != 0) and
        ``stage3.py`` (qgZ only when num_nodes > 1); stage-3 parameters below
        ``stage3_param_persistence_threshold`` (1e5 elements: biases, norms) stay resident.

Timing: each weight matrix is fetched by its own collective (DeepSpeed fetches per module and
parameter); every collective pays the two-tier alpha-beta time of ``costs.comm`` plus
``step_latency_s`` for each inter-node hop on its path: NCCL's cost model (src/graph/tuning.cc) gives
a ring all-gather or reduce-scatter over n ranks on N nodes (n - N) intra-node and N - 1 inter-node
steps, the latter the costly ones, so a gather inside a node (hpZ's secondary group) pays none; an
all-to-all is one round of concurrent sends (NCCL's grouped send/recv), one inter-node hop.
Prefetching (``stage3_prefetch_bucket_size``) and ``overlap_comm`` hide a phase's collectives
behind a fraction ``overlap`` of that phase's compute; the quantization kernels run on the
compute stream and are exposed.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

#: qwZ block (group) size: DeepSpeed ``CUDAQuantizer.target_group_size`` ("optimal 4k, below 8k")
QWZ_GROUP_ELEMS = 8000.0
#: bytes per element on the wire: fp16/bf16 weights, int8 (qwZ), int4 (qgZ, Z = 4 vs fp16)
FP16_BYTES, INT8_BYTES, INT4_BYTES = 2.0, 1.0, 0.5
FP32_SCALE_BYTES = 4.0


def layer_weight_numels(h, ffn, a, kv, mm, tp):
    """Elements of the fetched weight matrices of one layer (TP-split): QKV, output projection and
    ``mm`` MLP matrices, as (numel array, count) pairs. Biases and norms are below DeepSpeed's
    persistence threshold and are not fetched."""
    kv_w = kv * h / a
    return [(h * (h + 2.0 * kv_w) / tp, 1.0), (h * h / tp, 1.0), (h * ffn / tp, mm)]


def qgz_active(numel, dp, multi_node, qgz):
    """qgZ runs for a tensor only on several nodes and when numel % (2 dp) == 0 (DeepSpeed
    ``all_to_all_quant_reduce``; ``stage3.py`` checks num_nodes > 1); else reduce-scatter."""
    divisible = np.mod(np.round(numel), 2.0 * dp) == 0
    return (qgz > 0) & multi_node & divisible


#: the parts ``zero3_microbatch`` returns
ZERO3_PARTS = ("fwd_global_s", "fwd_secondary_s", "bwd_s", "red_s", "fwd_kernel_s", "bwd_kernel_s",
               "qgz_fallback_numel")


def zero3_microbatch(
    coll: Callable,
    hbm_time: Callable,
    *,
    tensors,
    layers,
    embed_numel,
    dp,
    dp_stride,
    dp_per_node,
    hpz_group,
    qwz,
    hpz,
    qgz,
    grad_bytes,
    step_latency_s,
):
    """Collective and kernel times of the ZeRO-3 (+ZeRO++) gathers and gradient reduction of one
    micro-batch. Returns a dict of arrays: fwd_global_s (forward gather from the primary shards),
    fwd_secondary_s (forward gather from the hpZ secondary shards: later micro-batches of a step),
    bwd_s (backward gather + gradient reduction), red_s (the gradient reduction alone), fwd_kernel_s,
    bwd_kernel_s, qgz_fallback_numel.

    ``coll(op, size, n, stride)`` is the two-tier collective time; ``hbm_time(bytes)`` a streaming
    kernel's time. All sizes are nccl-tests sizes (the whole gathered buffer)."""
    n_nodes = np.maximum(dp / np.maximum(dp_per_node, 1.0), 1.0)
    multi_node = n_nodes > 1.0

    def ring_hops(n):
        # inter-node steps of a ring over n ranks of the group, dp_per_node of them on each node
        return np.maximum(n / np.maximum(dp_per_node, 1.0), 1.0) - 1.0

    def zc(op, size, n, stride, inter_hops):
        return coll(op, size, n, stride) + np.where(n > 1, inter_hops * step_latency_s, 0.0)

    def gather_fp16(e, n):
        return zc("all_gather", FP16_BYTES * e, n, dp_stride, ring_hops(n))

    def gather_int8(e):
        # [DS] CUDAQuantizer: int8 data + one fp32 scale per group, two all-gathers, each its own call through
        # DeepSpeed's comm layer: each pays the per-hop latency (where that latency dominates -- a small model
        # on many nodes -- qwZ alone is slower than plain ZeRO-3). Charging the tiny scales' gather none of it
        # was tried (2026-12-02): the pairs' speedup error rose from 7.9% to 10.3% (ZeRO++ predicted too fast)
        return zc("all_gather", INT8_BYTES * e, dp, dp_stride, ring_hops(dp)) + zc(
            "all_gather", FP32_SCALE_BYTES * e / QWZ_GROUP_ELEMS, dp, dp_stride, ring_hops(dp)
        )

    def dequant_kernel(e):
        # quantize the local shard (read fp16, write int8) + dequantize the gathered buffer
        return hbm_time((FP16_BYTES + INT8_BYTES) * e * (1.0 + 1.0 / dp))

    def grad_reduce(e):
        rs = zc("reduce_scatter", grad_bytes * e, dp, dp_stride, ring_hops(dp))
        # [ZPP] Sec. qgZ / [DS] all_to_all_quant_reduce: int4 intra-node all-to-all (data + scales),
        # then the node-reduced 1/k slice across nodes (group global_j: one rank per node)
        k = np.maximum(dp_per_node, 1.0)
        intra = zc("all_to_all", INT4_BYTES * e, k, dp_stride, 0.0) + zc("all_to_all", 0.0, k, dp_stride, 0.0)
        inter = zc("all_to_all", INT4_BYTES * e / k, n_nodes, k * dp_stride, 1.0) + zc(
            "all_to_all", 0.0, n_nodes, k * dp_stride, 1.0
        )
        on = qgz_active(e, dp, multi_node, qgz)
        # swizzled quant (read fp16, write int4) + fused dequant-reduce-requant + final dequant/average
        kern = hbm_time((FP16_BYTES + INT4_BYTES) * e + INT4_BYTES * e * (1.0 + 1.0 / k) + FP16_BYTES * e / k)
        return np.where(on, intra + inter, rs), np.where(on, kern, 0.0), np.where(on, 0.0, e)

    # every fetched tensor kind at once: a leading axis over (QKV, projection, MLP, embedding),
    # so each collective is costed in one broadcast call, not one call per tensor kind
    pairs = list(tensors) + [(embed_numel, 1.0 / np.maximum(layers, 1.0))]
    e = np.stack(np.broadcast_arrays(*[np.asarray(p[0], dtype=float) for p in pairs]))
    c = np.stack(np.broadcast_arrays(*[np.asarray(p[1], dtype=float) * layers for p in pairs]))
    g16 = gather_fp16(e, dp)
    fwd = np.where(qwz > 0, gather_int8(e), g16)
    sec = gather_fp16(e, hpz_group)  # [DS] secondary shard is in the parameter dtype
    kq = np.where(qwz > 0, dequant_kernel(e), 0.0)
    red, kred, fb = grad_reduce(e)
    fwd_g = np.sum(c * fwd, axis=0)
    fwd_s = np.sum(c * np.where(hpz > 0, sec, fwd), axis=0)
    kf = np.sum(c * kq, axis=0)
    bwd = np.sum(c * (np.where(hpz > 0, sec, fwd) + red), axis=0)
    red_only = np.sum(c * red, axis=0)
    kb = np.sum(c * (np.where(hpz > 0, 0.0, kq) + kred), axis=0)
    fallback = np.sum(c * fb, axis=0) * (qgz > 0)
    return {
        "fwd_global_s": fwd_g, "fwd_secondary_s": fwd_s, "bwd_s": bwd, "red_s": red_only,
        "fwd_kernel_s": kf, "bwd_kernel_s": kb, "qgz_fallback_numel": fallback,
    }


def cross_node_volume_bytes(params, qwz=False, hpz=False, qgz=False, multi_node=True):
    """Cross-node bytes per node per step of ZeRO-3's three collectives, in units where the model is
    M = 2 params bytes ([ZPP] Table: ZeRO 3M; qwZ fwd 0.5M; hpZ bwd 0; qgZ 0.25M)."""
    m = FP16_BYTES * params
    fwd = m * (INT8_BYTES / FP16_BYTES + FP32_SCALE_BYTES / (FP16_BYTES * QWZ_GROUP_ELEMS) if qwz else 1.0)
    bwd = 0.0 if hpz else fwd
    grad = m * (INT4_BYTES / FP16_BYTES if (qgz and multi_node) else 1.0)
    return {"fwd_all_gather": fwd, "bwd_all_gather": bwd, "grad_reduce": grad, "total": fwd + bwd + grad}


def dp_ranks_per_domain(nvlink_domain_gpus, dp_cp, dp_stride):
    """Members of the dp x cp group inside one NVLink domain (ranks ``dp_stride`` apart), 1..dp_cp."""
    dpc = np.asarray(dp_cp, dtype=float)
    stride = np.asarray(dp_stride, dtype=float)
    return np.clip(np.floor(np.minimum(np.asarray(nvlink_domain_gpus, dtype=float), dpc * stride) / stride), 1.0, dpc)


def default_hpz_members(nvlink_domain_gpus, dp_cp, dp_stride):
    """hpZ's secondary group without a zero_hpz_partition_size: the members of one NVLink domain, cut to
    the largest count that divides the dp x cp group too (their gcd). DeepSpeed asserts that the group
    divides the world and builds it from consecutive ranks ([DS] utils/groups.py
    _create_zero_param_parallel_group), so a group dividing both never straddles two domains: one node on
    DGX-style machines, 72 GPUs of an NVL72 rack at dp 144, 24 of them at dp 96."""
    return hpz_members_dividing(dp_ranks_per_domain(nvlink_domain_gpus, dp_cp, dp_stride), dp_cp)


def hpz_members_dividing(per_domain, dp_cp):
    """``default_hpz_members`` from the group's members per NVLink domain (``dp_ranks_per_domain``)."""
    dpc = np.maximum(np.asarray(dp_cp, dtype=float), 1.0)
    return np.gcd(np.asarray(per_domain).astype(np.int64), dpc.astype(np.int64)).astype(float)


def hpz_secondary_bytes(params, alpha, bytes_per_param=FP16_BYTES):
    """hpZ secondary partition per GPU: 2 Psi / alpha bytes in fp16/bf16 ([ZPP] Sec. hpZ; [DS]
    ``_partition_param_sec``: ``aligned_numel // num_ranks_in_param_group`` in the param dtype)."""
    return bytes_per_param * np.asarray(params, dtype=float) / np.asarray(alpha, dtype=float)


# ---- the measured ZeRO-3 vs ZeRO++ pairs (shared/data/runs/zeropp_pairs.csv) -------------------
#: GPT-style shapes (n_layers, hidden, heads) of the ZeRO++ evaluation models. The paper's table
#: could not be retrieved. 18B: DeepSpeed docs/_tutorials/zeropp.md (--num-layers 40
#: --hidden-size 6144 --num-attention-heads 32, seq 512, fp16, --checkpoint-activations).
#: 49B/91B/138B are DERIVED (assumption): 12 L h^2 + V h rounds to the stated size, with h a
#: multiple of 768 so that every weight matrix is divisible by 2 x 384 ranks -- otherwise DeepSpeed's
#: qgZ would fall back to reduce-scatter, and the blog's identical 49B/91B/138B speedups say it did
#: not -- and 128-wide heads.
ZEROPP_EVAL_SHAPES: dict[int, tuple[int, int, int]] = {
    18: (40, 6144, 32),    # 18.1e9 + V h  = 18.4B  (tutorial)
    49: (48, 9216, 72),    # 48.9e9 + V h  = 49.4B  (derived)
    91: (50, 12288, 96),   # 90.6e9 + V h  = 91.2B  (derived)
    138: (76, 12288, 96),  # 137.7e9 + V h = 138.3B (derived)
}
#: Megatron-DeepSpeed GPT-2 vocabulary padded to a multiple of 128 (50257 -> 50304)
ZEROPP_EVAL_VOCAB = 50304
#: tutorial sequence length; "1K / 2K tokens per GPU" = micro-batch 2 / 4 sequences, one micro-batch per step
ZEROPP_EVAL_SEQ = 512
#: network name used for the pairs' fabric (DGX-2 nodes, EDR InfiniBand, 100 Gbit/s per link) and its
#: calibration entry: no fabric congestion at 24 nodes. Fitted together with the deepspeed profile's
#: zero3_overlap / zero3_step_latency_s (benchmarks/zeropp_whatif.py --fit): least_squares drives the
#: congestion load 24 / congestion_nodes to 0 (the shipped profile's generic 65-node value, fitted on
#: EFA, would cut this fabric's bandwidth by 27% and ZeRO-3 at 100 Gbit/s would run 30-45% slow).
ZEROPP_EVAL_NETWORK = "ib edr (zero++ eval)"
ZEROPP_EVAL_NETWORK_CALIBRATION = {"congestion_nodes": 1.0e12}


def eval_calibration(calibration=None):
    """The given (or shipped) calibration plus the ZeRO++ evaluation fabric's entry."""
    from perfmodel.calibration_profile import load_calibration

    cal = calibration if calibration is not None else load_calibration(None)
    nets = {**cal.networks, ZEROPP_EVAL_NETWORK: dict(ZEROPP_EVAL_NETWORK_CALIBRATION)}
    return cal.model_copy(update={"networks": nets})


def megatron_deepspeed_flops(n_layers, hidden, seq_len, vocab, sequences, checkpoint_activations=True):
    """FLOPs Megatron-DeepSpeed reports (megatron/utils.py ``throughput_calculator``):
    24 f B s L h^2 (1 + s/(6h) + V/(16 L h)), f = 4 with --checkpoint-activations (recompute counted), else 3."""
    f = 4.0 if checkpoint_activations else 3.0
    h = np.asarray(hidden, dtype=float)
    return 24.0 * f * sequences * seq_len * n_layers * h**2 * (1.0 + seq_len / (6.0 * h) + vocab / (16.0 * n_layers * h))


def pair_specs(row, zeropp: str, calibration=None):
    """(model, cluster, parallel, job) of one pairs-CSV row: ZeRO-3 over all GPUs, fp16, full recompute."""
    from perfmodel.catalog import load_gpu
    from perfmodel.specs import ClusterSpec, JobSpec, ModelSpec, ParallelSpec

    L, h, a = ZEROPP_EVAL_SHAPES[int(round(float(row["params_billion"])))]
    model = ModelSpec(
        name=f"gpt-{row['params_billion']}b-zeropp", n_layers=L, hidden_size=h, ffn_hidden_size=4 * h, n_heads=a,
        n_kv_heads=a, vocab_size=ZEROPP_EVAL_VOCAB, mlp="gelu", tied_embeddings=True,
        source="perfmodel.zeropp.ZEROPP_EVAL_SHAPES",
    )
    n = int(float(row["n_gpus"]))
    gpn = int(float(row["gpus_per_node"])) if str(row.get("gpus_per_node", "")) not in ("", "nan") else 16
    cluster = ClusterSpec.build(load_gpu("v100-sxm3-32gb"), n, gpn, float(row["scale_out_gbit_per_s_per_node"]),
                                network=ZEROPP_EVAL_NETWORK)
    tokens = {"1K": 1024, "2K": 2048}[str(row["tokens_per_gpu"]).strip()]
    mb = tokens // ZEROPP_EVAL_SEQ
    par = ParallelSpec(tp=1, pp=1, dp=n, micro_batch=mb, sp=False, zero_stage=3, zeropp=zeropp, recompute="full")
    job = JobSpec(global_batch=n * mb, seq_len=ZEROPP_EVAL_SEQ, precision="fp16", framework="deepspeed")
    return model, cluster, par, job


def pair_inputs(df, calibration=None):
    """Batched STEP_INPUTS for the pairs: rows 0..n-1 ZeRO-3, n..2n-1 ZeRO++ (all three parts),
    and the reported-FLOPs per GPU per step of each row."""
    from perfmodel.estimate import build_inputs, check_config
    from perfmodel.step import stack_inputs

    calibration = eval_calibration(calibration)
    rows, flops = [], []
    for zpp in ("", "qwz,hpz,qgz"):
        for _, r in df.iterrows():
            m, c, p, j = pair_specs(r, zpp)
            check_config(m, c, p, j)
            rows.append(build_inputs(m, c, p, j, calibration))
            flops.append(megatron_deepspeed_flops(m.n_layers, m.hidden_size, j.seq_len, m.vocab_size, p.micro_batch))
    return stack_inputs(rows), np.array(flops)


def predict_pairs(df, calibration=None, overrides: dict | None = None):
    """Predicted ZeRO-3 and ZeRO++ TFLOP/s per GPU (Megatron-DeepSpeed convention) and speedup
    for every row of the pairs CSV; ``overrides`` replaces STEP_INPUTS entries (used by the fit)."""
    import pandas as pd

    from perfmodel.step import step_costs

    x, flops = pair_inputs(df, calibration)
    x.update({k: np.broadcast_to(np.asarray(v, dtype=float), flops.shape) for k, v in (overrides or {}).items()})
    out = step_costs(x)
    tflops = flops / out["iteration_time_s"] / 1e12
    n = len(df)
    res = pd.DataFrame({
        "model": df["params_billion"].to_numpy(), "gbit_per_s": df["scale_out_gbit_per_s_per_node"].to_numpy(),
        "tokens_per_gpu": df["tokens_per_gpu"].to_numpy(),
        "zero3_tflops_pred": tflops[:n], "zero3_tflops_meas": df["zero3_tflops_per_gpu"].to_numpy(float),
        "zeropp_tflops_pred": tflops[n:], "zeropp_tflops_meas": df["zeropp_tflops_per_gpu"].to_numpy(float),
    })
    res["speedup_pred"] = res.zeropp_tflops_pred / res.zero3_tflops_pred
    res["speedup_meas"] = df["measured_speedup"].to_numpy(float)
    res["speedup_err_pct"] = 100.0 * (res.speedup_pred / res.speedup_meas - 1.0)
    res["zero3_err_pct"] = 100.0 * (res.zero3_tflops_pred / res.zero3_tflops_meas - 1.0)
    res["zeropp_err_pct"] = 100.0 * (res.zeropp_tflops_pred / res.zeropp_tflops_meas - 1.0)
    res["zeropp_fits"] = out["fits"][n:]
    return res
