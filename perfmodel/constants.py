"""Hardware-efficiency constants shared by all frameworks, each with a physical meaning.

Defaults come from public measurements; ``perfmodel calibrate`` refits them and writes them
into a calibrated profile, which ``--calibration FILE`` applies.
"""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

#: the fewest nodes at which a fabric may halve its bandwidth (the lower bound of the congestion fits,
#: ``perfmodel.calibrate.fit_collectives``); below it a value is a typo, not a fabric
MIN_CONGESTION_NODES = 0.1


class CostConstants(BaseModel):
    """Every value finite and within a physical range (congestion_nodes alone may be .inf: non-blocking);
    efficiencies have a floor so that a typo cannot turn a step into centuries."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    matmul_training_efficiency: float = Field(
        0.85, ge=0.05, le=1.2, allow_inf_nan=False,
        description="Achieved / best-shape (MAMF) matmul rate on training GEMMs: data- and weight-gradient "
        "GEMMs, odd shapes and clock throttling under sustained load.",
    )
    attn_efficiency_max: float = Field(
        0.33, ge=0.01, le=1, allow_inf_nan=False,
        description="Flash-attention fraction of dense peak at long sequences, fwd+bwd (with attn_bwd_over_fwd "
        "the forward rate), for a GPU whose profile states no attention_efficiency_max of its own (kernels.csv "
        "has no attention row for it: Blackwell). Default: the newest architecture kernels.csv measures, H100 "
        "SXM5 FlashAttention-2 fwd+bwd 328 / 989 TFLOP/s (A100: 189 / 312 = 0.61). The fraction falls with each "
        "generation, whose tensor cores outgrow the exponential units and shared memory that attention also "
        "waits on (FlashAttention-4, Zadouri et al. 2026, arXiv 2603.05451: 'asymmetric hardware scaling' on "
        "Blackwell). A calibration fits it on measured runs of such GPUs.",
    )
    attn_seq_half: float = Field(
        512.0, gt=0, le=1e8, allow_inf_nan=False, description="Key length (tokens) at which flash attention reaches half its best rate."
    )
    attn_bwd_over_fwd: float = Field(
        2.5, ge=0.1, le=100, allow_inf_nan=False, description="Flash-attention backward / forward time (5 vs 2 matmuls). "
        "With it a measured fwd+bwd rate is the forward rate: FlashAttention's benchmark counts fwd+bwd as 3.5x "
        "the forward FLOPs (benchmarks/benchmark_flash_attention.py flops(): 2.5 f for bwd), the same ratio.")
    nonflash_attn_efficiency: float = Field(
        0.45, ge=0.01, le=1, allow_inf_nan=False, description="Batched-GEMM attention (QK^T, AV) fraction of peak, unfused softmax aside."
    )
    misaligned_bmm_efficiency: float = Field(
        0.25, ge=0.01, le=1, allow_inf_nan=False,
        description="Batched-GEMM attention (no flash kernels) with a head dimension that is not a multiple of 8 "
        "elements (16 bytes of fp16/bf16): fraction of the aligned rate. cuBLAS's tensor-core kernels need "
        "16-byte-aligned leading dimensions (cuBLAS docs, 'Tensor Core Usage'). The default 0.25, the "
        "CUDA-core / tensor-core fp16 peak of A100 and V100 (78 / 312, 31.4 / 125 TFLOP/s), bounds the fallback "
        "kernels from above; the runs fit sets an effective value from BLOOM's head-count sweeps (head dims "
        "108, 150, 450; A100, sequence 2048): 0.095. It scales the s^2 attention FLOPs, so at long sequences "
        "a misaligned head dominates the step.",
    )
    elementwise_bytes_per_h: float = Field(
        16.0, gt=0, le=1e4, allow_inf_nan=False, description="Passes over an s*b*h activation per layer forward (norms, residuals, dropout, rope)."
    )
    nvlink_efficiency: float = Field(
        0.80, ge=0.01, le=1.2, allow_inf_nan=False, description="Achieved NVLink busbw / link rate (H100 ring ~370 of 450 GB/s, nccl-tests#212)."
    )
    congestion_nodes: float = Field(
        float("inf"), ge=MIN_CONGESTION_NODES,
        description="Scale-out fabric for which no calibration is known: node count at which a collective "
        "spanning that many nodes gets half the per-NIC bandwidth. Unknown fabrics are taken as "
        "non-blocking (inf); measured ones get theirs from collective benchmarks (HF EFA cluster: ~11).",
    )
    nic_efficiency: float = Field(
        0.90, ge=1e-3, le=1, allow_inf_nan=False, description="Achieved inter-node busbw / NIC line rate.")
    hbm_efficiency: float = Field(
        0.80, ge=0.01, le=1, allow_inf_nan=False, description="Achieved / datasheet HBM bandwidth for streaming kernels.")
    optimizer_bytes_per_param: float = Field(
        36.0, gt=0, le=1e4, allow_inf_nan=False,
        description="HBM traffic of one Adam step per parameter: read p, g, m, v in fp32 (16 B), write p, m, v "
        "(12 B), write the 16-bit copy (2 B), read the gradients for the clipping norm and zero them (6 B).",
    )
    fp8_matmul_efficiency_ratio: float = Field(
        0.88, ge=0.01, le=1.2, allow_inf_nan=False,
        description="(fp8 MAMF / fp8 peak) / (bf16 MAMF / bf16 peak) for a GPU whose profile has no measured "
        "fp8_matmul_efficiency_max: H100 70.9% / 80.3% (kernels.csv); Blackwell measures ~0.95-0.99.",
    )
    fp4_matmul_efficiency_ratio: float = Field(
        0.88, ge=0.01, le=1.2, allow_inf_nan=False,
        description="Like fp8_matmul_efficiency_ratio, for 4-bit (nvfp4) GEMMs against their 4-bit peak "
        "(recipes keep some GEMMs and the quantization in higher precision).",
    )
    host_link_efficiency: float = Field(
        0.8, ge=0.01, le=1, allow_inf_nan=False, description="Achieved / nominal GPU-host bandwidth for pinned async copies (PCIe ~80%)."
    )
    tp_internode_efficiency: float = Field(
        1.0, ge=1e-4, le=1, allow_inf_nan=False,
        description="Achieved / available NIC bandwidth of tensor-parallel collectives that cross nodes: many "
        "mid-size messages on the critical path, each a full ring over the node boundary; the runs fit sets it "
        "from the runs whose TP group spans nodes (whatever their stack) on fabrics without a value of their "
        "own (networks.<fabric>.tp_internode_efficiency).",
    )
    host_memory_gib_per_gpu: float = Field(
        128.0, gt=0, le=1e7, allow_inf_nan=False,
        description="Host memory a GPU may fill with offloaded activations (Kuaishou's nodes: >= 1 TB for 8 GPUs).",
    )


DEFAULT_CONSTANTS = CostConstants()
