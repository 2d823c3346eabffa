"""The job: batch, sequence length, precision and the framework that runs it."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Precision = Literal["bf16", "fp16", "fp8", "mxfp8", "nvfp4"]


class JobSpec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    global_batch: int = Field(gt=0, description="Sequences per optimizer step B.")
    seq_len: int = Field(gt=0, description="Tokens per sequence s.")
    precision: Precision = Field(default="bf16", description="Dominant GEMM precision.")
    framework: str = Field(
        default="megatron-lm",
        description="Training stack; selects overlap/efficiency behaviour. Unknown names use a generic profile.",
    )
