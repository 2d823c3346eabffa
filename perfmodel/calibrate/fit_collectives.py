"""Fit the collective model's few physical parameters to nccl-tests tables.

One parameter set per system (the ``network`` name: one fabric of one cluster; all files and
ranks of a system share it), fitted with ``scipy.optimize.least_squares`` (robust ``soft_l1``
loss) on log(time) over the sizes >= ``min_bytes`` (1 MiB: the sizes training collectives have;
far below it NCCL's latency depends on the algorithm, ring or tree, and on the message count more than its size):

- intra-node tier (when a single-node table exists; the efficiency also whenever a node runs
  >= 2 ranks): ``nvlink_efficiency`` (achieved fraction of
  the GPU's ``intra_node_bandwidth_gb_per_s``) and ``intra_node_latency_us``;
- inter-node tier: ``nic_efficiency`` (fraction of the per-GPU NIC share), ``scale_out_latency_us``,
  ``latency_log2_coeff`` (latency growth with log2 nodes, when >= 2 node counts),
  ``congestion_nodes`` (bw / (1 + nodes / c), when >= 3 node counts or given as fixed),
  ``ring_step_latency_us`` (flat-ring steps, when >= 2 node counts) and the discrete ``ring_inter_node`` (flat ring vs
  hierarchical split, the one with the lower loss where the tables tell them apart, ``shape_identified``; else the
  profile's, unless the other removes a quarter of the loss); the protocol switch (``ll_latency_us``,
  ``ll_bandwidth_ratio``: NCCL's low-latency protocol for the smaller sizes), kept only where it
  removes a quarter of the loss (``LL_MIN_GAIN``), else off;
- all_to_all and send_recv (other NCCL code paths) get their own inter-node values, stored as
  ``all_to_all.nic_efficiency`` etc., with the intra-node tier shared.

The global and per-GPU values (for fabrics without a fit of their own) come from each system's
fit without the protocol switch, the form those fabrics are costed with.

The output is a dict of Calibration overrides (``constants`` / ``gpus`` / ``networks``), the
per-system parameters and a per-table residual DataFrame. Pure: nothing passed in is mutated.
"""
from __future__ import annotations

import datetime as _dt
import hashlib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from perfmodel.calibrate.comm import OP_SPECIFIC, collective_inputs, collective_time, network_key
from perfmodel.costs.comm import OPS, op_factor
from perfmodel.calibrate.parsers.nccl_tests import NcclTestsResult
from perfmodel.calibration_profile import NETWORK_SHAPE_DEFAULTS, Calibration
from perfmodel.errors import InputError
from perfmodel.specs.hardware import AcceleratorSpec, nodes_holding
from perfmodel.units import US_S
from perfmodel.structured_text import dump_yaml

MIB = 2**20
F_SCALE = 0.05
#: NCCL's low-latency protocol (LL / LL128): its latency and its fraction of the bandwidth
LL_PARAMS = ("ll_latency_us", "ll_bandwidth_ratio")
#: the loss a fitted low-latency protocol must remove to be kept (a quarter)
LL_MIN_GAIN = 0.25
REDUCE_FAMILY = ("all_reduce", "all_gather", "reduce_scatter")

# name: (lower, upper, start); all fitted in log space
BOUNDS = {
    "nvlink_efficiency": (0.5, 1.2, 0.8),
    "intra_node_latency_us": (0.5, 5000.0, 20.0),
    "nic_efficiency": (0.01, 1.0, 0.7),
    "scale_out_latency_us": (0.5, 20000.0, 50.0),
    "latency_log2_coeff": (1e-3, 50.0, 0.5),
    "congestion_nodes": (1.0, 1e6, 500.0),
    "ring_step_latency_us": (1e-3, 1000.0, 1.0),
    # NCCL's low-latency protocols: LL carries 4 data bytes per 8 (ratio 1/2), LL128 120 per 128; below a
    # tenth, or a latency under a microsecond across nodes, the "protocol" only bends the fit to one point
    "ll_latency_us": (1.0, 20000.0, 20.0),
    "ll_bandwidth_ratio": (0.1, 1.0, 0.5),
}

#: the end of each range that stops a fit short of where its data point, so that the value explains nothing
#: (wrong --gpu, node size or NIC bandwidth): both ends of an efficiency (a fraction of a datasheet rate)
#: and the top of a latency or growth term. A latency or coefficient at its floor is that term switched off
#: (the others carry the time) and a congestion at its ceiling is none: those are results, applied.
REFUSED_AT = {"nvlink_efficiency": ("lower", "upper"), "nic_efficiency": ("lower", "upper"),
              "ll_bandwidth_ratio": ("lower", "upper"), "intra_node_latency_us": ("upper",),
              "scale_out_latency_us": ("upper",), "latency_log2_coeff": ("upper",),
              "ring_step_latency_us": ("upper",), "ll_latency_us": ("upper",), "congestion_nodes": ("lower",)}


def refused_bound(key: str, value: float) -> str | None:
    """'lower' / 'upper' when fitted value ``value`` of ``key`` (``all_to_all.nic_efficiency`` too) ends
    on an end of its BOUNDS that REFUSED_AT refuses (within 1% of the log range, as ``_inside``), else
    None. A switched-off protocol (ll_bandwidth_ratio 0) and an infinite congestion are not fitted values."""
    name = key.rpartition(".")[2]
    if name not in REFUSED_AT or not (np.isfinite(value) and value > 0):
        return None
    lo, hi = np.log(BOUNDS[name][0]), np.log(BOUNDS[name][1])
    x, margin = np.log(value), 0.01 * (hi - lo)
    end = "lower" if x <= lo + margin else "upper" if x >= hi - margin else None
    return end if end in REFUSED_AT[name] else None


class Measurement(NamedTuple):
    """One nccl-tests table and the system it ran on."""

    result: NcclTestsResult
    gpu: str | AcceleratorSpec
    """Catalog name or spec of the GPU."""
    gpus_per_node: int
    """GPUs per node taking part (nccl-tests -g / ranks per node)."""
    scale_out_gbit_per_s_per_node: float
    """NIC bandwidth of those GPUs per node, Gbit/s."""
    network: str
    """System / fabric name: one parameter set per name."""
    path: str | None = None


@dataclass(frozen=True)
class _Table:
    m: Measurement
    spec: AcceleratorSpec
    op: str
    n: int
    nodes: int
    size: np.ndarray
    time_s: np.ndarray


def _tables(measurements, min_bytes: float) -> list[_Table]:
    from perfmodel.catalog import load_gpu

    out = []
    for m in measurements:
        m = Measurement(*m)
        r = m.result
        if r.op is not None and r.op not in OPS:  # broadcast, reduce, ...: no training collective
            continue
        if r.op is None or r.n_ranks is None:
            unknown = " and ".join(x for x, v in (("op", r.op), ("rank count", r.n_ranks)) if v is None)
            raise InputError("nccl-tests", f"the table's {unknown} must be known to fit (a '#  Rank' line per rank; "
                             "the op in the output's '*_perf' name or the file name: all_reduce, all_gather, "
                             "reduce_scatter, alltoall, sendrecv)", f"{m.path}:{r.first_line}")
        if r.n_ranks < 2:  # one rank moves no data: nothing of a fabric to fit (busbw 0)
            continue
        rows = r.rows[(r.rows["size_bytes"] >= min_bytes) & (r.rows["oop_time_us"] > 0)]
        if rows.empty:
            continue
        spec = m.gpu if isinstance(m.gpu, AcceleratorSpec) else load_gpu(m.gpu)
        out.append(_Table(m, spec, r.op, int(r.n_ranks), max(nodes_holding(r.n_ranks, m.gpus_per_node), 1),
                          rows["size_bytes"].to_numpy(float), rows["oop_time_us"].to_numpy(float) * US_S))
    return out


def _predict(t: _Table, over: dict[str, float], base: Calibration) -> np.ndarray:
    net = network_key(t.m.network)
    # the fitted values over the base profile's own entry for this fabric (a refit of a known fabric
    # keeps what its tables do not determine, e.g. a congestion fitted on more node counts): what is
    # fitted is what the profile written by merging them reproduces
    cal = base.model_copy(update={"networks": {**base.networks, net: {**base.networks.get(net, {}), **over}}})
    inputs = collective_inputs(t.spec, t.n, t.m.gpus_per_node, t.m.scale_out_gbit_per_s_per_node,
                               t.m.network, t.op, cal)
    return np.asarray(collective_time(t.op, t.size, t.n, inputs), dtype=float)


def _free_params(tables: list[_Table], fixed: dict[str, float], intra: bool) -> list[str]:
    single = any(t.nodes == 1 for t in tables)
    multi = sorted({t.nodes for t in tables if t.nodes > 1})
    names = []
    if intra and (single or any(t.m.gpus_per_node > 1 for t in tables)):
        names.append("nvlink_efficiency")
    if intra and single:
        names.append("intra_node_latency_us")
    if multi:
        names += ["nic_efficiency", "scale_out_latency_us"]
        if len(multi) >= 2:
            names += ["latency_log2_coeff", "ring_step_latency_us"]
        if len(multi) >= 3:
            names.append("congestion_nodes")
    return [n for n in names if n not in fixed]


def _fit_group(tables, prefix: str, base_over: dict[str, float], fixed: dict[str, float],
               intra: bool, base: Calibration) -> tuple[dict[str, float], dict[str, float]]:
    """Least squares on log time over the discrete choices: flat ring or hierarchical split across
    nodes, and whether a low-latency protocol is fitted (kept only when it lowers the loss by
    LL_MIN_GAIN: two more parameters must earn their place). Returns (the best overrides, the best
    without a low-latency protocol: the plain alpha-beta values that GPU-wide defaults are taken from)."""
    names0 = _free_params(tables, fixed, intra)
    multi = any(t.nodes > 1 for t in tables)
    # the "without" variant must not inherit a protocol switch: the all_reduce fit's (for an op's own
    # fit) or the base profile's entry for this fabric (written explicitly off, so the merge keeps it off)
    entry = base.networks.get(network_key(tables[0].m.network), {}) if tables else {}
    inherited_ll = entry.get(f"{prefix}ll_bandwidth_ratio", entry.get("ll_bandwidth_ratio", 0.0)) > 0
    switch_on = (prefix and base_over.get("ll_bandwidth_ratio", 0.0) > 0) or inherited_ll
    off = {"ll_bandwidth_ratio": 0.0} if switch_on else {}
    by_ll: dict[bool, tuple[dict[str, float], float]] = {}
    for ll in ((False, True) if multi else (False,)):
        names = names0 + [k for k in LL_PARAMS if k not in fixed] if ll else names0
        fix = fixed if ll else {**fixed, **off}
        if not multi:
            by_ll[ll] = _least_squares(tables, prefix, base_over, fix, names, None, base)
            continue
        cands = {ring: _least_squares(tables, prefix, base_over, fix, names, ring, base) for ring in (0.0, 1.0)}
        # tables whose cross-node byte ratios f_op(n) / f_op(N) are all one cannot tell a flat ring from the
        # hierarchical split (a NIC efficiency in the ratio fits either), yet the two part at other node counts
        # (2 x 8 H100 all_reduce: 1.9x apart at 64 nodes). There the shape the profile held is kept, unless
        # the other removes LL_MIN_GAIN of the loss (the held one's efficiency pinned on a bound).
        held = inherited_ring(entry, base_over, prefix)
        other = 1.0 - held
        if shape_identified(tables) or cands[other][1] < cands[held][1] * (1.0 - LL_MIN_GAIN) - 1e-9:
            by_ll[ll] = min(cands.values(), key=lambda c: c[1])
        else:
            by_ll[ll] = cands[held]
    plain = by_ll[False]
    best = plain
    if True in by_ll:
        over, cost = by_ll[True]
        # kept where it removes LL_MIN_GAIN of the loss (and more than rounding noise, for times the
        # plain form fits exactly) with both parameters inside their bounds: one on a bound is a
        # degenerate protocol that bends the fit to a point or two
        inside = all(_inside(k, over[f"{prefix}{k}"]) for k in LL_PARAMS if f"{prefix}{k}" in over)
        if inside and cost < plain[1] * (1.0 - LL_MIN_GAIN) - 1e-9:
            best = by_ll[True]
    return best[0], plain[0]


def shape_identified(tables) -> bool:
    """Whether multi-node tables tell NCCL's flat ring from the hierarchical split: the ring moves
    f_op(n) S across the NICs, the split f_op(N) S (perfmodel.costs.comm), so only tables whose ratios
    f_op(n) / f_op(N) differ (node counts, or GPUs per node, that vary) tell them apart. all_to_all and
    send_recv take no shape."""
    ratios = {round(float(op_factor(t.op, t.n) / op_factor(t.op, t.nodes)), 6)
              for t in tables if t.nodes > 1 and t.op in REDUCE_FAMILY}
    return len(ratios) >= 2


def inherited_ring(entry: dict, base_over: dict[str, float], prefix: str) -> float:
    """The shape a fit starts from: for an op's own fit the shared fit's (this run's), else the profile's
    entry for the fabric (the op's own value, then the shared one), else the hierarchical default."""
    key = "ring_inter_node"
    if prefix and key in base_over:
        return float(base_over[key] > 0)
    return float(entry.get(f"{prefix}{key}", entry.get(key, NETWORK_SHAPE_DEFAULTS[key])) > 0)


def _inside(name: str, value: float, margin: float = 0.01) -> bool:
    """``value`` lies inside BOUNDS[name] by more than ``margin`` of its log range."""
    lo, hi = np.log(BOUNDS[name][0]), np.log(BOUNDS[name][1])
    x = np.log(value)
    return lo + margin * (hi - lo) < x < hi - margin * (hi - lo)


def _merged(tables: list[_Table]) -> list[_Table]:
    """Tables that one set of collective inputs costs (same op, rank count, node size, bandwidth, fabric and
    GPU) as one table of all their sizes and times: the residual is the same set of log errors, costed in one
    vectorized call per group instead of one per table (a sweep repeated 50 times in one file: 50x fewer)."""
    groups: dict[tuple, list[_Table]] = {}
    for t in tables:
        key = (t.op, t.n, t.nodes, t.m.gpus_per_node, t.m.scale_out_gbit_per_s_per_node, network_key(t.m.network),
               t.spec.model_dump_json())
        groups.setdefault(key, []).append(t)
    return [g[0] if len(g) == 1 else replace(
        g[0], size=np.concatenate([t.size for t in g]), time_s=np.concatenate([t.time_s for t in g]))
        for g in groups.values()]


def _least_squares(tables, prefix, base_over, fixed, names, ring, base):
    tables = _merged(tables)
    def over_of(x):
        over = dict(base_over)
        over.update({f"{prefix}{k}": v for k, v in fixed.items()})
        over.update({f"{prefix}{k}": float(np.exp(v)) for k, v in zip(names, x)})
        if ring is not None:
            over[f"{prefix}ring_inter_node"] = ring
        return over

    def resid(x):
        over = over_of(x)
        return np.concatenate([np.log(_predict(t, over, base)) - np.log(t.time_s) for t in tables])

    x0 = np.log([BOUNDS[k][2] for k in names])
    x, cost = x0, float(0.5 * np.sum(_soft_l1(resid(x0)))) if not names else 0.0
    if names:
        lo = np.log([BOUNDS[k][0] for k in names])
        hi = np.log([BOUNDS[k][1] for k in names])
        # a few deterministic starts (start, and 1/4 and 3/4 of each log range): the latency
        # terms trade against each other, and one start can stop in a poor local minimum
        starts = [x0, lo + 0.25 * (hi - lo), lo + 0.75 * (hi - lo)]
        sols = [least_squares(resid, np.clip(s0, lo, hi), bounds=(lo, hi), loss="soft_l1", f_scale=F_SCALE)
                for s0 in starts]
        sol = min(sols, key=lambda r: r.cost)
        x, cost = sol.x, float(sol.cost)
    return over_of(x), cost


def _soft_l1(r):
    """scipy's soft_l1 loss at f_scale F_SCALE, as least_squares reports it in ``cost`` (x 2)."""
    z = (np.asarray(r) / F_SCALE) ** 2
    return F_SCALE**2 * 2.0 * (np.sqrt(1.0 + z) - 1.0)


def fit_collectives(
    measurements,
    min_bytes: float = MIB,
    fixed: dict[str, dict[str, float]] | None = None,
    base: Calibration | None = None,
    held_intra: dict[str, dict[str, float]] | None = None,
) -> dict:
    """Fit one parameter set per system (``network``) to nccl-tests tables.

    ``measurements``: (NcclTestsResult, gpu, gpus_per_node, scale_out_gbit_per_s_per_node,
    network[, path]) tuples. ``fixed``: per network, values not fitted (e.g. congestion_nodes
    from a bandwidth-vs-nodes curve). ``held_intra``: per network, an NVLink tier (nvlink_efficiency,
    intra_node_latency_us) the profile being refined already holds: kept, not fitted, when none of the
    shared collectives' tables the fit uses spans a single node (multi-node tables barely determine it);
    it never enters a collective's own (``op.``) fit. Returns ``{"constants", "gpus", "networks", "systems",
    "residuals", "held", "shapes_held"}``: the first three are Calibration overrides; ``residuals`` has one row
    per table (median and max |error| over its sizes >= ``min_bytes``); ``held`` the held_intra values kept;
    ``shapes_held`` per network, the ``[op.]ring_inter_node`` kept from the profile where the tables could not
    tell the shapes apart (``shape_identified``)."""
    base = base if base is not None else Calibration()
    fixed = fixed or {}
    tables = _tables(measurements, min_bytes)
    systems: dict[str, dict[str, float]] = {}
    held: dict[str, dict[str, float]] = {}  # the held_intra values each fabric's fit kept
    shapes_held: dict[str, dict[str, float]] = {}  # the shapes kept where the tables could not choose one
    plain: dict[str, dict[str, float]] = {}  # without a low-latency protocol: the GPU-wide defaults' source
    for net in sorted({network_key(t.m.network) for t in tables}):
        ts = [t for t in tables if network_key(t.m.network) == net]
        fix = dict(fixed.get(net, {}))
        main = [t for t in ts if t.op not in OP_SPECIFIC]
        # tier by tier: the intra-node tier from single-node tables, then the inter-node tier
        # on the multi-node tables with it fixed (NVLink efficiency there only without the former)
        single = [t for t in main if t.nodes == 1]
        multi = [t for t in main if t.nodes > 1]
        over = _fit_group(single, "", {}, fix, True, base)[0] if single else {}
        plain[net] = over
        if multi:
            hold = {} if single else {k: v for k, v in (held_intra or {}).get(net, {}).items() if k not in fix}
            over, plain[net] = _fit_group(multi, "", over, {**fix, **hold}, not single, base)
            if hold:
                held[net] = hold
        groups = [("", multi, {})]  # (prefix, tables, what the group's fit started from)
        for op in OP_SPECIFIC:
            sub = [t for t in ts if t.op == op]
            if sub:
                # an op of its own on top of the all_reduce fit; without all_reduce tables, its own
                # tables fit both tiers (still under the op's prefix: the shared values stay as they were)
                base_over = over
                over = _fit_group(sub, f"{op}.", over, fix, not main, base)[0]
                groups.append((f"{op}.", sub, base_over))
        entry = base.networks.get(net, {})
        for prefix, group, started in groups:
            key = f"{prefix}ring_inter_node"
            informative = [t for t in group if t.nodes > 1 and t.op in REDUCE_FAMILY]
            if informative and not shape_identified(informative) and over.get(key) == inherited_ring(
                    entry, started, prefix):
                shapes_held.setdefault(net, {})[key] = over[key]
        systems[net] = over
    residuals = residual_table(tables, systems, base)
    overrides = _overrides(tables, systems, plain)
    return {**overrides, "systems": systems, "residuals": residuals, "held": held, "shapes_held": shapes_held}


class TablesFit(NamedTuple):
    """``fit_from_tables``' result."""

    overrides: dict
    """Calibration overrides: ``constants`` / ``gpus`` / ``networks``."""
    median_abs_err_pct: dict[str, float]
    """Per path (or "table i"): median |error| in % over the sizes the fit used."""
    points: dict[str, int]
    """Per path: the rows the fit used (sizes >= 1 MiB of the collectives it fits, all its tables)."""
    held: dict[str, float]
    """The NVLink tier values kept from the profile instead of fitted (``held_intra``), if any."""
    shapes_held: dict[str, float]
    """The collective shapes (``[op.]ring_inter_node``) kept from the profile, the tables not telling them apart."""


def fit_from_tables(tables, *, gpu_name: str, gpus_per_node: int, scale_out_gbit_per_s_per_node: float,
                    network: str | None = None, paths=None, base: Calibration | None = None,
                    inherited: dict[str, float] | None = None, held_intra: dict[str, float] | None = None) -> TablesFit:
    """One system's tables (``perfmodel calibrate --nccl-tests``) -> ``TablesFit``. Ranks per node
    are taken from each table (ranks / hosts) when it names its hosts, else ``gpus_per_node``; the
    NIC bandwidth ``scale_out_gbit_per_s_per_node`` is that of a ``gpus_per_node`` node, scaled to
    each table's ranks per node.

    ``inherited``: the fabric's entry in the profile the fit is merged into (the shipped EFA one, say).
    The fit runs over it, so what it does not determine (a congestion, which takes three node counts;
    how latency grows with nodes, two; another op's own values) stays the inherited value in the fit as
    in the merged profile, which therefore reproduces the tables it reports on. A congestion the
    tables do fit is fitted uncapped (the inherited cap described other measurements). ``held_intra``: the
    NVLink tier the profile holds for this fabric or GPU (``fit_collectives``' argument of that name)."""
    paths = list(paths) if paths is not None else [f"table {i}" for i in range(len(tables))]
    ms = []
    for t, p in zip(tables, paths):
        # ranks on the fullest host, rounded up (20 ranks on 3 hosts: 7, so the table spans 3 nodes)
        gpn = -(-int(t.n_ranks) // int(t.n_nodes)) if t.n_nodes and t.n_ranks else gpus_per_node
        ms.append(Measurement(t, gpu_name, gpn, scale_out_gbit_per_s_per_node * gpn / gpus_per_node,
                              network or "", str(p)))
    base = base if base is not None else Calibration()
    if inherited:
        entry = dict(inherited)
        counts = {max(nodes_holding(t.n_ranks, m.gpus_per_node), 1) for t, m in zip(tables, ms) if t.n_ranks}
        if len({c for c in counts if c > 1}) >= 3:
            entry.pop("congestion_max_nodes", None)
        base = base.model_copy(update={"networks": {**base.networks, network_key(network or ""): entry}})
    fit = fit_collectives(ms, base=base,
                          held_intra={network_key(network or ""): dict(held_intra)} if held_intra else None)
    per_file = file_residuals(fit["residuals"]) if len(fit["residuals"]) else pd.DataFrame(columns=["path"])
    over = {k: fit[k] for k in ("constants", "gpus", "networks")}
    return TablesFit(over, {r.path: round(100.0 * r.median_abs_error, 2) for r in per_file.itertuples()},
                     {r.path: int(r.points) for r in per_file.itertuples()},
                     fit["held"].get(network_key(network or ""), {}),
                     fit["shapes_held"].get(network_key(network or ""), {}))


def residual_table(tables, systems, base: Calibration) -> pd.DataFrame:
    rows = []
    for t in tables:
        over = systems.get(network_key(t.m.network), {})
        err = _predict(t, over, base) / t.time_s - 1.0
        rows.append({
            "path": t.m.path, "network": network_key(t.m.network), "op": t.op, "n_ranks": t.n,
            "n_nodes": t.nodes, "points": len(t.size),
            "median_abs_error": float(np.median(np.abs(err))), "max_abs_error": float(np.max(np.abs(err))),
            "errors": err,
        })
    return pd.DataFrame(rows)


def file_residuals(residuals: pd.DataFrame) -> pd.DataFrame:
    """Per file: median and max |relative error| over all its points (all its tables pooled)."""
    rows = []
    for path, grp in residuals.groupby("path", sort=False):
        err = np.abs(np.concatenate(list(grp["errors"])))
        rows.append({"path": path, "network": grp["network"].iloc[0], "tables": len(grp), "points": len(err),
                     "median_abs_error": float(np.median(err)), "max_abs_error": float(np.max(err))})
    return pd.DataFrame(rows)


def _overrides(tables, systems, plain) -> dict:
    """Global constants (median over systems), per-GPU latencies, per-network values. The global and
    per-GPU values serve fabrics without a fit of their own, which the plain alpha-beta form (one
    protocol) costs: they are taken from each system's fit without a low-latency protocol."""
    gpu_of = {network_key(t.m.network): t.spec.name for t in tables}
    def med(key, nets=None):
        vals = [plain[n][key] for n in (nets or plain) if key in plain[n]]
        return float(np.median(vals)) if vals else None

    constants = {k: v for k in ("nvlink_efficiency", "nic_efficiency") if (v := med(k)) is not None}
    gpus: dict[str, dict[str, float]] = {}
    for gpu in sorted(set(gpu_of.values())):
        nets = [n for n, g in gpu_of.items() if g == gpu]
        vals = {k: v for k in ("intra_node_latency_us", "scale_out_latency_us") if (v := med(k, nets)) is not None}
        if vals:
            gpus[gpu] = vals
    return {"constants": constants, "gpus": gpus, "networks": {n: dict(v) for n, v in systems.items()}}


def fit_congestion_nodes(nodes, busbw_gb_per_s) -> dict[str, float]:
    """Fit busbw(nodes) = b0 / (1 + nodes / c) (nodes >= 2) in log space; returns
    ``{"congestion_nodes", "busbw0_gb_per_s", "median_abs_error", "max_abs_error", "points", "max_nodes"}``
    (max_nodes: the most nodes measured, beyond which the congestion load is not extrapolated)."""
    nodes = np.asarray(nodes, dtype=float)
    bw = np.asarray(busbw_gb_per_s, dtype=float)
    keep = nodes >= 2
    nodes, bw = nodes[keep], bw[keep]

    def model(x):
        return np.exp(x[0]) / (1.0 + nodes / np.exp(x[1]))

    sol = least_squares(lambda x: np.log(model(x)) - np.log(bw), np.log([bw[0] * 2, 4.0]),
                        bounds=(np.log([1e-3, 0.1]), np.log([1e6, 1e6])), loss="huber", f_scale=0.05)
    err = model(sol.x) / bw - 1.0
    return {"congestion_nodes": float(np.exp(sol.x[1])), "busbw0_gb_per_s": float(np.exp(sol.x[0])),
            "median_abs_error": float(np.median(np.abs(err))), "max_abs_error": float(np.max(np.abs(err))),
            "points": int(len(bw)), "max_nodes": float(nodes.max())}


def _sha_or_none(path, root) -> str | None:
    if not path:
        return None
    p = Path(path)
    if not p.is_file():
        p = _resolve(str(path), root)
    return sha256(p) if p.is_file() else None


def sha256(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def write_profile(fit: dict, out: str | Path, extra_networks: dict | None = None,
                  extra_provenance: dict | None = None, date: str | None = None,
                  sha_root: str | Path | None = None) -> dict:
    """Write the fit as a Calibration profile fragment (YAML); returns what was written.

    ``extra_networks`` merges per-network values (e.g. the EFA congestion); provenance lists each
    input path with its SHA-256, points and residuals, and the date."""
    networks = {n: dict(v) for n, v in fit["networks"].items()}
    for n, v in (extra_networks or {}).items():
        networks.setdefault(n, {}).update(v)
    inputs = []
    res = fit["residuals"]
    for path, grp in res.groupby("path", sort=False):
        inputs.append({
            "path": str(path), "sha256": _sha_or_none(path, sha_root),
            "network": str(grp["network"].iloc[0]),
            "tables": [{"op": r.op, "n_ranks": int(r.n_ranks), "n_nodes": int(r.n_nodes), "points": int(r.points),
                        "median_abs_error": round(float(r.median_abs_error), 4),
                        "max_abs_error": round(float(r.max_abs_error), 4)} for r in grp.itertuples()],
        })
    doc = {
        "constants": {k: float(v) for k, v in fit["constants"].items()},
        "gpus": {g: {k: float(v) for k, v in d.items()} for g, d in fit["gpus"].items()},
        "networks": {n: {k: float(v) for k, v in d.items()} for n, d in networks.items()},
        "provenance": {
            "tool": "perfmodel.calibrate.fit_collectives",
            "date": date or _dt.date.today().isoformat(),
            "method": "scipy.optimize.least_squares(loss='soft_l1', f_scale=0.05) on log(nccl-tests out-of-place time), sizes >= 1 MiB, one parameter set per network",
            "inputs": inputs,
            **(extra_provenance or {}),
        },
    }
    Calibration(**doc)  # the fragment must load
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(dump_yaml(doc, sort_keys=False, width=120))
    return doc


# ---- the shipped systems (calibration/collectives_fit.yaml) ----------------------------------
SHARED_DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
SHIPPED_DATA = Path(__file__).resolve().parents[2] / "calibration" / "data" / "collectives"
SHIPPED_PROFILE = Path(__file__).resolve().parents[2] / "calibration" / "collectives_fit.yaml"
_POLARIS = "alcf_polaris_A100_slingshot/nccl_2_21__"
SHIPPED: list[tuple[str, str, int | None, float, str]] = [
    # (path under data/, gpu, gpus per node (None: ranks / hosts), NIC Gbit/s per node
    #  (per GPU when gpus per node is None), network). Polaris: 4x A100-40GB, one 200 Gbit/s
    # Slingshot 11 NIC per GPU; NCCL 2.21, env setup 5 (the repo's best for all ops).
    *[(f"collectives/{_POLARIS}{run}__{op}_output.dat.5.txt", "a100-sxm4-40gb", 4, 800.0, "slingshot")
      for run in ("n2.g4.2024-04-29-19-08-14", "n8.g4.2024-04-29-21-23-48",
                  "n256.g4.2024-04-29-19-19-41", "n540.g4.2024-04-29-19-39-24")
      for op in ("all_reduce", "alltoall")],
    *[(f"collectives/{_POLARIS}{run}__all_gather_output.dat.5.txt", "a100-sxm4-40gb", 4, 800.0, "slingshot")
      for run in ("n2.g4.2024-04-29-19-08-14", "n8.g4.2024-04-29-21-23-48")],
    # AWS p5: 8x H100, EFA 3200 Gbit/s per node; p4de: 8x A100-80GB, EFA 400 Gbit/s per node
    ("traces/nccl/aws_p5_1node_h100_allreduce.txt", "h100-sxm5-80gb", 8, 3200.0, "efa"),
    ("traces/nccl/aws_p5_2node_h100_allreduce.txt", "h100-sxm5-80gb", 8, 3200.0, "efa"),
    ("traces/nccl/aws_p4de_2node_a100_allreduce.txt", "a100-sxm4-80gb", 8, 400.0, "efa-p4de"),
    # xxrjun cluster01: 10 nodes x G H100; G1 all_reduce busbw 48.9 GB/s = 98% of one
    # 400 Gbit/s NIC, and busbw doubles with G: one 400 Gbit/s NIC per GPU (fabric not stated)
    *[(f"collectives/xxrjun_cluster01_H100_10nodes/nccl_N10_G{g}.log.txt", "h100-sxm5-80gb", None, 400.0,
       "xxrjun-cluster01") for g in (1, 2, 4, 8)],
]
EXCLUDED = {
    "traces/nccl/aws_p5_2node_h100_eks_allreduce_partial.txt":
        "rows elided by the author; a different stack (EKS, NCCL 2.18.5) ~2x slower than the p5 log at 64-256 MiB",
    f"collectives/{_POLARIS}n256.g4.2024-04-29-19-19-41__all_gather_output.dat.5.txt":
        "time flat at 29-30 ms from 32 to 128 MiB and 44-46 ms from 256 MiB to 1 GiB: steps, not alpha-beta",
    f"collectives/{_POLARIS}n540.g4.2024-04-29-19-39-24__all_gather_output.dat.5.txt":
        "time flat at 62-65 ms from 63 to 255 MiB and 94 ms at 511 MiB and 1 GiB: steps, not alpha-beta",
}
FIXED = {"xxrjun-cluster01": {"congestion_nodes": float("inf")}}
"""10 nodes at 98% of NIC line rate: no congestion visible, so none is fitted or applied."""
HF_CONGESTION_CSV = "collectives/hf_playbook_H100_collective_bw_vs_nodes_256MB.csv"


def shipped_measurements(root: str | Path | None = None) -> list[Measurement]:
    """The shipped systems' nccl-tests tables (from ``root``: shared/data, or the copies)."""
    from perfmodel.calibrate.parsers.nccl_tests import parse_nccl_tests_all

    out = []
    for rel, gpu, gpn, nic, net in SHIPPED:
        path = _resolve(rel, root)
        for r in parse_nccl_tests_all(path):
            g = gpn or max(int(r.n_ranks) // int(r.n_nodes or 1), 1)
            out.append(Measurement(r, gpu, g, nic if gpn else nic * g, net, str(path)))
    return out


def _resolve(rel: str, root: str | Path | None) -> Path:
    if root is not None:
        return Path(root) / rel
    shared = SHARED_DATA / rel
    return shared if shared.is_file() else SHIPPED_DATA / rel


def efa_congestion(root: str | Path | None = None) -> dict[str, float]:
    """networks.efa.congestion_nodes from the HF playbook AllReduce median bandwidth at 256 MB
    (taken as busbw) over 2..64 nodes."""
    df = pd.read_csv(_resolve(HF_CONGESTION_CSV, root), comment="#")
    ar = df[df["collective"] == "AllReduce"]
    return fit_congestion_nodes(ar["nodes"], ar["median_bw_GBps"])


def fit_shipped(root: str | Path | None = None) -> tuple[dict, dict[str, float]]:
    """(fit, EFA congestion) of the shipped systems: the EFA congestion fixed from the HF playbook's
    bandwidth-vs-nodes curve and capped at the most nodes it measured."""
    cong = efa_congestion(root)
    fixed = {**FIXED, "efa": {"congestion_nodes": cong["congestion_nodes"]}}
    fit = fit_collectives(shipped_measurements(root), fixed=fixed)
    fit["networks"]["efa"]["congestion_max_nodes"] = cong["max_nodes"]
    # every shipped system is a fabric with a fit of its own (EFA, Slingshot, ...): its latencies stay
    # with it. As per-GPU values they would price every other fabric's collectives on that GPU (an
    # A100-80GB on InfiniBand at EFA p4de's 282 us per cross-node collective, an H100 at 134 us while a
    # B200 kept its profile's 20 us): a fabric without a fit runs at the GPU profile's latencies.
    fit["gpus"] = {}
    return fit, cong


def write_shipped_profile(out: str | Path = SHIPPED_PROFILE, root: str | Path | None = None,
                          copy_to: str | Path | None = SHIPPED_DATA, date: str | None = None) -> dict:
    """Fit the shipped systems and write ``calibration/collectives_fit.yaml``; copy the fitted
    logs (byte for byte) under ``copy_to`` when they total < 5 MB."""
    import shutil

    fit, cong = fit_shipped(root)
    files = list(dict.fromkeys(str(_resolve(rel, root)) for rel, *_ in SHIPPED))
    rel_of = {str(_resolve(rel, root)): rel for rel, *_ in SHIPPED}
    if copy_to is not None and sum(Path(f).stat().st_size for f in files) < 5_000_000:
        for f in files:
            dest = Path(copy_to) / rel_of[f]
            if Path(f).resolve() != dest.resolve():
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(f, dest)
    per_file = file_residuals(fit["residuals"])
    fit = {**fit, "residuals": fit["residuals"].assign(path=fit["residuals"]["path"].map(lambda p: rel_of.get(p, p)))}
    hf = _resolve(HF_CONGESTION_CSV, root)
    return write_profile(fit, out, date=date, extra_provenance={
        "data_root": "shared/data (copies of the fitted logs in calibration/data/collectives)",
        "file_median_abs_error": {rel_of.get(r.path, r.path): round(r.median_abs_error, 4) for r in per_file.itertuples()},
        "excluded": EXCLUDED,
        "efa_congestion": {"path": HF_CONGESTION_CSV, "sha256": sha256(hf), **{k: round(v, 4) for k, v in cong.items()},
                           "model": "AllReduce median GB/s (as busbw) = b0 / (1 + nodes / congestion_nodes), nodes 2..64; "
                           "the load is capped at congestion_max_nodes (the most nodes measured)"},
    }, sha_root=root)


if __name__ == "__main__":  # python -m perfmodel.calibrate.fit_collectives
    doc = write_shipped_profile()
    for path, err in doc["provenance"]["file_median_abs_error"].items():
        print(f"{err:7.1%}  {path}")
