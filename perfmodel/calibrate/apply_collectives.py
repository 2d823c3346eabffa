"""An nccl-tests fit (``fit_collectives.fit_from_tables``) merged into the profile calibrate writes.

* The node size it assumes: ``--gpus-per-node``, else the ranks per host that every multi-host table's
  ``#  Rank`` lines show (ALCF Polaris: 4), else the GPU's catalog default. It matters: the NIC rate
  given per node is spread over that many GPUs (fit_collectives rescales it to each table's ranks per
  host), so Polaris read as 8-GPU nodes gets half its NIC per GPU and a doubled nic_efficiency.
* Values that end on an end of their range that the data pushed against (``REFUSED_AT``: an
  efficiency at either end, a latency at its top) are reported and not applied, as the GEMM and log
  fits do: such a value explains nothing about the cluster (check --gpu, the node size, the NIC rate).
* Where the values go. A named fabric (``--network efa``) gets them in its own entry and leaves the
  shared constants alone. Without ``--network`` the fit is the default cluster of ``--gpu``: what
  belongs to that GPU, its NVLink tier (``nvlink_efficiency``, ``intra_node_latency_us``) and its
  ``scale_out_latency_us`` (the README's per-GPU latencies), goes to ``gpus.<gpu>`` only, so another
  GPU's collectives are unchanged; the fabric's values (NIC efficiency, protocol switch, ring shape,
  congestion) go to ``networks['']`` and the shared NIC efficiency, as the default fabric's.
"""
from __future__ import annotations

import sys

import numpy as np

from perfmodel.calibrate.fit_collectives import BOUNDS, refused_bound
from perfmodel.calibration_profile import GPU_CONSTANT_KEYS, NETWORK_GPU_KEYS, Calibration
from perfmodel.errors import InputError, say_note
from perfmodel.specs.hardware import AcceleratorSpec, check_node_size

#: a GPU's own values in an unnamed fit: its NVLink tier and its collective latencies
PER_GPU_KEYS = frozenset(NETWORK_GPU_KEYS) | GPU_CONSTANT_KEYS


#: ``node_size``'s source when neither --gpus-per-node nor the Rank lines give the node size
DEFAULT_NODE_SIZE = "catalog default"


def ranks_per_host(tables) -> int | None:
    """The ranks per host that every table spanning 2+ named hosts shows, evenly (16 ranks on 2 hosts:
    8); None without such a table, or when they disagree or a host holds fewer (20 ranks on 3)."""
    seen = {t.n_ranks // t.n_nodes if t.n_ranks % t.n_nodes == 0 else 0
            for t in tables if t.n_nodes and t.n_nodes >= 2 and t.n_ranks}
    return seen.pop() if len(seen) == 1 and 0 not in seen else None


def check_node_size_matches(gpus_per_node: int | None, tables, where: str) -> None:
    """Refuse a --gpus-per-node that the Rank lines of one nccl-tests file contradict (16 ranks on 2 hosts
    given as nodes of 4 GPUs): the fit would cost its tables on nodes they did not run on."""
    seen = ranks_per_host(tables)
    if gpus_per_node is not None and seen is not None and seen != gpus_per_node:
        hosts = sorted({t.n_nodes for t in tables if t.n_nodes and t.n_nodes >= 2})
        raise InputError("gpus_per_node", f"{gpus_per_node} contradicts the nccl-tests Rank lines of {where} "
                         f"({seen} ranks on each of {'/'.join(map(str, hosts))} hosts): give {seen} or leave "
                         "--gpus-per-node out to take it from them")


def node_size(spec: AcceleratorSpec, gpus_per_node: int | None, tables,
              scale_out_gbit_per_s: float | None) -> tuple[int, str]:
    """(GPUs per node, where that number comes from) for a calibrate run; says so on stderr when the
    nccl-tests Rank lines decide it."""
    if gpus_per_node is not None:
        return gpus_per_node, "--gpus-per-node"
    seen = ranks_per_host(tables)
    if seen is not None and seen != spec.default_gpus_per_node:
        try:
            check_node_size(spec, seen, scale_out_gbit_per_s)
        except InputError:  # a node the model cannot cost with the default NICs: keep the default
            seen = None
    if seen is None or seen == spec.default_gpus_per_node:
        hostless = [t for t in tables if not t.n_nodes and (t.n_ranks or 0) > 1]
        if seen is None and hostless:  # nothing in the file says how its ranks sit on nodes: say what is assumed
            say_note(f"nccl-tests: --gpus-per-node not given and {len(hostless)} table(s) name no hosts (no Rank "
                     f"lines): nodes of {spec.default_gpus_per_node} GPUs, the {spec.name} default, are assumed, so up "
                     f"to {spec.default_gpus_per_node} ranks are costed as one node; give --gpus-per-node for the "
                     "nodes the run used")
        return spec.default_gpus_per_node, DEFAULT_NODE_SIZE
    say_note(f"nccl-tests: --gpus-per-node not given; the Rank lines show {seen} ranks per host, so nodes of "
             f"{seen} GPUs are assumed (not the {spec.name} default {spec.default_gpus_per_node}) and a given "
             "--scale-out-gbit-per-s is theirs")
    return seen, "nccl-tests Rank lines"


#: the values the single-node tables fit, before (and held fixed under) the multi-node tables' own
INTRA_NODE_KEYS = frozenset({"nvlink_efficiency", "intra_node_latency_us"})


def tiers_fitted_apart(tables, gpus_per_node: int) -> bool:
    """Whether the fit ran its tiers one after the other (``fit_collectives.fit_collectives``): single-node
    tables (of the shared collectives) beside multi-node ones, so the intra-node values were fitted first
    and held fixed under the inter-node ones."""
    from perfmodel.calibration_profile import NETWORK_OP_SPECIFIC

    spans = {(t.n_nodes or -(-int(t.n_ranks) // max(int(gpus_per_node), 1))) > 1
             for t in tables if t.op not in NETWORK_OP_SPECIFIC and t.n_ranks}
    return spans == {True, False}


def drop_refused(fitted: dict, tiers_apart: bool = False) -> tuple[dict, dict[str, float], dict[str, float]]:
    """(what of ``fitted`` is applied, {parameter: value} on a refused bound, {parameter: value} dropped with
    them). The fit runs in stages (``fit_collectives``): the intra-node tier (``tiers_apart``: on single-node
    tables alone), then the inter-node tier with it fixed, then each collective's own values (``op.`` keys)
    on top. A value on a refused end of its range means its stage does not explain its tables, and the other
    values of that stage compensate for it: the stage is dropped with every stage fitted on top of it (an
    intra-node value: everything; an inter-node one: the inter-node and the collectives' own; a collective's
    own: that collective's). Values that were not fitted (a switched-off protocol at 0, an infinite
    congestion) are not listed."""
    entries = [fitted.get("constants") or {}] + [
        entry for part in ("gpus", "networks") for entry in (fitted.get(part) or {}).values()]

    def stage(key: str) -> str:
        op, _, name = key.rpartition(".")
        if op:
            return op
        return "intra" if (tiers_apart and name in INTRA_NODE_KEYS) else "main"

    refused = {stage(k) for e in entries for k, v in e.items()
               if isinstance(v, (int, float)) and refused_bound(k, float(v))}
    if not refused:
        return fitted, {}, {}

    def dropped_stage(s: str) -> bool:
        return "intra" in refused or s in refused or ("main" in refused and s != "intra")

    dropped: dict[str, float] = {}
    others: dict[str, float] = {}
    applied: dict = {"constants": {}, "gpus": {}, "networks": {}}
    for part in ("constants", "gpus", "networks"):
        named = {"": fitted.get("constants") or {}} if part == "constants" else (fitted.get(part) or {})
        for name, entry in named.items():
            keep = {}
            for k, v in entry.items():
                if not dropped_stage(stage(k)):
                    keep[k] = v
                elif isinstance(v, (int, float)) and refused_bound(k, float(v)):
                    dropped[k] = float(v)
                elif isinstance(v, (int, float)) and np.isfinite(v) and v > 0 and k.rpartition(".")[2] in BOUNDS:
                    others[k] = float(v)
            if part == "constants":
                applied["constants"] = keep
            else:
                applied[part][name] = keep
    # (a value a profile section repeats, e.g. the GPU-wide copy of the refused one, is named once: as refused)
    return applied, dropped, {k: v for k, v in others.items() if k not in dropped}


def fitted_values(fitted: dict) -> int:
    """How many fitted parameters (BOUNDS names, op-prefixed ones too) ``fitted`` holds."""
    def n(entry: dict) -> int:
        return sum(k.rpartition(".")[2] in BOUNDS for k in entry)

    return n(fitted.get("constants") or {}) + sum(n(e) for part in ("gpus", "networks")
                                                   for e in (fitted.get(part) or {}).values())


def merge_fit(cal: Calibration, fitted: dict, network: str | None, gpu_name: str) -> Calibration:
    """``cal`` with the fit's values where they belong (module docstring)."""
    merged = cal.model_dump()
    net = (network or "").strip().lower()
    if net:
        entries = {"networks": fitted.get("networks") or {}}
    else:
        default = dict((fitted.get("networks") or {}).get("", {}))
        own = {k: default.pop(k) for k in list(default) if k in PER_GPU_KEYS}
        entries = {
            "constants": {k: v for k, v in (fitted.get("constants") or {}).items() if k not in PER_GPU_KEYS},
            # the best fit's values (with its protocol switch, which stays in networks['']): what the
            # default fabric reproduces the reported error with; the plain fit's where it has no such value
            "gpus": {gpu_name: {**(fitted.get("gpus") or {}).get(gpu_name, {}), **own}},
            "networks": {"": default} if default else {},
        }
        if "" in merged["networks"]:  # an older profile's default-fabric latencies would win over the GPU's own
            merged["networks"][""] = {k: v for k, v in merged["networks"][""].items() if k not in PER_GPU_KEYS}
    for key, part in entries.items():
        for name, val in part.items():
            if isinstance(val, dict):
                old = dict(merged[key].get(name, {}))
                if key == "networks" and "congestion_nodes" in val and "congestion_max_nodes" not in val:
                    # a congestion refitted on these logs, which the fit ran uncapped: the base's cap
                    # (the range of other measurements) no longer describes it
                    old.pop("congestion_max_nodes", None)
                merged[key][name] = {**old, **val}
            else:
                merged[key][name] = val
    merged["gpus"] = {k: v for k, v in merged["gpus"].items() if v}
    return Calibration(**merged)
