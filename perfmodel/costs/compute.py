"""Compute time of the kernels of one transformer layer on one GPU.

* GEMMs: a roofline over (FLOPs at the achievable tensor-core rate, bytes at HBM bandwidth),
  where the achievable rate is the best-shape measured rate (MAMF, stas00/ml-engineering) times
  a tile- and wave-quantization factor: C = M x N is cut into output tiles spread over the SMs in
  waves; a partly filled tile and a last, partial wave leave tensor cores idle (NVIDIA, "Matrix
  Multiplication Background User's Guide", sec. 3.1 "Tile Quantization" and 3.2 "Wave
  Quantization"). cuBLAS picks the tile per shape among several (sec. 2.3 "Typical Tile Dimensions
  In cuBLAS"), large ones for large GEMMs and down to 64 x 128 for small ones; the model quantizes at
  that smallest common tile, at the best-shape rate: a small GEMM is not costed as a few large tiles on
  a few SMs, and a large one, whose quantization loss is small whatever the tile, runs at its measured
  rate. (Taking the least padded work over 128 x 256, 128 x 128 and 64 x 128 at one rate always picks
  64 x 128, whose padding is the least; a rate per tile size is not measured in the data.)
* Flash attention: FLOPs at a fraction of peak that rises with the sequence length, as the
  FlashAttention-2/3 benchmarks show (Dao 2023, Fig. 4-7; shared/data/kernels/kernels.csv).
* Element-wise work (norms, activations, residuals, dropout): bytes moved at HBM bandwidth.
"""
from __future__ import annotations

import numpy as np

#: the output tile (rows x columns of C) the quantization is counted in: cuBLAS's smallest common one
TILE_M = 64
TILE_N = 128
KERNEL_LAUNCH_S = 4e-6  # per kernel, fixed overhead (launch + tail), typical CUDA figure


def wave_efficiency(m, n, n_sms):
    """Fraction of the tensor-core time doing useful work: m n over the padded work waves x SMs x
    TILE_M x TILE_N, where waves = ceil(tiles / SMs). The time it gives, 2 k waves SMs TILE_M TILE_N / rate,
    never falls as m or n grows (a partly filled tile costs a full one)."""
    m, n = np.asarray(m, dtype=float), np.asarray(n, dtype=float)
    waves = np.ceil(np.ceil(m / TILE_M) * np.ceil(n / TILE_N) / n_sms)
    return m * n / (waves * n_sms * (TILE_M * TILE_N))


def gemm_time_s(m, n, k, peak_flop_per_s, matmul_efficiency_max, n_sms, hbm_bytes_per_s, bytes_per_element=2.0,
                output_bytes_per_element=None):
    """Time of C[m,n] = A[m,k] B[k,n]: max(2mnk / achievable rate, bytes / HBM bandwidth) + launch.
    ``bytes_per_element``: A's and B's; ``output_bytes_per_element``: C's (None: the same)."""
    m = np.asarray(m, dtype=float)
    flops = 2.0 * m * n * k
    rate = peak_flop_per_s * matmul_efficiency_max * wave_efficiency(m, n, n_sms)
    out_bytes = bytes_per_element if output_bytes_per_element is None else output_bytes_per_element
    bytes_moved = bytes_per_element * (m * k + k * n) + out_bytes * m * n
    return np.maximum(flops / rate, bytes_moved / hbm_bytes_per_s) + KERNEL_LAUNCH_S


HEAD_DIM_ALIGN = 8.0
"""Elements of a head dimension the attention kernels need it to be a multiple of: 16 bytes of 16-bit
data, the tensor-core kernels' load width (cuBLAS "Tensor Core Usage" restrictions; NVIDIA Matrix
Multiplication Background guide, "Tensor Core Requirements"; FlashAttention and cuDNN's fused
attention require it)."""

FLASH_MAX_HEAD_DIM = 256.0
"""Largest head dimension flash attention takes (FlashAttention-2 README: "All head dimensions up to
256"; Transformer Engine turns its flash backend off above it)."""

ATTN_HEAD_DIM_HALF = 18.0
"""Head dim at which flash attention would run at half its head-dim-128 rate: smaller heads do
less math per byte of Q/K/V. From kernels.csv (FA2 fwd+bwd, causal, 16K): hd64/hd128 = 284/328
on H100 (fits 23.5) and 171/189 on A100 (fits 13); 18 is their mean."""


def flash_attention_efficiency(seq_len_kv, attn_efficiency_max, attn_seq_half, head_dim=128.0):
    """Achieved fraction of peak of a flash-attention kernel at key length s_kv and head dim d:
    eff_max * s / (s + s_half) * [d / (d + d_half)] / [128 / (128 + d_half)], eff_max being the
    rate at d = 128. Short sequences cannot fill the SMs (FlashAttention-2 Fig. 5-6)."""
    s = np.asarray(seq_len_kv, dtype=float)
    d = np.asarray(head_dim, dtype=float)
    head = (d / (d + ATTN_HEAD_DIM_HALF)) / (128.0 / (128.0 + ATTN_HEAD_DIM_HALF))
    return attn_efficiency_max * s / (s + attn_seq_half) * head


def elementwise_time_s(bytes_moved, hbm_bytes_per_s, hbm_efficiency=0.8):
    """Memory-bound kernels at a fraction of HBM bandwidth (~80% is typical of a stream copy)."""
    return bytes_moved / (hbm_bytes_per_s * hbm_efficiency)
