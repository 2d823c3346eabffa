"""Parameter and FLOP counts of a dense transformer.

Symbols as in Narayanan et al. 2021 (SC'21, arXiv 2104.04473) Sec. 5.1: l layers, h hidden,
a heads, V vocabulary, s sequence, B batch. For GPT (MHA, ffn = 4h, GELU) the functions below
reduce exactly to their closed forms:

* parameters  P = 12 l h^2 (1 + 13/(12h) + (V + s)/(12 l h))          (Narayanan eq. 2)
* FLOPs/iter  F = 96 B s l h^2 (1 + s/(6h) + V/(16 l h))              (Narayanan eq. 3,
  full recomputation, attention not causally masked)

Generalised here to GQA (kv heads < heads), any MLP width and SwiGLU (three h x ffn matrices).
"""
from __future__ import annotations

import numpy as np


def parameter_count(
    n_layers,
    hidden_size,
    ffn_hidden_size,
    n_heads,
    n_kv_heads,
    vocab_size,
    mlp_matrices,
    tied_embeddings,
    biases,
    pos_emb_rows=0,
):
    """Total parameters. Per layer: QKV h(h + 2 h_kv) + projection h^2 + MLP m h ffn, plus
    biases (QKV, proj, MLP) and two LayerNorms (gamma, beta) when ``biases`` (GPT family), or two
    RMSNorms (gamma only) otherwise. Embeddings V h (twice if untied) + learned positions s h."""
    h = np.asarray(hidden_size, dtype=float)
    head_dim = h / n_heads
    kv_width = n_kv_heads * head_dim
    attn_w = h * (h + 2 * kv_width) + h * h
    mlp_w = mlp_matrices * h * ffn_hidden_size
    bias = np.where(biases, (h + 2 * kv_width) + h + (mlp_matrices - 1) * ffn_hidden_size + h, 0.0)
    norms = np.where(biases, 4 * h, 2 * h)
    per_layer = attn_w + mlp_w + bias + norms
    embed = vocab_size * h * np.where(tied_embeddings, 1.0, 2.0) + pos_emb_rows * h
    final_norm = np.where(biases, 2 * h, h)
    return n_layers * per_layer + embed + final_norm


def layer_gemm_flops_per_token(hidden_size, ffn_hidden_size, n_heads, n_kv_heads, mlp_matrices):
    """Forward matmul FLOPs of one layer per token (2 FLOPs per multiply-add):
    QKV 2h(h + 2h_kv) + projection 2h^2 + MLP 2 m h ffn. GPT: 24 h^2 (Narayanan eq. 3)."""
    h = np.asarray(hidden_size, dtype=float)
    kv_width = n_kv_heads * (h / n_heads)
    return 2 * h * (h + 2 * kv_width) + 2 * h * h + 2 * mlp_matrices * h * ffn_hidden_size


def attention_flops_per_token(hidden_size, seq_len, causal):
    """Forward FLOPs of scores QK^T and of AV per token and layer: 2 * 2 s h, halved when the
    causal mask lets the kernel skip the upper triangle (flash attention does)."""
    return 4.0 * seq_len * np.asarray(hidden_size, dtype=float) * np.where(causal, 0.5, 1.0)


def logits_flops_per_token(hidden_size, vocab_size):
    """Forward FLOPs of the output projection to the vocabulary: 2 h V."""
    return 2.0 * np.asarray(hidden_size, dtype=float) * vocab_size


def model_flops_per_token(
    n_layers, hidden_size, ffn_hidden_size, n_heads, n_kv_heads, vocab_size, mlp_matrices, seq_len, causal=True
):
    """Model FLOPs per trained token (forward + backward = 3x forward), no recomputation.
    With ``causal=False`` this is the numerator of MFU in the PaLM convention (Chowdhery et al.
    2022, App. B: 6N + 12 L H Q T), which perfmodel reports; ``causal=True`` counts only the
    attention work a causal flash kernel does."""
    fwd = n_layers * (
        layer_gemm_flops_per_token(hidden_size, ffn_hidden_size, n_heads, n_kv_heads, mlp_matrices)
        + attention_flops_per_token(hidden_size, seq_len, causal)
    ) + logits_flops_per_token(hidden_size, vocab_size)
    return 3.0 * fwd


def megatron_eq3_flops_per_iteration(batch, seq_len, n_layers, hidden_size, vocab_size):
    """Narayanan et al. 2021 eq. 3 verbatim: 96 B s l h^2 (1 + s/(6h) + V/(16 l h))."""
    h = np.asarray(hidden_size, dtype=float)
    return 96.0 * batch * seq_len * n_layers * h**2 * (1 + seq_len / (6 * h) + vocab_size / (16 * n_layers * h))
