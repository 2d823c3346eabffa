"""How it is run: the parallel layout of one training configuration."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from perfmodel.specs.checks import not_a_boolean, strict_boolean, strict_number, whole_number

Recompute = Literal["none", "selective", "full", "balanced"]
CpKind = Literal["ring", "ulysses"]
ZeroPP = Literal["qwz", "hpz", "qgz"]
#: the ZeRO++ parts in the paper's order (Wang et al. 2023: qwZ, hpZ, qgZ), as every output lists them
ZEROPP_ORDER = ("qwz", "hpz", "qgz")


def zeropp_text(parts) -> str:
    """A set of ZeRO++ parts as the comma list estimate, recommend and whatif print ('' for none)."""
    return ",".join(p for p in ZEROPP_ORDER if p in set(parts or ()))


#: integer codes used by the vectorized cost functions
RECOMPUTE_CODES: dict[str, int] = {"none": 0, "selective": 1, "full": 2, "balanced": 3}


class ParallelSpec(BaseModel):
    """Sizes of each parallel axis and the memory/communication options.

    Rank placement follows Megatron-Core's order ``tp-cp-dp-pp`` (innermost first): TP ranks
    are adjacent (inside a node when tp <= GPUs per node), PP stages are outermost.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    tp: int = Field(default=1, gt=0, description="Tensor-parallel size t (Megatron, Shoeybi et al. 2019).")
    pp: int = Field(default=1, gt=0, description="Pipeline stages p (Narayanan et al. 2021).")
    dp: int = Field(default=1, gt=0, description="Data-parallel replicas d.")
    cp: int = Field(default=1, gt=0, description="Context-parallel size (sequence split across ranks).")
    vpp: int = Field(default=1, gt=0, description="Virtual stages per pipeline rank (interleaved 1F1B).")
    micro_batch: int = Field(default=1, gt=0, description="Sequences per micro-batch b.")
    sp: bool = Field(default=True, description="Megatron sequence parallelism (Korthikanti et al. 2022).")
    zero_stage: int = Field(default=1, ge=0, le=3, description="0 DDP, 1 optimizer, 2 +grads, 3 +params.")
    zeropp: frozenset[ZeroPP] = Field(default=frozenset(), description="ZeRO++ parts (need zero_stage 3).")
    recompute: Recompute = Field(
        default="none",
        description="Activation recomputation: none; selective (Megatron: attention core); full (whole "
        "layer); balanced (norms and MLP activation, Yuan et al. ATC'24).",
    )
    cp_kind: CpKind = Field(
        default="ring",
        description="Context parallelism: ring (Megatron CP, K/V blocks around the ring, overlapped) or "
        "ulysses (DeepSpeed-Ulysses all-to-all of heads; needs heads divisible by tp*cp).",
    )
    offload_fraction: float = Field(
        default=0.0, ge=0.0, le=1.0, allow_inf_nan=False,
        description="Share alpha of warm-up micro-batches' activations offloaded to host memory (ATC'24).",
    )
    order: Literal["tp-cp-dp-pp"] = Field(default="tp-cp-dp-pp", description="Rank placement, innermost first.")

    @field_validator("tp", "pp", "dp", "cp", "vpp", "micro_batch", "zero_stage", mode="before")
    @classmethod
    def _sizes_are_numbers(cls, value):
        """A whole number: lax mode would read tp=True as tensor parallelism of 1 and tp="8" as 8."""
        return whole_number(value)

    @field_validator("sp", mode="before")
    @classmethod
    def _sp_is_a_switch(cls, value):
        """True or False: lax mode would read sp=1 or sp="yes" as sequence parallelism on."""
        return strict_boolean(value)

    @field_validator("offload_fraction", mode="before")
    @classmethod
    def _fraction_is_a_number(cls, value):
        return strict_number(value)  # lax mode would read "0.5" as 0.5 (the API takes numbers)

    @field_validator("zeropp", mode="before")
    @classmethod
    def _parse_zeropp(cls, v):
        if v is not None and not isinstance(v, (str, list, tuple, set, frozenset)):  # True is not 'all three'
            raise ValueError(f"must be a comma list or a set of qwz, hpz, qgz (got {v!r:.40})")
        if isinstance(v, str):
            parts = [p.strip().lower() for p in v.split(",")]
            if v.strip() and not all(parts):  # ',' or 'qwz,,hpz': a part left out, not "no ZeRO++"
                raise ValueError("has an empty item: give a comma list of qwz, hpz, qgz, or leave it out for none")
            v = [p for p in parts if p]
        twice = sorted({p for p in (v or []) if list(v).count(p) > 1}) if isinstance(v, (list, tuple)) else []
        if twice:
            raise ValueError(f"lists {', '.join(twice)} more than once")
        return frozenset(v or [])

    @model_validator(mode="after")
    def _check(self) -> "ParallelSpec":
        if self.vpp > 1 and self.pp == 1:
            raise ValueError(f"vpp ({self.vpp}) must be 1 when pp is 1")
        if self.zeropp and self.zero_stage != 3:
            raise ValueError(f"zeropp ({zeropp_text(self.zeropp)}) requires zero_stage 3 (got {self.zero_stage})")
        return self

    @property
    def n_gpus(self) -> int:
        return self.tp * self.pp * self.dp * self.cp
