"""What-if sweeps: the same job with one or two things changed, as a tidy DataFrame.

    import perfmodel as pm
    df = pm.whatif("llama3-70b", cluster, job, {"gpu": ["h100-sxm5-80gb", "h200-sxm-141gb"]})
    df = pm.whatif(model, cluster, job, {"scale_out_gbit_per_s": [800, 3200], "gpus": [256, 512]},
                   mode="fixed", parallel=pm.ParallelSpec(tp=8, pp=4, vpp=5))

One row per point of the Cartesian product of the swept values: the swept values, the
``precision`` (the job's, and a point whose GPU lacks it is invalid; with ``gpu_precision`` each GPU's
default: bf16, or fp16 without bf16 tensor cores), the point's ``gpus_per_node`` and
``scale_out_gbit_per_s_per_node`` (a GPU swap takes the new GPU's defaults for what was not stated),
the configuration (fixed, or the best one found), ``iteration_time_s``, ``tokens_per_s_per_gpu``,
``tokens_per_s``, ``mfu``, ``memory_gib``, ``fits``, ``status`` (``ok`` / ``invalid`` / ``no fit``),
``reason`` (why a point is invalid or does not fit) and ``note`` (what the stack cannot run, for a
fixed configuration that is costed as a what-if all the same; '' where nothing). Everything not swept
stays as in the base cluster and job (the network stays when the GPU changes). Infeasible points are
rows with a status, never exceptions. ``df.attrs["notes"]``: the notes of the points costed (``perfmodel.notes``),
once each.

* ``mode="fixed"`` costs one configuration at every point: its tp/pp/cp/vpp/micro-batch/sp/ZeRO/
  recompute are kept and dp is re-derived from the point's GPU count. The inputs of every point
  are built with ``estimate.build_inputs``, stacked, and costed by one ``step_costs`` call. A point
  the stack cannot run (``rules.CAPABILITY_RULES``) is costed with a ``note``, as ``estimate`` does.
* ``mode="best"`` runs the search (``search.engine.run_search``: the same space, ZeRO++ under
  DeepSpeed included, and the same ranking as ``recommend``) at every point and reports its winner.
"""
from __future__ import annotations

import collections.abc
import itertools
import time
from pathlib import Path
from typing import Any, Literal, Mapping, NamedTuple, Sequence, get_args

import numpy as np
import pandas as pd
from pydantic import ValidationError

from perfmodel.calibration_profile import Calibration, load_calibration
from perfmodel.errors import InputError, from_validation_error
from perfmodel.estimate import build_inputs, check_config, check_precision, config_arrays
from perfmodel.limits import MAX_COUNT, MAX_GBIT_PER_S, MAX_GPUS, MIN_GBIT_PER_S
from perfmodel.notes import capability_notes_many, job_notes
from perfmodel.rules import HPZ_NODES, HPZ_TP, ZEROPP_STACK, default_zero_stage
from perfmodel.search.engine import run_search
from perfmodel.specs import AcceleratorSpec, ClusterSpec, JobSpec, ModelSpec, ParallelSpec
from perfmodel.specs.parallel import ZEROPP_ORDER, zeropp_text
from perfmodel.step import stack_inputs, step_costs
from perfmodel.units import GIB_BYTES

Mode = Literal["fixed", "best"]


def check_mode(mode: str) -> None:
    if mode not in get_args(Mode):
        raise InputError("mode", f"must be fixed or best (got {mode!r})")


#: what can be swept -> what it means (units in the name)
VARIABLES: dict[str, str] = {
    "gpus": "GPU count",
    "gpu": "GPU type (catalog name or profile YAML)",
    "scale_out_gbit_per_s": "scale-out NIC bandwidth per node, Gbit/s",
    "seq_len": "sequence length, tokens",
    "global_batch": "global batch, sequences",
    "zeropp_on": "ZeRO++ (qwz, hpz, qgz on ZeRO-3) off/on",
    "calibration": "calibrated profile (path; 'default' = the shipped one)",
}
NUMERIC = ("gpus", "scale_out_gbit_per_s", "seq_len", "global_batch")
WHOLE = ("gpus", "seq_len", "global_batch")
UPPER = {"gpus": MAX_GPUS, "seq_len": MAX_COUNT, "global_batch": MAX_COUNT, "scale_out_gbit_per_s": MAX_GBIT_PER_S}
ZEROPP_ALL = zeropp_text(ZEROPP_ORDER)
CONFIG_COLUMNS = ("tp", "pp", "dp", "cp", "vpp", "micro_batch", "sp", "zero_stage", "zeropp", "recompute", "cp_kind",
                  "offload_fraction")
INT_CONFIG_COLUMNS = ("tp", "pp", "dp", "cp", "vpp", "micro_batch", "zero_stage")
METRIC_COLUMNS = ("iteration_time_s", "tokens_per_s_per_gpu", "tokens_per_s", "mfu", "memory_gib", "fits")
#: the point's cluster as costed: a GPU swap takes the new GPU's node size and NIC bandwidth where not stated
CLUSTER_COLUMNS = ("gpus_per_node", "scale_out_gbit_per_s_per_node")


def _as_bool(value: Any) -> bool:
    """A switch: True/False, or the CLI's text (on/off, true/false, yes/no, 1/0); a number is not one."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if not isinstance(value, str):
        raise InputError("sweep.zeropp_on", f"values must be true or false (got {value!r:.40})")
    text = value.strip().lower()
    if text in {"1", "true", "on", "yes"}:
        return True
    if text in {"0", "false", "off", "no", ""}:
        return False
    raise InputError("zeropp_on", f"must be on/off or true/false (got {value!r})")


def _point_calibration(value: Any) -> tuple[Calibration, str]:
    if isinstance(value, Calibration):
        return value, "custom"
    if value is None or str(value) == "default":
        return load_calibration(None), "default"
    return load_calibration(value), str(value)


def _is_number(value) -> bool:
    """A number, or text that reads as one (the CLI's --vary values are text)."""
    if isinstance(value, bool):
        return False
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return True


def _sweep_key(name: str, value):
    """What makes two values of a swept variable the same point: a number's value, a GPU's name, text."""
    if name in NUMERIC:
        return float(value)
    if isinstance(value, AcceleratorSpec):
        return value.name
    if name in ("gpu", "calibration") and isinstance(value, (str, Path)) and Path(value).is_file():
        return str(Path(value).resolve())  # one file under two spellings (same.yaml, ./same.yaml)
    if name == "zeropp_on":
        return _as_bool(value)
    return value if isinstance(value, Calibration) else str(value)


def _check_sweep(sweep: Mapping[str, Sequence]) -> dict[str, list]:
    if not isinstance(sweep, collections.abc.Mapping):
        raise InputError("sweep", "must be a mapping of variable names to lists of values, e.g. "
                         f"{{'gpus': [256, 512]}} (got {type(sweep).__name__})")
    if not 1 <= len(sweep) <= 2:
        raise InputError("sweep", f"must name one or two variables (got {len(sweep)})")
    out = {}
    for name, values in sweep.items():
        if name not in VARIABLES:
            raise InputError("sweep", f"unknown variable {name!r}; one of {', '.join(VARIABLES)}")
        if isinstance(values, (str, bytes)):
            values = [values]
        if isinstance(values, collections.abc.Mapping):  # list() of a dict is its keys: not what was meant
            raise InputError(f"sweep.{name}", f"must be a list of values, not a mapping (got {values!r:.60})")
        try:
            values = list(values)
        except TypeError:
            raise InputError(f"sweep.{name}", f"must be a list of values (got {values!r:.60})") from None
        if not values:
            raise InputError(f"sweep.{name}", "needs at least one value")
        if name == "gpu" and not all(isinstance(v, (str, Path, AcceleratorSpec)) for v in values):
            raise InputError(f"sweep.{name}", f"values must be catalog names, profile paths or AcceleratorSpecs "
                             f"(got {values!r:.80})")
        if name in NUMERIC and not all(_is_number(v) for v in values):
            raise InputError(f"sweep.{name}", f"values must be numbers (got {values!r:.80})")
        if name in NUMERIC and not all(0 < float(v) < float("inf") for v in values):
            raise InputError(f"sweep.{name}", f"values must be positive finite numbers (got {values})")
        if name == "scale_out_gbit_per_s" and any(float(v) < MIN_GBIT_PER_S for v in values):
            raise InputError(f"sweep.{name}", f"values must be at least {MIN_GBIT_PER_S:g} Gbit/s (got {values})")
        if name in UPPER and any(float(v) > UPPER[name] for v in values):
            raise InputError(f"sweep.{name}", f"values must be at most {UPPER[name]:,} (got {values})")
        if name in WHOLE and not all(float(v) == int(float(v)) for v in values):
            raise InputError(f"sweep.{name}", f"values must be whole numbers (got {values})")
        # a value listed twice is a typo (two identical rows), as the CLI's --vary says
        keys = [_sweep_key(name, v) for v in values]
        repeated = list(dict.fromkeys(str(v.name if isinstance(v, AcceleratorSpec) else v)
                                      for v, k in zip(values, keys) if keys.count(k) > 1))
        if repeated:
            raise InputError(f"sweep.{name}", f"lists {' / '.join(repeated)} more than once")
        out[name] = values
    return out


class _Point(NamedTuple):
    cluster: ClusterSpec | None
    job: JobSpec | None
    calibration: Calibration
    zeropp_on: bool | None
    """ZeRO++ on or off at this point; None where it is not swept (the search's default)."""
    shown: dict[str, Any]
    """The swept values as they go into the frame (names and labels for objects), with the point's
    precision and ``CLUSTER_COLUMNS``."""
    invalid: str = ""
    """Why the point itself is inconsistent (e.g. a GPU count that tp x pp x cp does not divide); '' when it is not."""


def _gpu_labels(values: Sequence) -> list[str]:
    """The ``gpu`` column's label of each swept GPU: its name, or, where two different profiles share that
    name (an edited copy of a catalog file beside the catalog's), the name and the value given, so the rows
    tell them apart."""
    from perfmodel.catalog import load_gpu

    specs = [v if isinstance(v, AcceleratorSpec) else load_gpu(str(v)) for v in values]
    kinds: dict[str, set[str]] = {}
    for spec in specs:
        kinds.setdefault(spec.name, set()).add(spec.model_dump_json())
    return [f"{spec.name} ({v if not isinstance(v, AcceleratorSpec) else f'#{i + 1}'})"
            if len(kinds[spec.name]) > 1 else spec.name for i, (v, spec) in enumerate(zip(values, specs))]


def _point(cluster: ClusterSpec, job: JobSpec, base_cal: Calibration | None, values: dict[str, Any],
           gpu_precision: bool = False) -> _Point:
    """The specs of one point of the sweep; ``gpu_precision``: the job named no precision, so each
    point trains in its GPU's default (bf16, fp16 on a V100)."""
    from perfmodel.catalog import load_gpu

    shown = dict(values)
    gpu = cluster.gpu
    if "gpu" in values:
        gpu = values["gpu"] if not isinstance(values["gpu"], (str, Path)) else load_gpu(str(values["gpu"]))
        shown["gpu"] = gpu.name
    cal = base_cal if base_cal is not None else load_calibration(None)
    if "calibration" in values:
        cal, shown["calibration"] = _point_calibration(values["calibration"])
    zpp = _as_bool(values["zeropp_on"]) if "zeropp_on" in values else None
    if "zeropp_on" in values:
        shown["zeropp_on"] = zpp
    n = int(values.get("gpus", cluster.n_gpus))
    # a bandwidth or node size neither swept nor stated is the (swept) GPU's default (ClusterSpec.resized)
    bw = float(values["scale_out_gbit_per_s"]) if "scale_out_gbit_per_s" in values else None
    # the network stays: a swapped GPU keeps the fabric's scale-out latency (the stated one, else the
    # calibrated one of the starting GPU and fabric), not the latency calibrated with its own kind
    latency = None
    if gpu.name != cluster.gpu.name and cluster.stated_latency_us is None:
        latency = cal.for_network(cluster.gpu, cluster.network)[1].scale_out_latency_us
    try:
        c = cluster.resized(n, gpu, bw, latency)
        j = JobSpec(**{**job.model_dump(), **{k: int(values[k]) for k in ("seq_len", "global_batch") if k in values}})
    except ValidationError as exc:
        return _Point(None, None, cal, zpp, shown, str(from_validation_error(exc)))
    shown.update(gpus_per_node=c.gpus_per_node, scale_out_gbit_per_s_per_node=c.scale_out_gbit_per_s_per_node)
    if gpu_precision:
        j = j.model_copy(update={"precision": gpu.default_precision})
    shown["precision"] = j.precision
    try:
        check_precision(gpu, j.precision)
    except InputError as exc:
        return _Point(None, None, cal, zpp, shown, str(exc))
    return _Point(c, j, cal, zpp, shown)


def _fixed_parallel(parallel: ParallelSpec, n_gpus: int, zeropp_on: bool | None) -> ParallelSpec:
    mp = parallel.tp * parallel.pp * parallel.cp
    if n_gpus % mp:
        raise InputError("gpus", f"must be a multiple of tp*pp*cp (gpus={n_gpus}, tp*pp*cp={mp})")
    update: dict[str, Any] = {"dp": n_gpus // mp}
    if zeropp_on is True:
        update.update(zero_stage=3, zeropp=ZEROPP_ALL)
    elif zeropp_on is False:
        update.update(zeropp=frozenset())
    try:
        return ParallelSpec(**{**parallel.model_dump(), **update})
    except ValidationError as exc:
        raise from_validation_error(exc, "parallel") from None


def _config_row(par: ParallelSpec) -> dict[str, Any]:
    return {**{k: getattr(par, k) for k in CONFIG_COLUMNS if k not in ("zeropp", "sp")},
            "sp": bool(par.sp and par.tp > 1), "zeropp": zeropp_text(par.zeropp)}


def _run_fixed(points, parallel: ParallelSpec, model: ModelSpec, sweep_zpp: bool, framework: str) -> list[dict]:
    rows, inputs, arrays, where = [], [], [], []
    for c, j, cal, zpp, shown, invalid in points:
        if invalid:
            rows.append({**shown, "status": "invalid", "reason": invalid})
            continue
        try:
            par = _fixed_parallel(parallel, c.n_gpus, zpp if sweep_zpp else None)
            check_config(model, c, par, j)
        except InputError as exc:
            rows.append({**shown, "status": "invalid", "reason": str(exc)})
            continue
        rows.append({**shown, **_config_row(par), "status": "ok", "reason": ""})
        inputs.append(build_inputs(model, c, par, j, cal))
        arrays.append(config_arrays(model, c, par, j))
        where.append(len(rows) - 1)
    # what the stack cannot run is costed all the same, with estimate's note
    for r, notes in zip(where, capability_notes_many(arrays, framework)):
        rows[r]["note"] = "; ".join(notes)
    if inputs:
        out = step_costs(stack_inputs(inputs))
        n_gpus = np.array([x["tp"] * x["pp"] * x["dp"] * x["cp"] for x in inputs], dtype=float)
        out["tokens_per_s"] = out["tokens_per_s_per_gpu"] * n_gpus
        for i, r in enumerate(where):
            rows[r].update({k: (bool(out[k][i]) if k == "fits" else float(out[k][i])) for k in METRIC_COLUMNS})
            if not rows[r]["fits"]:
                cap_gib = inputs[i]["hbm_capacity_bytes"] / GIB_BYTES
                host_gib = float(out["host_offload_gib"][i])
                host_cap_gib = inputs[i]["host_memory_bytes_per_gpu"] / GIB_BYTES
                why = (f"offloads {host_gib:.1f} GiB per GPU to host memory, over its {host_cap_gib:g} GiB"
                       if rows[r]["memory_gib"] <= cap_gib and host_gib > host_cap_gib
                       else f"needs {rows[r]['memory_gib']:.1f} GiB per GPU")
                rows[r].update(status="no fit", reason=why)
    return rows


def _best_one(model: ModelSpec, c: ClusterSpec, j: JobSpec, cal: Calibration, zpp: bool | None) -> dict[str, Any]:
    """The search's winner at one point: ``run_search`` as ``recommend`` runs it (its space, ZeRO++
    where the stack has it, its ranking). ``zpp`` True: the fastest ZeRO-3 configuration of that search
    with qwZ, hpZ and qgZ all on; False: the search without ZeRO++; None: the search's default."""
    res = run_search(model, c, j, cal, top=None if zpp else 1, zeropp=zpp)
    ev, best = res.evaluated[0], res.candidates
    considered = np.ones(ev.configs["tp"].size, dtype=bool)
    if zpp:
        considered = (ev.configs["zero_stage"] == 3) & (ev.configs["qwz"] > 0) & (ev.configs["hpz"] > 0) & (
            ev.configs["qgz"] > 0)
        best = best[best["zeropp"] == ZEROPP_ALL]
    if not considered.any():
        why = "no structurally valid configuration" + (f" with {ZEROPP_ALL} on ZeRO-3" if zpp else "")
        for rule in (HPZ_NODES, ZEROPP_STACK, HPZ_TP):
            if zpp and rule.reason in res.rejected:
                why += f" ({rule.reason})"
        if not zpp and res.rejected:
            # a factor of the count no parallel size can take, else the rules that rejected the most candidates,
            # with their counts, as recommend names them
            why += ": " + res.no_layout_reason(ev)
        return {"status": "invalid", "reason": why}
    if best.empty:
        return {"status": "no fit", "reason": f"none of {int(considered.sum()):,} configurations fits "
                f"(least {ev.metrics['memory_gib'][considered].min():.1f} GiB per GPU)"}
    rec = best.iloc[0]
    row = {k: rec[k].item() if hasattr(rec[k], "item") else rec[k] for k in CONFIG_COLUMNS + METRIC_COLUMNS
           if k != "fits"}
    row.update(sp=bool(row["sp"]), fits=True)
    return {**row, "status": "ok", "reason": ""}


def whatif(
    model: ModelSpec | str,
    cluster: ClusterSpec,
    job: JobSpec,
    sweep: Mapping[str, Sequence],
    *,
    mode: Mode = "best",
    parallel: ParallelSpec | None = None,
    calibration: Calibration | None = None,
    gpu_precision: bool = False,
) -> pd.DataFrame:
    """Sweep one or two ``VARIABLES``; one row per point (see the module docstring).
    ``gpu_precision``: ``job`` names no precision of its own, so each point trains in its GPU's
    default (bf16, or fp16 on a GPU without bf16 tensor cores); so does a ``JobSpec`` built without
    a precision (``JobSpec.precision_stated``). Otherwise every point keeps the job's precision, and a
    point whose GPU lacks it is invalid.

    In mode fixed, a ``parallel`` that does not state its ZeRO stage takes ``default_zero_stage`` of the
    job's stack (3 under torchtitan, else 1).

    ``df.attrs``: sweep (variable names in order), mode, elapsed_s, notes (``perfmodel.notes.job_notes``
    of the base cluster and calibration)."""
    t0 = time.perf_counter()
    from perfmodel.api_inputs import api_inputs, api_calibration

    model, cluster, job, parallel, _ = api_inputs(model, cluster, job, parallel, None)
    # (a calibration what-if sweeps profiles by path: the base one may be a path as well)
    calibration = api_calibration(calibration) if calibration is not None else None
    check_mode(mode)
    if not isinstance(gpu_precision, (bool, np.bool_)):
        raise InputError("gpu_precision", f"must be true or false (got {gpu_precision!r:.40})")
    if mode == "fixed" and parallel is None:
        raise InputError("parallel", "is required with mode fixed (the configuration to evaluate)")
    sweep = _check_sweep(sweep)
    if mode == "fixed" and "zero_stage" not in parallel.model_fields_set:
        parallel = parallel.model_copy(update={"zero_stage": default_zero_stage(job.framework)})
    gpu_precision = gpu_precision or not job.precision_stated
    names = list(sweep)
    combos = list(itertools.product(*sweep.values()))
    points = [_point(cluster, job, calibration, dict(zip(names, combo)), gpu_precision) for combo in combos]
    if "gpu" in sweep:
        labels = _gpu_labels(sweep["gpu"])
        for p, combo in zip(points, combos):
            p.shown["gpu"] = labels[sweep["gpu"].index(combo[names.index("gpu")])]
    if mode == "fixed":
        rows = _run_fixed(points, parallel, model, "zeropp_on" in sweep, job.framework)
    else:
        rows = [{**p.shown, **(_best_one(model, p.cluster, p.job, p.calibration, p.zeropp_on) if not p.invalid
                               else {"status": "invalid", "reason": p.invalid})} for p in points]
    columns = (names + ["precision", *CLUSTER_COLUMNS] + list(CONFIG_COLUMNS) + list(METRIC_COLUMNS)
               + ["status", "reason", "note"])
    # a point without a fit or a note (invalid, or found by the search) has False and ''
    df = pd.DataFrame([{"fits": False, "note": "", **r} for r in rows]).reindex(columns=columns)
    df["fits"] = df["fits"].astype(bool)
    for col in (*INT_CONFIG_COLUMNS, "gpus_per_node"):  # whole numbers, blank (NA) where a point has none
        df[col] = df[col].astype("Int64")
    cal = calibration if calibration is not None else load_calibration(None)
    # the notes of every point costed (a swept sequence length, GPU or network changes what they say),
    # once each in the sweep's order; the job's own where no point is
    valid = [p for p in points if not p.invalid and p.job is not None and p.cluster is not None]
    notes = list(dict.fromkeys(n for p in valid for n in job_notes(p.job, p.cluster, p.calibration or cal, model))) \
        if valid else job_notes(job, cluster, cal, model)
    df.attrs.update(sweep=names, mode=mode, elapsed_s=time.perf_counter() - t0, notes=notes)
    return df
