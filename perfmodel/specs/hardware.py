"""On what it runs: one accelerator (from a datasheet) and the cluster around it.

Human units with explicit suffixes in the files (``hbm_bandwidth_gb_per_s``,
``scale_out_gbit_per_s_per_node``); ``perfmodel.costs`` get SI values through the
``*_bytes_per_s`` / ``*_s`` properties below. GB = 1e9 bytes, Gbit = 1e9 bits, GiB = 2**30 bytes.
"""
from __future__ import annotations

import math
import numbers

from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

from perfmodel.limits import MAX_GBIT_PER_S, MAX_GPUS, MIN_GBIT_PER_S
from perfmodel.specs.checks import not_a_boolean, strict_number, whole_number
from perfmodel.specs.job import Precision
from perfmodel.units import GIB_BYTES, TFLOP, gb_per_s_to_bytes_per_s

#: A datasheet number: finite (no .inf / .nan) and within a physical range; the bounds below are far
#: outside any real GPU's, so only a typo, a wrong unit or a placeholder falls outside them.
PeakTflopPerS = Annotated[float, BeforeValidator(strict_number), Field(ge=1e-3, le=1e6, allow_inf_nan=False)]
#: lowest best-shape matmul efficiency a profile may state (the GEMM fit's lower bound, calibrate --gemm)
MIN_MATMUL_EFFICIENCY = 0.05
MAX_GPUS_PER_DOMAIN = MAX_GPUS  # like --gpus
MAX_LATENCY_US = 1e6  # a second per collective step
#: HBM bandwidth per 16-bit tensor-core TFLOP/s below which a GPU file is refused: real GPUs have 2.4 (L40S) to
#: 7.2 (V100) GB/s per TFLOP/s (datasheets), so 0.1 is 24x below any of them and 30x above a TB/s-as-GB/s slip
MIN_HBM_GB_PER_S_PER_TFLOP = 0.1


#: the precisions the model reads from a peak table (the GEMM benchmark CSV's dtypes are the same)
PEAK_PRECISIONS = ("bf16", "fp16", "fp32", "tf32", "fp8", "mxfp8", "fp4", "nvfp4")
#: other spellings of a precision (torch / numpy / datasheet names: a GEMM CSV's dtype, a peak table's key)
DTYPE_ALIASES = {
    "bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32", "float": "fp32",
    "tensorfloat32": "tf32", "float8e4m3": "fp8", "float8e5m2": "fp8", "e4m3": "fp8",
    "e5m2": "fp8", "fp8e4m3": "fp8", "fp8e5m2": "fp8",
}
"""Spellings after normalisation (lower case; spaces, '-' and '_' removed; a float8 'fn' / 'fnuz'
suffix dropped): torch.float8_e4m3fn, 'FP8 e4m3' (kernels.csv), fp8-e5m2, float8_e4m3fnuz ..."""


def canonical_dtype(name: object) -> str | None:
    """``bf16`` for ``bf16`` / ``BFloat16`` / ``torch.bfloat16``, ``fp8`` for ``FP8 e4m3`` /
    ``float8_e4m3fn``; None for an unknown name."""
    key = str(name).strip().lower().removeprefix("torch.")
    for ch in " -_":
        key = key.replace(ch, "")
    if "e4m3" in key or "e5m2" in key:
        key = key.removesuffix("fnuz").removesuffix("fn")
    key = DTYPE_ALIASES.get(key, key)
    return key if key in PEAK_PRECISIONS else None


class AcceleratorSpec(BaseModel):
    """One GPU as its datasheet states it, plus measured achievable matmul throughput."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1, pattern=r"\S", description="Catalog name, e.g. 'h100-sxm5-80gb'.")
    display_name: str = Field(description="Vendor name.")
    peak_dense_tflop_per_s: dict[str, PeakTflopPerS] = Field(
        description="Dense (no sparsity) tensor-core peak per precision: bf16, fp16, fp8, ... (TFLOP/s, "
        "each finite and within 0.001 .. 1e6)"
    )
    hbm_capacity_gib: float = Field(gt=0, le=1e6, allow_inf_nan=False, description="Device memory, GiB.")
    hbm_bandwidth_gb_per_s: float = Field(
        ge=1e-3, le=1e7, allow_inf_nan=False, description="Device memory bandwidth, GB/s."
    )
    intra_node_bandwidth_gb_per_s: float = Field(
        ge=1e-3, le=1e7, allow_inf_nan=False, description="NVLink (or PCIe) bandwidth per GPU, one direction, GB/s."
    )
    n_sms: int = Field(gt=0, le=1 << 16, description="Streaming multiprocessors (for GEMM wave quantization).")
    matmul_efficiency_max: float = Field(
        ge=MIN_MATMUL_EFFICIENCY, le=1, allow_inf_nan=False,
        description="Best-shape achievable bf16 matmul / dense peak (MAMF).",
    )
    nvlink_domain_gpus: int = Field(
        default=8, gt=0, le=MAX_GPUS_PER_DOMAIN,
        description="GPUs that share one NVLink/NVSwitch domain (72 for NVL72); it and default_gpus_per_node "
        "divide one another.",
    )
    fp8_matmul_efficiency_max: float | None = Field(
        default=None, ge=MIN_MATMUL_EFFICIENCY, le=1, allow_inf_nan=False,
        description="Best-shape achievable fp8 (e4m3) matmul / dense fp8 peak (MAMF), where measured; None: "
        "the bf16 MAMF times the global fp8_matmul_efficiency_ratio.",
    )
    attention_efficiency_max: float | None = Field(
        default=None, ge=MIN_MATMUL_EFFICIENCY, le=1, allow_inf_nan=False,
        description="Flash-attention forward fraction of dense peak at long sequences on this GPU "
        "(None: the global constant). FA2: A100 ~0.6, H100 ~0.35; FA3/cuDNN on H100 ~0.6 (kernels.csv).",
    )
    attention_fwd_speedup: float = Field(
        default=1.0, ge=1.0, le=4.0, allow_inf_nan=False,
        description="Flash-attention forward rate on this GPU relative to what attention_efficiency_max gives: "
        "an exponential-unit (SFU) upgrade the tensor-core peaks do not show (Blackwell Ultra: 2x MUFU.EX2).",
    )
    attention_bwd_speedup: float = Field(
        default=1.0, ge=1.0, le=4.0, allow_inf_nan=False,
        description="The same for the backward pass, which recomputes the same exponentials against 2.5x the "
        "matmul work (five matmuls to the forward's two), so it gains less.",
    )
    default_gpus_per_node: int = Field(default=8, gt=0, le=MAX_GPUS_PER_DOMAIN)
    default_scale_out_gbit_per_s_per_node: float = Field(
        ge=MIN_GBIT_PER_S, le=MAX_GBIT_PER_S, allow_inf_nan=False,
        description="Typical total NIC bandwidth per node (e.g. 8x400 Gbit/s = 3200).",
    )
    host_link_gb_per_s: float = Field(
        default=32.0, ge=1e-3, le=1e7, allow_inf_nan=False, description="GPU-host link, one direction."
    )
    intra_node_latency_us: float = Field(default=4.0, gt=0, le=MAX_LATENCY_US, allow_inf_nan=False)
    scale_out_latency_us: float = Field(default=12.0, gt=0, le=MAX_LATENCY_US, allow_inf_nan=False)
    unsupported_precisions: list[Precision] = Field(
        default_factory=list,
        description="Training precisions the GPU has no tensor cores for although its peak table names them "
        "as the 16-bit base of the cost model (bf16 on Volta); a job in one is rejected.",
    )
    calibration_from: str | None = Field(
        default=None, description="A catalog GPU whose calibrated per-GPU values (fitted collective latencies) "
        "this one takes where a calibration profile has none of its own: the same silicon and NIC generation "
        "under another name (A100 of unknown memory size, A800, H800, H100 96 GB, H200).",
    )
    sources: list[str] = Field(min_length=1, description="Datasheets and measurements cited.")

    @field_validator("n_sms", "nvlink_domain_gpus", "default_gpus_per_node", mode="before")
    @classmethod
    def _not_a_boolean(cls, value):
        return whole_number(value)  # not true/false, nor a quoted '132' (lax mode would read both)

    @field_validator("*", mode="before")
    @classmethod
    def _numbers_are_numbers(cls, value, info):
        # a number field takes a number: YAML true/false would read as 1/0 and a quoted '1.2' as 1.2
        if cls.model_fields[info.field_name].annotation in (float, float | None):
            return strict_number(value)
        return value

    @model_validator(mode="after")
    def _check(self) -> "AcceleratorSpec":
        for p in self.unsupported_precisions:
            if p not in self.peak_dense_tflop_per_s:
                raise ValueError(f"unsupported_precisions: '{p}' is not in peak_dense_tflop_per_s (list only "
                                 "precisions the peak table names as a base the GPU cannot train in)")
        for key in sorted(set(self.peak_dense_tflop_per_s) - set(PEAK_PRECISIONS)):
            # a datasheet's other rows (fp64, int8) are kept unused; a modelled precision spelled
            # otherwise (FP8, fp-8, BF16) would be silently unused too, so it is refused (before the bf16 /
            # fp16 check below, which would only say the base is missing)
            spelled = canonical_dtype(key)  # FP8, fp-8, e4m3, bfloat16 ...
            if spelled is not None:
                raise ValueError(f"peak_dense_tflop_per_s: {key!r} must be spelled {spelled!r}")
        for key in ("bf16", "fp16"):
            if key not in self.peak_dense_tflop_per_s:
                raise ValueError(f"peak_dense_tflop_per_s: must give '{key}'")
        peaks = self.peak_dense_tflop_per_s
        if "fp32" in peaks and min(peaks["bf16"], peaks["fp16"]) < peaks["fp32"]:
            # a 16-bit tensor-core peak below the CUDA-core fp32 one: a unit slip (PFLOP/s typed as TFLOP/s)
            raise ValueError(f"peak_dense_tflop_per_s: bf16 ({peaks['bf16']:g}) and fp16 ({peaks['fp16']:g}) must be at "
                             f"least fp32's ({peaks['fp32']:g}): every tensor-core GPU's are (TFLOP/s, not PFLOP/s)")
        peak16 = max(peaks["bf16"], peaks["fp16"])
        if self.hbm_bandwidth_gb_per_s / peak16 < MIN_HBM_GB_PER_S_PER_TFLOP:
            # every tensor-core GPU moves 2.4-7.2 GB/s of HBM per 16-bit TFLOP/s (L40S ... V100); 1,000x
            # fewer is a TB/s figure typed as GB/s, which would cost every element-wise pass 1,000x too long
            raise ValueError(
                f"hbm_bandwidth_gb_per_s ({self.hbm_bandwidth_gb_per_s:g}) must be at least "
                f"{MIN_HBM_GB_PER_S_PER_TFLOP:g} GB/s per 16-bit TFLOP/s of peak ({peak16:g} TFLOP/s: at least "
                f"{MIN_HBM_GB_PER_S_PER_TFLOP * peak16:g} GB/s); real GPUs have 2.4-7.2 (GB/s, not TB/s)")
        domain, node = self.nvlink_domain_gpus, self.default_gpus_per_node
        if domain % node and node % domain:
            # nvlink_domain() could only guess what such a board means (it silently took the whole node)
            raise ValueError(
                f"nvlink_domain_gpus ({domain}) and default_gpus_per_node ({node}) must divide one another "
                "(a domain of whole nodes, or a node of whole NVLink boards)"
            )
        return self

    def supports_precision(self, precision: str) -> bool:
        """Whether the GPU has tensor cores for ``precision``: its own entry in the peak table (fp8
        needs 'fp8', mxfp8 'mxfp8', nvfp4 'nvfp4') and not listed in ``unsupported_precisions``."""
        return precision in self.peak_dense_tflop_per_s and precision not in self.unsupported_precisions

    def default_scale_out_gbit_per_s(self, gpus_per_node: int | None = None) -> float:
        """Total NIC bandwidth of a node of ``gpus_per_node`` GPUs when none is stated: the default
        node's NICs per GPU (one NIC per GPU in DGX/HGX and NVL72 trays) times the GPUs, so a GB200
        "node" of 72 GPUs (the NVL72 rack) has its 72 GPUs' NICs, not one tray's."""
        gpn = gpus_per_node or self.default_gpus_per_node
        return self.default_scale_out_gbit_per_s_per_node * gpn / self.default_gpus_per_node

    @property
    def default_precision(self) -> str:
        """The precision a job that names none trains in: bf16, or fp16 where the GPU has no bf16
        tensor cores (Volta)."""
        return "bf16" if self.supports_precision("bf16") else "fp16"

    def peak_flop_per_s(self, precision: str) -> float:
        """Dense peak for a GEMM precision; a format the GPU lacks runs at the next one it has
        (nvfp4 -> fp4 -> fp8 -> bf16; mxfp8 -> fp8 -> bf16; e.g. A100 has no fp8)."""
        chains = {
            "nvfp4": ("nvfp4", "fp4", "fp8", "bf16"),
            "mxfp8": ("mxfp8", "fp8", "bf16"),
            "fp8": ("fp8", "bf16"),
            "bf16": ("bf16",),
            "fp16": ("fp16",),
        }
        for key in chains.get(precision, (precision, "bf16")):
            if key in self.peak_dense_tflop_per_s:
                return self.peak_dense_tflop_per_s[key] * TFLOP
        return self.peak_dense_tflop_per_s["bf16"] * TFLOP

    @property
    def hbm_capacity_bytes(self) -> float:
        return self.hbm_capacity_gib * GIB_BYTES

    @property
    def hbm_bandwidth_bytes_per_s(self) -> float:
        return gb_per_s_to_bytes_per_s(self.hbm_bandwidth_gb_per_s)

    @property
    def intra_node_bandwidth_bytes_per_s(self) -> float:
        return gb_per_s_to_bytes_per_s(self.intra_node_bandwidth_gb_per_s)


def check_network_name(network: str | None) -> None:
    """A fabric name given must name one (blank is not 'no fabric': leave the option out for that)."""
    from perfmodel.errors import InputError

    if network is not None and not isinstance(network, str):  # the Python API's argument
        raise InputError("network", f"must be a fabric's name, a string (got {type(network).__name__})")
    if network is not None and not network.strip():
        raise InputError("network", "must name a fabric (e.g. 'IB NDR', 'EFA'), not be empty; leave it out for none")
    if network is not None and any(not ch.isprintable() for ch in network):  # a line break would split a profile key
        raise InputError("network", f"must be printable text, a fabric's name (got {network!r:.60})")


def check_node_size(gpu: AcceleratorSpec, gpus_per_node: int, scale_out_gbit_per_s_per_node: float | None) -> None:
    """A node size the model can cost: at most ``MAX_GPUS`` GPUs, and, when the NIC bandwidth is the
    GPU's default (its NICs per GPU times the node's GPUs), one within ``MAX_GBIT_PER_S``; the error
    names gpus_per_node, the value the user gave, not the bandwidth derived from it."""
    from perfmodel.errors import InputError

    if gpus_per_node > MAX_GPUS:
        raise InputError("gpus_per_node", f"must be at most {MAX_GPUS:,} (got {gpus_per_node:,})")
    check_node_boards(gpu, gpus_per_node)
    if scale_out_gbit_per_s_per_node is None:
        derived = gpu.default_scale_out_gbit_per_s(gpus_per_node)
        if derived > MAX_GBIT_PER_S:
            raise InputError("gpus_per_node", f"{gpus_per_node:,} GPUs per node with the {gpu.name}'s default NICs "
                             f"make {derived:,.0f} Gbit/s per node, over the {MAX_GBIT_PER_S:,.0f} limit: give "
                             "--scale-out-gbit-per-s or a smaller node")


def check_node_boards(gpu: AcceleratorSpec, gpus_per_node: int) -> None:
    """A node larger than the GPU's NVLink board holds whole boards (16 H100s: two 8-GPU boards); 12
    H100s per node would be a board and a half, whose NVLink islands ``nvlink_domain`` could only guess.
    Multi-node NVLink systems (NVL72) take any node size."""
    from perfmodel.errors import InputError

    board = gpu.nvlink_domain_gpus
    if board <= gpu.default_gpus_per_node and gpus_per_node > board and gpus_per_node % board:
        raise InputError("gpus_per_node", f"must be a multiple of the {gpu.name}'s {board}-GPU NVLink board when "
                         f"larger than one board: a node holds whole boards (got {gpus_per_node})")


def nvlink_domain(gpu: AcceleratorSpec, gpus_per_node: int) -> int:
    """NVLink reaches across nodes only on multi-node NVLink systems (NVL72: 72 GPUs over 18
    trays of 4). On HGX-style boards it is the node, but never more than one board: a node of 16
    H100s holds two 8-GPU NVLink islands."""
    spans_nodes = gpu.nvlink_domain_gpus > gpu.default_gpus_per_node
    if spans_nodes and gpu.nvlink_domain_gpus % gpus_per_node == 0:
        return gpu.nvlink_domain_gpus
    board = gpu.nvlink_domain_gpus
    if gpus_per_node > board and gpus_per_node % board == 0:
        return board
    return gpus_per_node


def nodes_holding(n_gpus: int, gpus_per_node: int) -> int:
    """Nodes a job of ``n_gpus`` occupies: the last one may be part-used (12 GPUs on 8-GPU nodes: 2)."""
    return -(-int(n_gpus) // int(gpus_per_node))


class ClusterSpec(BaseModel):
    """The cluster: how many GPUs, how many share a node / NVLink domain, and the network."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    gpu: AcceleratorSpec
    n_gpus: int = Field(gt=0, le=MAX_GPUS, description="GPUs in the job (at most MAX_GPUS, like --gpus).")
    gpus_per_node: int = Field(gt=0, le=MAX_GPUS, description="GPUs per node (per compute tray for NVL72).")
    nvlink_domain_gpus: int = Field(gt=0, le=MAX_GPUS, description="GPUs reachable over NVLink (>= gpus_per_node).")
    scale_out_gbit_per_s_per_node: float = Field(
        ge=MIN_GBIT_PER_S, le=MAX_GBIT_PER_S, allow_inf_nan=False, description="Total NIC bandwidth per node."
    )
    scale_out_latency_us: float = Field(gt=0, le=MAX_LATENCY_US, allow_inf_nan=False)
    scale_out_latency_stated: bool = Field(
        default=False, description="The latency was given for this cluster; else it is the GPU profile's, and a "
        "calibrated profile's value for the GPU or fabric replaces it (estimate.build_inputs)."
    )
    scale_out_stated: bool = Field(
        default=True, description="The NIC bandwidth was given for this cluster; False where ClusterSpec.build "
        "took the GPU profile's default (a what-if that swaps the GPU then takes the new GPU's default)."
    )
    gpus_per_node_stated: bool = Field(
        default=True, description="The node size was given for this cluster; False where ClusterSpec.build took "
        "the GPU profile's default (a what-if that swaps the GPU then takes the new GPU's default)."
    )
    network: str | None = Field(
        default=None, description="Scale-out fabric (e.g. 'IB NDR', 'EFA'); selects its calibrated congestion."
    )

    @field_validator("n_gpus", "gpus_per_node", "nvlink_domain_gpus", mode="before")
    @classmethod
    def _counts_are_counts(cls, value):
        # lax mode would read True as 1 GPU
        return not_a_boolean(value, "integer")

    @field_validator("scale_out_gbit_per_s_per_node", "scale_out_latency_us", mode="before")
    @classmethod
    def _numbers_are_numbers(cls, value):
        return strict_number(value)

    @model_validator(mode="after")
    def _check(self) -> "ClusterSpec":
        if self.nvlink_domain_gpus % self.gpus_per_node and self.gpus_per_node % self.nvlink_domain_gpus:
            raise ValueError(
                f"gpus_per_node ({self.gpus_per_node}) and nvlink_domain_gpus ({self.nvlink_domain_gpus}) "
                "must divide one another"
            )
        # a GPU count that is not a whole number of nodes leaves the last node (or NVL72 rack) part-used:
        # its groups are placed on the GPUs the job holds (perfmodel.costs.comm.group_placement)
        return self

    @classmethod
    def build(
        cls,
        gpu: AcceleratorSpec,
        n_gpus: int,
        gpus_per_node: int | None = None,
        scale_out_gbit_per_s_per_node: float | None = None,
        scale_out_latency_us: float | None = None,
        network: str | None = None,
    ) -> "ClusterSpec":
        """A cluster with the GPU's defaults for what is not given (None); a given value is checked, not
        replaced (0 GPUs per node is a mistake, not 'the default'), with the CLI's limits (``perfmodel.limits``):
        InputError naming the argument. A node size left out is the GPU's, but never more GPUs than the job
        holds (4 H100s: a node of 4 with its 4 GPUs' NICs), as ``perfmodel.cli.build_cluster`` takes it."""
        from pydantic import ValidationError

        from perfmodel.errors import InputError, from_validation_error

        if isinstance(gpu, str):  # a name: as load_gpu reads it
            from perfmodel.catalog import load_gpu

            gpu = load_gpu(gpu)
        if not isinstance(gpu, AcceleratorSpec):
            raise InputError("gpu", f"must be an AcceleratorSpec or a catalog name (got {type(gpu).__name__})")
        try:  # a spec changed with model_copy skipped its checks (an NVLink domain of 0 GPUs divided by zero below)
            gpu = AcceleratorSpec.model_validate(gpu.model_dump())
        except ValidationError as exc:
            raise from_validation_error(exc, prefix="gpu") from None
        given = {"gpus_per_node": gpus_per_node, "scale_out_gbit_per_s_per_node": scale_out_gbit_per_s_per_node,
                 "scale_out_latency_us": scale_out_latency_us}
        for name, value in given.items():
            if value is not None and not (isinstance(value, numbers.Real) and not isinstance(value, bool)
                                          and math.isfinite(value) and value > 0):
                raise InputError(name, f"must be a positive number (got {value!r})")
        for name, value in (("n_gpus", n_gpus), ("gpus_per_node", 1 if gpus_per_node is None else gpus_per_node)):
            whole = isinstance(value, numbers.Real) and not isinstance(value, bool) and 1 <= value <= MAX_GPUS
            if not whole or value % 1:
                raise InputError(name, f"must be a whole number of GPUs from 1 to {MAX_GPUS:,} (got {value!r})")
        if scale_out_latency_us is not None and scale_out_latency_us > MAX_LATENCY_US:
            raise InputError("scale_out_latency_us", f"must be at most {MAX_LATENCY_US:,.0f} us, a second per "
                             f"collective step, as a GPU profile's (got {scale_out_latency_us!r})")
        if scale_out_gbit_per_s_per_node is not None and not (
                MIN_GBIT_PER_S <= scale_out_gbit_per_s_per_node <= MAX_GBIT_PER_S):
            raise InputError("scale_out_gbit_per_s_per_node", f"must be from {MIN_GBIT_PER_S:g} to "
                             f"{MAX_GBIT_PER_S:,.0f} Gbit/s (got {scale_out_gbit_per_s_per_node!r})")
        check_network_name(network)
        gpn = gpus_per_node or min(gpu.default_gpus_per_node, n_gpus)
        check_node_size(gpu, gpn, scale_out_gbit_per_s_per_node)
        domain = nvlink_domain(gpu, gpn)
        try:
            return cls(
                gpu=gpu,
                n_gpus=n_gpus,
                gpus_per_node=gpn,
                nvlink_domain_gpus=domain,
                scale_out_gbit_per_s_per_node=(
                    scale_out_gbit_per_s_per_node or gpu.default_scale_out_gbit_per_s(gpn)
                ),
                scale_out_latency_us=scale_out_latency_us or gpu.scale_out_latency_us,
                scale_out_latency_stated=bool(scale_out_latency_us),
                scale_out_stated=bool(scale_out_gbit_per_s_per_node),
                gpus_per_node_stated=bool(gpus_per_node),
                network=network,
            )
        except ValidationError as exc:  # what the checks above leave (a network that is not text)
            raise from_validation_error(exc) from None

    def resized(self, n_gpus: int, gpu: AcceleratorSpec | None = None,
                scale_out_gbit_per_s_per_node: float | None = None,
                scale_out_latency_us: float | None = None) -> "ClusterSpec":
        """This kind of cluster with ``n_gpus`` GPUs (of ``gpu``, default this one's): what was stated
        (node size, NIC bandwidth, latency) is kept unless given here, what was the GPU's default is the
        (new) GPU's default for the new size (a node never holds more GPUs than the job, as
        ``perfmodel.cli.build_cluster`` takes it)."""
        gpu = gpu or self.gpu
        gpn = self.gpus_per_node if self.gpus_per_node_stated else gpu.default_gpus_per_node
        bw = scale_out_gbit_per_s_per_node or (self.scale_out_gbit_per_s_per_node if self.scale_out_stated else None)
        cluster = ClusterSpec.build(gpu, n_gpus, min(gpn, n_gpus), bw, scale_out_latency_us or self.stated_latency_us,
                                    network=self.network)
        return cluster.model_copy(update={"gpus_per_node_stated": self.gpus_per_node_stated})

    @property
    def n_nodes(self) -> int:
        """Nodes the job occupies (``nodes_holding``)."""
        return nodes_holding(self.n_gpus, self.gpus_per_node)

    @property
    def stated_latency_us(self) -> float | None:
        """The latency to rebuild a cluster of this kind with: the stated one, else None (the GPU's)."""
        return self.scale_out_latency_us if self.scale_out_latency_stated else None
