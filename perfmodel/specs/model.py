"""What is trained: a dense decoder-only transformer."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from perfmodel.limits import MAX_COUNT
from perfmodel.specs.checks import not_a_boolean, strict_boolean

MlpKind = Literal["gelu", "swiglu", "relu2"]

#: upper bounds on the dimensions: far beyond any published model, small enough that the cost arrays
#: (int32 / float64) stay exact; a value past them is a typo or an overflowed number, not a model
MAX_LAYERS = 10_000
MAX_WIDTH = 1 << 20  # hidden and MLP width
MAX_HEADS = 1 << 16
MAX_VOCAB = 1 << 24
MAX_SEQ_LEN = MAX_COUNT  # context length: int32 in the search arrays, like --seq-len

#: weight matrices of size h x ffn in one MLP block, per MLP kind
MLP_MATRICES = {"gelu": 2, "relu2": 2, "swiglu": 3}


class ModelSpec(BaseModel):
    """A dense transformer. Symbols follow Narayanan et al. 2021 (SC'21): l layers, h hidden,
    a heads, V vocabulary; plus GQA key/value heads and the MLP width and kind."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1, pattern=r"\S", description="Display name, e.g. 'llama3-70b'.")
    n_layers: int = Field(gt=0, le=MAX_LAYERS, description="Transformer layers l.")
    hidden_size: int = Field(gt=0, le=MAX_WIDTH, description="Model width h.")
    ffn_hidden_size: int = Field(gt=0, le=MAX_WIDTH, description="MLP inner width (4h for GPT).")
    n_heads: int = Field(gt=0, le=MAX_HEADS, description="Attention (query) heads a.")
    n_kv_heads: int = Field(gt=0, le=MAX_HEADS, description="Key/value heads (= n_heads for MHA, fewer for GQA).")
    vocab_size: int = Field(gt=0, le=MAX_VOCAB, description="Vocabulary V.")
    mlp: MlpKind = Field(default="gelu", description="gelu: 2 matrices; swiglu: 3; relu2: 2.")
    tied_embeddings: bool = Field(default=False, description="Input and output embedding shared.")
    learned_pos_emb: bool = Field(
        default=False, description="Learned absolute position embedding (GPT-2/3); False for RoPE/ALiBi."
    )
    alibi: bool = Field(
        default=False, description="ALiBi attention biases instead of rotary embeddings (BLOOM, MPT, Falcon's "
        "alibi): no position table; a few element-wise passes like RoPE's, costed alike. Only --emit reads it.")
    max_seq_len: int | None = Field(default=None, gt=0, le=MAX_SEQ_LEN, description="Context length it was trained at.")
    parallel_block: bool = Field(
        default=False, description="Attention and MLP read the same input and their outputs are summed (GPT-J, "
        "GPT-NeoX use_parallel_residual, Falcon parallel_attn, PaLM): one tensor-parallel reduction per layer "
        "in forward instead of two (GPT-NeoX ParallelTransformerLayer: parallel_output branches, one "
        "reduce_from_model_parallel_region).")
    qkv_bias: bool = Field(
        default=False, description="Biases on the query/key/value projections only (Qwen2): h + 2 kv_w parameters "
        "a layer, not costed; Megatron-LM's --add-qkv-bias.")
    source: str | None = Field(default=None, description="Where the dimensions come from.")
    notes: tuple[str, ...] = Field(
        default=(), description="What the model's source states that the cost model does not represent (e.g. a "
        "sliding attention window): carried into every output's notes.")

    @field_validator("n_layers", "hidden_size", "ffn_hidden_size", "n_heads", "n_kv_heads", "vocab_size",
                     "max_seq_len", mode="before")
    @classmethod
    def _not_a_boolean(cls, value):
        # a quoted YAML "32" is text, as config.json's loader holds it: not a number to coerce
        if isinstance(value, str):
            raise ValueError("must be an integer, not text")
        return not_a_boolean(value, "integer")

    @field_validator("tied_embeddings", "learned_pos_emb", "alibi", "parallel_block", "qkv_bias", mode="before")
    @classmethod
    def _a_boolean(cls, value):
        return strict_boolean(value)

    @model_validator(mode="after")
    def _check(self) -> "ModelSpec":
        if self.hidden_size % self.n_heads:
            raise ValueError(
                f"hidden_size ({self.hidden_size}) must be divisible by n_heads ({self.n_heads})"
            )
        if self.n_heads % self.n_kv_heads:
            raise ValueError(
                f"n_kv_heads ({self.n_kv_heads}) must divide n_heads ({self.n_heads})"
            )
        return self

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.n_heads

    @property
    def mlp_matrices(self) -> int:
        return MLP_MATRICES[self.mlp]

    def n_params(self) -> float:
        """Parameter count (weights, biases and norms of a GPT/Llama block)."""
        from perfmodel.costs.flops import parameter_count

        return float(
            parameter_count(
                n_layers=self.n_layers,
                hidden_size=self.hidden_size,
                ffn_hidden_size=self.ffn_hidden_size,
                n_heads=self.n_heads,
                n_kv_heads=self.n_kv_heads,
                vocab_size=self.vocab_size,
                mlp_matrices=self.mlp_matrices,
                tied_embeddings=self.tied_embeddings,
                biases=self.mlp == "gelu",
                pos_emb_rows=self.max_seq_len if (self.learned_pos_emb and self.max_seq_len) else 0,
            )
        )
