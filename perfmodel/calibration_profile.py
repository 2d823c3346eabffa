"""A calibrated profile: fitted constants and framework parameters, with provenance.

Written by ``perfmodel calibrate``; applied by ``--calibration FILE`` everywhere. When no file
is given, the shipped ``calibration/default_profile.yaml`` is used if present, so the defaults
are the fitted values. Every value overrides a default of ``CostConstants`` /
``FrameworkProfile`` / the GPU profile; what a file does not name keeps its default.
"""
from __future__ import annotations

import math
import sys
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from perfmodel.constants import MIN_CONGESTION_NODES, CostConstants
from perfmodel.errors import InputError, file_stamp, from_validation_error, read_text_file, say_note
from perfmodel.frameworks import PROFILES, FrameworkProfile, framework_profile
from perfmodel.shipped import data_root
from perfmodel.specs.hardware import MAX_LATENCY_US, AcceleratorSpec
from perfmodel.specs.checks import strict_number
from perfmodel.structured_text import load_yaml

#: the folder the shipped profile and the paths its provenance names are relative to (perfmodel.shipped)
REPO_ROOT = data_root()
DEFAULT_PROFILE_PATH = REPO_ROOT / "calibration" / "default_profile.yaml"

#: what a fabric's entry in ``networks`` may set (fitted by ``perfmodel.calibrate.fit_collectives``;
#: tp_internode_efficiency by the runs fit, ``perfmodel.calibrate.fit_runs``)
NETWORK_CONSTANT_KEYS = ("nvlink_efficiency", "nic_efficiency", "tp_internode_efficiency")
NETWORK_GPU_KEYS = ("intra_node_latency_us", "scale_out_latency_us")
NETWORK_SHAPE_DEFAULTS = {"ring_inter_node": 0.0, "latency_log2_coeff": 0.5, "ring_step_latency_us": 0.0,
                          "ll_latency_us": 0.0, "ll_bandwidth_ratio": 0.0, "congestion_max_nodes": math.inf}
#: ops whose NCCL algorithms differ enough to get their own fitted values (``op.key``)
NETWORK_OP_SPECIFIC = ("all_gather", "reduce_scatter", "all_to_all", "send_recv")

#: the calibrated per-GPU values a part shares with the one it names in calibration_from: the fabric-side
#: collective latencies (and, in ``for_network``, the NVLink efficiency fitted with them), not the kernel
#: efficiencies its own measurements may state
SIBLING_KEYS = frozenset({"intra_node_latency_us", "scale_out_latency_us"})
#: what a stack takes from the calibration of the stack it is built on (FrameworkProfile.calibration_from):
#: the kernels' efficiency and the per-micro-batch cost of the engine both run (GPT-NeoX and Megatron-DeepSpeed:
#: DeepSpeed's pipeline engine), not the other overheads and overlaps of its own schedule
FRAMEWORK_SIBLING_KEYS = frozenset({"kernel_efficiency", "microbatch_overhead_s"})
#: what a stack takes from the calibration of the stack whose ZeRO-3 engine it trains through
#: (FrameworkProfile.zero3_engine): that engine's fitted overlap and per-step latency
ZERO3_ENGINE_KEYS = frozenset({"zero3_overlap", "zero3_step_latency_s"})
#: a GPU's own value of a shared constant: its NVLink efficiency, which an nccl-tests calibration without
#: --network fits for the GPU it ran on (other GPUs' NVLink is another generation); a fabric's own value wins
GPU_CONSTANT_KEYS = frozenset({"nvlink_efficiency"})
GPU_OVERRIDABLE = {"matmul_efficiency_max", "fp8_matmul_efficiency_max", "intra_node_latency_us",
                   "scale_out_latency_us", "attention_efficiency_max", *GPU_CONSTANT_KEYS}


#: a fitted value: a number, never a boolean (frameworks are checked field by field by
#: FrameworkProfile, whose on/off switches are written as true/false)
Number = Annotated[float, BeforeValidator(strict_number)]


def _not_text(value):
    """A framework entry is a number or a true/false switch (FrameworkProfile checks which), never text."""
    return value if isinstance(value, bool) else strict_number(value, "a number or true/false")


class Calibration(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    constants: dict[str, Number] = Field(default_factory=dict, description="Overrides of CostConstants.")
    frameworks: dict[str, dict[str, Annotated[float | bool, BeforeValidator(_not_text)]]] = Field(default_factory=dict, description="Per-framework overrides.")
    gpus: dict[str, dict[str, Number]] = Field(default_factory=dict, description="Per-GPU overrides.")
    networks: dict[str, dict[str, Number]] = Field(
        default_factory=dict,
        description="Per scale-out fabric (lower-case name): congestion_nodes, the node count at which "
        "the fabric delivers half its per-NIC bandwidth to a job-wide collective, and congestion_max_nodes, the "
        "most nodes that was measured on (the load is not extrapolated beyond it); collective shape values; "
        "nvlink/nic/tp_internode efficiencies that override the shared constants on that fabric.",
    )
    provenance: dict[str, Any] = Field(default_factory=dict, description="Inputs, SHA-256, residuals, date.")

    def cost_constants(self) -> CostConstants:
        return CostConstants(**self.constants)

    def borrowed(self, name: str | None) -> dict[str, float]:
        """What a stack built on another takes from that one's fit (FrameworkProfile.calibration_from):
        its FRAMEWORK_SIBLING_KEYS values that this calibration does not fit for the stack itself."""
        key = (name or "generic").strip().lower()
        sibling = framework_profile(key).calibration_from
        own = self.frameworks.get(key, {}) if key in PROFILES else {}
        return {k: v for k, v in self.frameworks.get(sibling or "", {}).items()
                if k in FRAMEWORK_SIBLING_KEYS and k not in own}

    def typical_kernel_efficiency(self, name: str | None) -> dict[str, float]:
        """A known stack this calibration fits no kernel efficiency for, and that borrows none from the
        stack it is built on, runs at the generic profile's: the median of the calibrated stacks
        (``fit_runs``), as an unknown stack does, not at the uncalibrated 1.0 (MegaScale, Meta's
        internal stack in the shipped profile; any stack a leave-one-source-out fit leaves out)."""
        key = (name or "generic").strip().lower()
        if key not in PROFILES or key == "generic" or "kernel_efficiency" in self.frameworks.get(key, {}) \
                or "kernel_efficiency" in self.borrowed(key):
            return {}
        value = self.frameworks.get("generic", {}).get("kernel_efficiency")
        return {} if value is None else {"kernel_efficiency": value}

    def engine_zero3(self, name: str | None) -> dict[str, float]:
        """A stack's ZeRO-3 values fitted for the engine it trains through (FrameworkProfile.zero3_engine),
        where this calibration fits none for the stack itself."""
        key = (name or "generic").strip().lower()
        engine = framework_profile(key).zero3_engine
        own = self.frameworks.get(key, {}) if key in PROFILES else {}
        return {k: v for k, v in self.frameworks.get(engine or "", {}).items()
                if k in ZERO3_ENGINE_KEYS and k not in own}

    def framework(self, name: str | None) -> FrameworkProfile:
        base = framework_profile(name)
        key = (name or "generic").strip().lower()
        key = key if key in PROFILES else "generic"
        over = {**self.typical_kernel_efficiency(key), **self.borrowed(key), **self.engine_zero3(key),
                **self.frameworks.get(key, {})}
        return base.model_copy(update=over) if over else base

    def congestion_nodes(self, network: str | None) -> float:
        """Nodes at which the fabric's delivered bandwidth halves (inf: no congestion modelled)."""
        default = self.cost_constants().congestion_nodes
        return float(self.networks.get((network or "").strip().lower(), {}).get("congestion_nodes", default))

    def network_values(self, network: str | None, op: str | None = None) -> dict[str, float]:
        """The fabric's fitted values; for ``op`` its own (``all_to_all.nic_efficiency``) win."""
        over = self.networks.get((network or "").strip().lower(), {})
        out = {k: v for k, v in over.items() if "." not in k}
        if op in NETWORK_OP_SPECIFIC:
            out.update({k.split(".", 1)[1]: v for k, v in over.items() if k.startswith(f"{op}.")})
        return out

    def for_network(self, spec: AcceleratorSpec, network: str | None, op: str | None = None):
        """(constants, GPU spec, collective-shape values) with the fabric's fitted values applied, over
        the GPU's own values of shared constants (GPU_CONSTANT_KEYS), over the shared constants."""
        over = self.network_values(network, op)
        # the GPU's own NVLink efficiency, else the sibling's (calibration_from), fitted with the sibling's
        # latencies that ``gpu`` hands on: the two travel together (a latency without the efficiency it was
        # fitted with made an H200 slower than the H100 whose values it took)
        own = {k: v for name in (spec.calibration_from or "", spec.name)
               for k, v in self.gpus.get(name, {}).items() if k in GPU_CONSTANT_KEYS}
        constants = self.cost_constants().model_copy(
            update={**own, **{k: over[k] for k in NETWORK_CONSTANT_KEYS if k in over}})
        gpu = self.gpu(spec).model_copy(update={k: over[k] for k in NETWORK_GPU_KEYS if k in over})
        shape = {k: float(over.get(k, d)) for k, d in NETWORK_SHAPE_DEFAULTS.items()}
        return constants, gpu, shape

    def gpu(self, spec: AcceleratorSpec) -> AcceleratorSpec:
        # the sibling's collective latencies (calibration_from: same NICs and NCCL stack; its kernel
        # efficiencies are its own silicon's), then the GPU's own values, which win
        sibling = {k: v for k, v in self.gpus.get(spec.calibration_from or "", {}).items() if k in SIBLING_KEYS}
        over = {**sibling, **{k: v for k, v in self.gpus.get(spec.name, {}).items() if k not in GPU_CONSTANT_KEYS}}
        # a profile file under a catalog GPU's name that changes a value the calibration fitted for that GPU
        # keeps its own (the calibration replaces the catalog's number, not an edit of it), and says so
        edited = _edited_catalog_values(spec, over)
        for key in edited:
            over.pop(key)
            _say_once(f"gpu {spec.name}: the profile's {key} = {getattr(spec, key):g} (the catalog's is "
                      f"{edited[key]:g}) is used, not the calibration's {self.gpus[spec.name][key]:g} for that GPU")
        return spec.model_copy(update=over) if over else spec


EMPTY = Calibration()

_SAID: set[str] = set()


def _say_once(text: str) -> None:
    """``say_note`` once a process (a search or a what-if costs one GPU many times)."""
    if text not in _SAID:
        _SAID.add(text)
        say_note(text)


def _edited_catalog_values(spec: AcceleratorSpec, over: dict) -> dict[str, float]:
    """{key: the catalog's value} of the keys in ``over`` that ``spec`` (a GPU of a catalog name) holds at
    another value than the catalog profile of that name: a hardware-profile file copied and edited."""
    from perfmodel.catalog import gpu_names, load_gpu

    if not over or spec.name not in gpu_names():
        return {}
    catalog = load_gpu(spec.name)
    return {k: getattr(catalog, k) for k in over
            if hasattr(spec, k) and getattr(spec, k) != getattr(catalog, k)}


NETWORK_KEYS = set(NETWORK_CONSTANT_KEYS) | set(NETWORK_GPU_KEYS) | set(NETWORK_SHAPE_DEFAULTS) | {"congestion_nodes"}

#: the physical range of a fabric's values other than the efficiencies (which CostConstants bounds):
#: (lowest, highest, whether the lowest itself is allowed); latencies as the GPU profile bounds them.
#: All finite but congestion_nodes (.inf: non-blocking, as fit_collectives writes for an uncongested fabric)
#: and congestion_max_nodes (the most nodes the congestion was measured on; .inf: no bound).
NETWORK_RANGES = {
    "congestion_nodes": (MIN_CONGESTION_NODES, math.inf, True),
    "congestion_max_nodes": (1.0, math.inf, True),
    "latency_log2_coeff": (0.0, 1e3, True),
    "ring_step_latency_us": (0.0, 1e6, True),
    "ll_latency_us": (0.0, MAX_LATENCY_US, True),
    "ll_bandwidth_ratio": (0.0, 1.0, True),
    "intra_node_latency_us": (0.0, MAX_LATENCY_US, False),
    "scale_out_latency_us": (0.0, MAX_LATENCY_US, False),
}


def _check_network(net: str, over: dict, constants: dict, where: str) -> None:
    """A fabric's entry: known keys (optionally ``op.key`` for the ops with their own values), finite
    numbers (congestion_nodes may be .inf), each within its physical range: efficiencies within the shared
    constants' own bounds, latencies within the GPU profile's."""
    for key, value in over.items():
        field = f"calibration.networks.{net}.{key}"
        op, _, base = key.rpartition(".")
        if base not in NETWORK_KEYS or (op and op not in NETWORK_OP_SPECIFIC):
            raise InputError(field, f"unknown key (known: {', '.join(sorted(NETWORK_KEYS))}, optionally prefixed by "
                             f"one of {', '.join(NETWORK_OP_SPECIFIC)} and a dot)", where=where)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or math.isnan(value):
            raise InputError(field, f"must be a number (got {value!r})", where=where)
        if math.isinf(value) and base not in ("congestion_nodes", "congestion_max_nodes"):
            raise InputError(field, f"must be finite (got {value!r})", where=where)
        prefix = f"calibration.networks.{net}" + (f".{op}" if op else "")
        if base in NETWORK_CONSTANT_KEYS:
            try:
                CostConstants(**{**constants, base: value})
            except ValidationError as exc:
                raise from_validation_error(exc, prefix, where=where) from None
        elif base == "ring_inter_node":
            if value not in (0, 1):
                raise InputError(field, f"must be 0 (hierarchical) or 1 (flat ring) (got {value!r})", where=where)
        else:
            lo, hi, lo_allowed = NETWORK_RANGES[base]
            if not (lo <= value if lo_allowed else lo < value) or value > hi:
                low = f">= {lo:g}" if lo_allowed else f"> {lo:g}"
                high = " (or .inf: non-blocking)" if math.isinf(hi) else f" and <= {hi:g}"
                raise InputError(field, f"must be {low}{high} (got {value!r})", where=where)
    # the protocol switch is a pair: a low-latency protocol needs its own latency, for every op it applies to
    for op in ("", *NETWORK_OP_SPECIFIC):
        def value(key):
            return over.get(f"{op}.{key}", over.get(key, 0.0)) if op else over.get(key, 0.0)

        if value("ll_bandwidth_ratio") > 0 and not value("ll_latency_us") > 0:
            key = f"{op}.ll_latency_us" if op and f"{op}.ll_bandwidth_ratio" in over else "ll_latency_us"
            raise InputError(f"calibration.networks.{net}.{key}",
                             "must be > 0 where ll_bandwidth_ratio > 0 (the low-latency protocol's latency)", where=where)


def _check_gpu_override(name: str, over: dict, where: str) -> None:
    """A GPU override must satisfy the GPU profile's own field rules (e.g. 0 < efficiency <= 1)."""
    from perfmodel.catalog import gpu_names, load_gpu

    for key, value in over.items():
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
            raise InputError(f"calibration.gpus.{name}.{key}", f"must be a finite number (got {value!r})", where=where)
    known = gpu_names()
    near = [g for g in known if g.lower() == str(name).strip().lower() and g != name]
    if near:  # a catalog GPU spelled in another case would never be applied
        raise InputError(f"calibration.gpus.{name}", f"unknown GPU name; the catalog spells it {near[0]!r}", where=where)
    template = load_gpu(name if name in known else "h100-sxm5-80gb")
    try:
        AcceleratorSpec(**{**template.model_dump(), **{k: v for k, v in over.items() if k not in GPU_CONSTANT_KEYS}})
        CostConstants(**{k: v for k, v in over.items() if k in GPU_CONSTANT_KEYS})  # within the shared one's bounds
    except ValidationError as exc:
        raise from_validation_error(exc, f"calibration.gpus.{name}", where=where) from None


def _lower_case_networks(data: dict, where: str) -> dict:
    """Fabric names are matched lower-case (``--network EFA`` finds ``efa``): a file's ``EFA:`` entry is
    the same fabric, so its key is lower-cased here; two spellings of one fabric are refused."""
    nets = data.get("networks")
    if not isinstance(nets, dict):
        return data
    lowered: dict = {}
    for key, over in nets.items():
        name = str(key).strip().lower()
        if name in lowered:
            raise InputError(f"calibration.networks.{key}", f"names the fabric {name!r} a second time "
                             "(fabric names are matched case-insensitively)", where=where)
        lowered[name] = over
    return {**data, "networks": lowered}


def load_calibration(path: str | Path | None) -> Calibration:
    """The calibration in ``path``; with None, the shipped default profile (or none). Each call returns its
    own copy (a caller that changes one changes no other), read again where the file changed since."""
    if path is None:
        return _default().model_copy(deep=True)
    if not isinstance(path, (str, Path)):
        raise InputError("calibration", f"must be a profile path (str or Path) or None (got {type(path).__name__})")
    return _load(str(path), file_stamp(path)).model_copy(deep=True)


def _default() -> Calibration:
    if DEFAULT_PROFILE_PATH.is_file():
        return _load(str(DEFAULT_PROFILE_PATH), file_stamp(DEFAULT_PROFILE_PATH))
    return _missing_default()


@lru_cache(maxsize=1)
def _missing_default() -> Calibration:
    # never silently uncalibrated: a checkout and a wheel built from one have it; a damaged install may not
    print(f"warning: calibration: the shipped profile {DEFAULT_PROFILE_PATH} is missing; predictions use "
          "datasheet numbers only (reinstall perfmodel: pip install . or pip install -e . in the repository)",
          file=sys.stderr)
    return EMPTY


@lru_cache(maxsize=16)
def _load(path_str: str, stamp: tuple[int, int] | None) -> Calibration:
    """(``stamp``: ``errors.file_stamp``, part of the cache key only)"""
    path = Path(path_str)
    text = read_text_file(path, "calibration")
    data = load_yaml(text, "calibration", str(path))
    if data is None:  # an empty file is the empty profile: datasheet numbers only
        data = {}
    if not data or (isinstance(data, dict) and not any(data.get(k) for k in ("constants", "frameworks", "gpus",
                                                                              "networks"))):
        # said, as an empty file may be a mistake: nothing of the shipped profile is used with it
        say_note(f"calibration {path}: holds no fitted values, so datasheet numbers only are used (not the shipped "
                 "profile)")
    if not isinstance(data, dict):
        raise InputError("calibration", "must be a mapping with constants/frameworks/gpus", where=str(path))
    data = _lower_case_networks(data, str(path))
    try:
        cal = Calibration(**data)
        try:
            cal.cost_constants()
        except ValidationError as exc:  # named under constants:, where the file holds it
            raise from_validation_error(exc, "calibration.constants", where=str(path)) from None
        for name, over in cal.frameworks.items():
            if "tp_internode_efficiency" in over:  # a profile written before it became a shared constant
                raise InputError(f"calibration.frameworks.{name}.tp_internode_efficiency",
                                 "moved to constants.tp_internode_efficiency (cross-node TP, whatever the stack)",
                                 where=str(path))
            if name not in PROFILES:
                raise InputError(f"calibration.frameworks.{name}",
                                 f"unknown framework (known: {', '.join(sorted(PROFILES))})", where=str(path))
            try:
                FrameworkProfile(**{**framework_profile(name).model_dump(), **over})
            except ValidationError as exc:
                raise from_validation_error(exc, f"calibration.frameworks.{name}", where=str(path)) from None
        for net, over in cal.networks.items():
            _check_network(net, over, cal.constants, str(path))
        for name, over in cal.gpus.items():
            bad = set(over) - GPU_OVERRIDABLE
            if bad:
                raise InputError(f"calibration.gpus.{name}", f"only {sorted(GPU_OVERRIDABLE)} can be overridden (got {sorted(bad)})", where=str(path))
            _check_gpu_override(name, over, str(path))
    except ValidationError as exc:
        raise from_validation_error(exc, "calibration", where=str(path)) from None
    return cal
