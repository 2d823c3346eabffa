"""The job: batch, sequence length, precision and the framework that runs it."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from perfmodel.limits import MAX_COUNT
from perfmodel.specs.checks import whole_number

Precision = Literal["bf16", "fp16", "fp8", "mxfp8", "nvfp4"]


class JobSpec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    global_batch: int = Field(gt=0, le=MAX_COUNT, description="Sequences per optimizer step B (at most MAX_COUNT, "
                              "like --global-batch).")
    seq_len: int = Field(gt=0, le=MAX_COUNT, description="Tokens per sequence s (at most MAX_COUNT, like --seq-len).")
    precision: Precision = Field(default="bf16", description="Dominant GEMM precision.")
    framework: str = Field(
        default="megatron-lm",
        description="Training stack; selects overlap/efficiency behaviour. Unknown names use a generic profile.",
    )
    flash_attention: bool | None = Field(
        default=None,
        description="Fused flash attention on (True) or off (False) whatever the stack's profile says (a DeepSpeed "
        "build with FlashAttention, say); None: the stack's own. Pre-Ampere GPUs have none either way.",
    )

    @field_validator("global_batch", "seq_len", mode="before")
    @classmethod
    def _counts_are_counts(cls, value):
        """A whole number: lax mode would read True as 1 sequence and "2048" as 2048."""
        return whole_number(value)

    @field_validator("flash_attention", mode="before")
    @classmethod
    def _flash_is_a_switch(cls, value):
        """True, False or None: 'yes' or 1 is a typo, not a switch to coerce."""
        if value is not None and not isinstance(value, bool):
            raise ValueError(f"must be true, false or left out (got {value!r})")
        return value

    @field_validator("framework")
    @classmethod
    def _framework_name(cls, value: str) -> str:
        """Surrounding blanks are not part of a stack's name ('megatron-lm ' is megatron-lm); an empty one is
        refused, as ``--framework ''`` is (an unknown name runs with the generic profile, a blank one is a mistake)."""
        if not value.strip():
            raise ValueError("must name a training stack (e.g. megatron-lm); an unknown name runs with the generic "
                             "profile, an empty one is a mistake")
        return value.strip()

    @property
    def precision_stated(self) -> bool:
        """The precision was given, not left to its default."""
        return "precision" in self.model_fields_set

    def for_gpu(self, gpu) -> "JobSpec":
        """The job on ``gpu``: a precision left out is the GPU's default (bf16, or fp16 on a GPU without
        bf16 tensor cores such as the V100), as on the command line; a stated one is kept."""
        if self.precision_stated or gpu.default_precision == self.precision:
            return self
        return self.model_copy(update={"precision": gpu.default_precision})
