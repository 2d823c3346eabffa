"""``perfmodel calibrate``: measured inputs in, a calibrated profile YAML out.

Each input kind feeds the parameters it can identify:
* runs CSVs      -> framework/global/fabric parameters (``fit_runs``);
* nccl-tests     -> collective latency/bandwidth/congestion (``fit_collectives``);
* GEMM CSVs      -> the GPU's best-shape matmul efficiency (``fit_gemm``);
* training logs  -> a Megatron-family log that prints its arguments block states its configuration:
  the stack's kernel_efficiency is fitted to its median iteration time (``fit_logs``); other logs
  are summarised (step times, throughput): with no configuration there is nothing to predict;
* traces         -> summarised (kernel-time split, NCCL busbw per collective) and their NCCL kernels
  compared with the model's time for the same collective (the residual per trace); a kernel's time
  includes waiting for the other ranks and the trace carries no configuration of the step, so
  nothing is fitted from the NCCL kernels. The matmuls a trace recorded with their shapes
  (``record_shapes=True``: ``KinetoSummary.gemm_ops``) join the GEMM files' best-shape estimate.
The profile records this run only (``provenance``): every input (path, SHA-256, the points its fit
used), the fit residuals, the date, the cluster assumed and the base profile by path and SHA-256. It is
written atomically: on any error no file is left behind. Inputs that name their GPU (nccl-tests Rank
lines, a trace's deviceProperties) must name the family of ``--gpu`` (``gpu_family``).
"""
from __future__ import annotations

import datetime as dt
from pathlib import Path
import sys

import numpy as np
import pandas as pd
from pydantic import ValidationError

from perfmodel.calibrate.apply_collectives import (
    DEFAULT_NODE_SIZE, check_node_size_matches, drop_refused, fitted_values, merge_fit, node_size, tiers_fitted_apart,
)
from perfmodel.calibrate.fit_collectives import MIB, fit_from_tables
from perfmodel.calibrate.gpu_family import check_device_matches
from perfmodel.calibrate.provenance import base_record, cluster_record, rel as _rel, sha256_of
from perfmodel.calibration_profile import Calibration, load_calibration
from perfmodel.catalog import load_gpu
from perfmodel.costs.compute import gemm_time_s, wave_efficiency
from perfmodel.constants import DEFAULT_CONSTANTS
from perfmodel.errors import (
    InputError, NothingUsable, one_line, output_file, same_file, say_note, write_file_atomic,
)
from perfmodel.limits import MAX_ACHIEVED_OVER_PEAK, MAX_GBIT_PER_S, MIN_GBIT_PER_S
from perfmodel.specs.hardware import AcceleratorSpec, check_network_name
from perfmodel.step import FP4_ELEMENT_BYTES, FP8_ELEMENT_BYTES
from perfmodel.structured_text import dump_yaml


#: the GEMM precisions each fitted efficiency stands for; rows in others (fp32, tf32, 4-bit) are
#: timed and checked but fit nothing: the model has no parameter for them
GEMM_FIT_GROUPS = {"matmul_efficiency_max": ("bf16", "fp16"), "fp8_matmul_efficiency_max": ("fp8", "mxfp8")}


def _gpu_spec(gpu: str | AcceleratorSpec) -> AcceleratorSpec:
    return gpu if isinstance(gpu, AcceleratorSpec) else load_gpu(gpu)


def fit_gemm(gemm: pd.DataFrame, gpu: str | AcceleratorSpec, fixed: dict[str, float] | None = None,
             training_efficiency: float | None = None) -> tuple[dict[str, float], pd.DataFrame]:
    """The best-shape matmul efficiency (MAMF / dense peak) of ``gpu`` (catalog name or spec) that measured
    GEMM times show: bf16/fp16 rows give ``matmul_efficiency_max``, fp8/mxfp8 rows
    ``fp8_matmul_efficiency_max``, each against its own dense peak; other rows fit nothing (NaN errors).

    Each row implies an efficiency through the wave-quantized roofline the step model uses (its FLOPs over
    the peak, its wave efficiency and its time; a launch cost is not taken off: a trace's kernel times hold
    none); only the rows that roofline puts on the tensor cores count (a memory-bound row only bounds it
    from below), and of those the well-tiled ones (wave efficiency >= ``MAMF_MIN_WAVE``) where there are
    any (a partly filled wave costs less on the GPU than the model's whole-wave count says). The best-shape
    value is the ``MAMF_QUANTILE`` of them, and at most the second-highest: a sweep of training shapes runs
    most of them below the best shape, and the
    step model already costs that with ``matmul_training_efficiency`` (0.85) on top of this value, so a fit
    through the middle of the rows would count it twice (a real H200's Llama-3 layer GEMMs: best 0.799 of
    peak, a least-squares fit 0.705, and then 0.705 x 0.85 for every GEMM of a training step).
    The errors returned are the step model's: each row's time at that value x ``training_efficiency``
    (default: the shipped constant). ``fixed``: values to take instead of estimating them (a row's error
    under an estimate made from other rows)."""
    gpu = _gpu_spec(gpu)
    mte = DEFAULT_CONSTANTS.matmul_training_efficiency if training_efficiency is None else training_efficiency
    dtypes = np.array([_gemm_dtype(d) for d in gemm["dtype"]])
    peak = np.array([gpu.peak_flop_per_s(d) for d in dtypes])
    m, n, k = (gemm[c].to_numpy(dtype=float) for c in ("m", "n", "k"))
    # a batched GEMM tiles like one with batch x m rows
    m = m * (gemm["batch"].to_numpy(dtype=float) if "batch" in gemm else 1.0)
    t = gemm["time_s"].to_numpy(dtype=float)
    # operands in their own precision, the output in 16 bits (as the step model costs a GEMM)
    operand_bytes = np.array([FP4_ELEMENT_BYTES if d == "nvfp4" else FP8_ELEMENT_BYTES if d in ("fp8", "mxfp8")
                              else 2.0 for d in dtypes])
    wave = wave_efficiency(m, n, gpu.n_sms)
    flops = 2.0 * m * n * k
    with np.errstate(all="ignore"):
        implied = flops / (peak * wave * t)
    # on the tensor cores even at the full peak: the operands and output move in less time than the math
    # takes, and the math takes long enough that the launch cost (a few us) does not make the time
    math_s = flops / (peak * wave)
    compute_bound = ((math_s > (operand_bytes * (m * k + k * n) + 2.0 * m * n) / gpu.hbm_bandwidth_bytes_per_s)
                     & (math_s >= MAMF_MIN_MATH_S))

    def model_time(eff, sel):
        return gemm_time_s(m[sel], n[sel], k[sel], peak[sel], eff * mte, gpu.n_sms, gpu.hbm_bandwidth_bytes_per_s,
                           operand_bytes[sel], 2.0)

    fitted: dict[str, float] = {}
    err = np.full(len(t), np.nan)
    for key, group in GEMM_FIT_GROUPS.items():
        sel = np.isin(dtypes, group)
        if not sel.any():
            continue
        if fixed is not None and key in fixed:
            eff = float(fixed[key])
        else:
            ok = sel & compute_bound & np.isfinite(implied) & (implied > 0)
            if not ok.any():  # a memory-bound sweep measures HBM, not the tensor cores: nothing to estimate
                continue
            if (ok & (wave >= MAMF_MIN_WAVE)).any():
                ok &= wave >= MAMF_MIN_WAVE
            vals = np.sort(implied[ok])
            eff = float(np.quantile(vals, MAMF_QUANTILE))
            if len(vals) >= 2:  # one mistimed row never sets it
                eff = min(eff, float(vals[-2]))
            eff = float(np.clip(eff, *GEMM_EFFICIENCY_BOUNDS))
        fitted[key] = eff
        with np.errstate(all="ignore"):
            err[sel] = np.abs(model_time(eff, sel) / t[sel] - 1.0) * 100
    return fitted, pd.DataFrame({"m": m, "n": n, "k": k, "abs_err_pct": err})


MAMF_QUANTILE = 0.95
"""The quantile of a sweep's implied efficiencies taken as its best-shape rate (MAMF): stas00's MAMF
finder takes the maximum of a brute-force search over far more shapes; with the cap at the second-highest
row, a mistimed row does not set it."""
MAMF_MIN_MATH_S = 20e-6
"""Least time a row's math takes at the full peak for the row to count: five launch costs
(``costs.compute.KERNEL_LAUNCH_S``); below it a time measures the launch, not the tensor cores."""
MAMF_MIN_WAVE = 0.9
"""Wave efficiency (``costs.compute.wave_efficiency``) from which a row counts as well tiled."""


GEMM_EFFICIENCY_BOUNDS = (0.05, 1.0)
"""Range of a fitted best-shape matmul efficiency (fraction of the dense peak)."""


def _gemm_dtype(name) -> str:
    from perfmodel.calibrate.parsers.gemm_csv import allowed_dtypes_text, canonical_dtype

    canon = canonical_dtype(name)
    if canon is None:
        raise InputError("dtype", f"unknown GEMM dtype {str(name)!r}; allowed: {allowed_dtypes_text()}")
    return canon


#: GEMM CSV columns that name the GPU a row was measured on
GEMM_DEVICE_COLUMNS = ("gpu", "gpu_type", "gpu_name", "device", "device_name")


def check_gemm_rows(gemm: pd.DataFrame, gpu: str | AcceleratorSpec) -> pd.DataFrame:
    """Reject rows ``gpu_name`` cannot have produced: a dtype its profile has no dense peak for
    (it would be costed at another precision's peak), or a time that implies more than
    ``MAX_ACHIEVED_OVER_PEAK`` x that peak. Names the file and line when the parser recorded
    them (``parse_gemm_csv`` does); returns ``gemm`` unchanged."""
    gpu = _gpu_spec(gpu)
    path, lines = gemm.attrs.get("path"), gemm.attrs.get("lines")
    time_col = gemm.attrs.get("time_column", "time_s")

    places = gemm.attrs.get("where")  # a place per row where the rows do not come from lines (a trace's events)

    def where(i: int) -> str:
        if places is not None and i < len(places):
            return places[i]
        return f"{path}:{lines[i]}" if path and lines and i < len(lines) else f"gemm row {i + 1}"

    # a column naming the GPU each row ran on (kernels.csv's gpu_type, a benchmark's gpu / device) must
    # name --gpu's family, as nccl-tests' Rank lines and a trace's deviceProperties must
    from perfmodel.calibrate.gpu_family import check_device_matches

    if gemm.attrs.get("device"):  # the file's own '# source: ... device=NAME' line
        check_device_matches(gpu.name, str(gemm.attrs["device"]), f"{path}:{gemm.attrs.get('device_line', 1)}")
    for col in [c for c in gemm.columns if str(c).lower() in GEMM_DEVICE_COLUMNS]:
        for i, cell in enumerate(gemm[col].astype(str)):
            if cell.strip() and cell.strip().lower() != "nan":
                check_device_matches(gpu.name, cell.strip(), where(i))

    peaks = gpu.peak_dense_tflop_per_s
    # plain lists: a per-row pandas lookup copies the frame's attrs (a line per row) each time
    batches = gemm["batch"].tolist() if "batch" in gemm else [1.0] * len(gemm)
    for i, (d, m, n, k, t) in enumerate(zip(gemm["dtype"].tolist(), gemm["m"].tolist(), gemm["n"].tolist(),
                                            gemm["k"].tolist(), gemm["time_s"].tolist())):
        dtype = _gemm_dtype(d)
        # fp32/tf32 are CUDA-core / TF32 rates, not training precisions: checked against their peaks
        if dtype not in peaks or (dtype not in ("fp32", "tf32") and not gpu.supports_precision(dtype)):
            raise InputError("dtype", f"{gpu.name} has no {dtype} tensor cores in its profile (it has "
                             f"{', '.join(p for p in peaks if p in ('fp32', 'tf32') or gpu.supports_precision(p))})"
                             ", so these rows cannot be fitted", where(i))
        batch = float(batches[i])
        achieved = 2.0 * batch * float(m) * float(n) * float(k) / float(t)
        # an fp32 matmul may have run on TF32 tensor cores (NGC containers allow it by default)
        peak = max(gpu.peak_flop_per_s(dtype), gpu.peak_flop_per_s("tf32") if dtype == "fp32" and "tf32" in peaks
                   else 0.0)
        if achieved > MAX_ACHIEVED_OVER_PEAK * peak:
            raise InputError(time_col, f"implies {achieved / 1e12:,.4g} TFLOP/s, more than "
                             f"{MAX_ACHIEVED_OVER_PEAK}x the {gpu.name} dense {dtype} peak "
                             f"({peak / 1e12:,.0f} TFLOP/s): not a real timing (check the unit and "
                             "the dtype)", where(i))
    return gemm


def _trace_gemm_rows(summary, path, spec) -> pd.DataFrame | None:
    """A trace's recorded matmuls (``KinetoSummary.gemm_ops``) as GEMM rows, with the trace as their file,
    each call checked (``check_gemm_rows``, naming its event) before the steps' calls of a shape are merged;
    None when it recorded none in a precision the estimate uses (no ``record_shapes``, fp32 only)."""
    g = summary.gemm_ops
    if g.empty or not g["dtype"].isin([d for ds in GEMM_FIT_GROUPS.values() for d in ds]).any():
        return None
    calls = g.reset_index(drop=True)
    calls.attrs.update({"path": str(path), "where": _EventPlaces(Path(path), calls["line"].tolist(),
                                                                 calls["op"].tolist())})
    check_gemm_rows(calls, spec)
    # one row per distinct matmul (the median over the steps that repeat it): a three-step trace of one
    # layer would otherwise weigh three times a sweep's row
    keys = ["m", "n", "k", "batch", "dtype", "op"]
    g = (g.groupby(keys, sort=False).agg(time_s=("time_s", "median"), event=("event", "first"), line=("line", "first"),
                                          calls=("time_s", "size"))
         .reset_index()[["m", "n", "k", "dtype", "time_s", "batch", "op", "event", "line", "calls"]])
    g.attrs.update({"path": str(path), "where": _EventPlaces(Path(path), g["line"].tolist(), g["op"].tolist())})
    return g


class _EventPlaces:
    """Where each of a trace's matmul rows comes from: ``path:line`` of its op event."""

    def __init__(self, path: Path, lines: list[int], ops: list[str]):
        self.path, self.lines, self.ops = path, lines, ops

    def __len__(self) -> int:
        return len(self.lines)

    def __getitem__(self, i: int) -> str:
        return f"{self.path}:{int(self.lines[i])} ({self.ops[i]}, timed by its kernels)"


def _estimate_gemm(sources, spec, cal: Calibration, echo, refused: list, applied_from: list,
                   gpus_over: dict) -> dict[str, dict]:
    """The best-shape rate over every GEMM source (``fit_gemm``): GEMM files and traces' recorded matmuls,
    (path, rows, kind) each. Each is checked by its own estimate first, as if given alone: a GEMM file with
    nothing to estimate is refused (a trace then only has nothing to add), one whose estimate ends on its
    bound (a wrong time unit, dtype or --gpu) is said and left out; the rest are one estimate (all measure
    this GPU), so a second source refines the first instead of replacing it, whatever their order, and each
    source's line gives its own shapes' error under it. Returns, per path, its provenance fields (points,
    median_abs_err_pct and what was applied from it)."""
    if not sources:
        return {}
    mte = cal.cost_constants().matmul_training_efficiency  # the errors are the step model's, as estimate costs
    usable = []
    for p, g, kind in sources:
        own_effs, _ = fit_gemm(g, spec, training_efficiency=mte)
        if not own_effs and kind == "trace":  # a trace is more than its matmuls: it is still summarised
            echo(f"trace {p}: {int(g['calls'].sum())} matmuls with recorded shapes, none on the tensor cores in "
                 "bf16/fp16 or fp8 (memory-bound or launch-bound shapes): nothing for the GEMM estimate")
            continue
        if not own_effs:
            raise InputError("dtype", "no compute-bound bf16/fp16 or fp8/mxfp8 row: nothing the model has a matmul "
                             "efficiency for (fp32, tf32 and 4-bit rows are checked but fit nothing; a shape whose "
                             "operands take longer to move than its math measures HBM, one whose math takes under "
                             f"{MAMF_MIN_MATH_S * 1e6:g} us at the peak its launch)", str(p))
        at_bound = {k: v for k, v in own_effs.items()
                    if not GEMM_EFFICIENCY_BOUNDS[0] * 1.001 < v < GEMM_EFFICIENCY_BOUNDS[1] * 0.999}
        for key, value in at_bound.items():
            # as for a log: a fit stopped by its bound is not a rate the roofline explains
            print(f"warning: {kind} {p}: the {key} fit ends on its bound ({value:.3f}): these times are not "
                  "a matmul rate of this GPU's roofline (check the time unit, the dtype and --gpu), so it is "
                  "not applied", file=sys.stderr)
        if at_bound and not set(own_effs) - set(at_bound) and kind == "gemm":  # a trace is refused where summarised
            refused.append(str(p))
        usable.append((p, g, kind, set(own_effs) - set(at_bound)))
    keys = set().union(*(k for *_, k in usable))
    rows = [g[g["dtype"].map(_gemm_dtype).isin([d for k in ks for d in GEMM_FIT_GROUPS[k]])][["m", "n", "k", "dtype",
            "time_s", "batch"]] for _, g, _, ks in usable]
    effs, _ = fit_gemm(pd.concat(rows, ignore_index=True), spec, training_efficiency=mte) if keys else ({}, None)
    effs = {k: v for k, v in effs.items() if k in keys}
    gpus_over.setdefault(spec.name, {}).update(effs)
    if effs:
        applied_from.append("gemm")
    n_joint = sum(bool(ks) for *_, ks in usable)
    info = {}
    for p, g, kind, ks in usable:
        # this source's shapes under what is applied; one nothing is applied from: under its own estimate
        groups = g["dtype"].map(_gemm_dtype).isin([d for k in ks for d in GEMM_FIT_GROUPS[k]])
        _, errs = (fit_gemm(g, spec, fixed={k: effs[k] for k in ks if k in effs}, training_efficiency=mte) if ks
                   else fit_gemm(g, spec, training_efficiency=mte))
        err = errs.abs_err_pct.where(groups.to_numpy()) if ks else errs.abs_err_pct
        med = float(err.median()) if err.notna().any() else float("nan")
        info[str(p)] = {"points": int(err.notna().sum()) if ks else 0, "median_abs_err_pct": med,
                        **{k: v for k, v in effs.items() if k in ks}}
        skipped = int(len(g) - err.notna().sum()) if ks else int(errs.abs_err_pct.isna().sum())
        what = f"{len(g)} shapes" if kind == "gemm" else f"{int(g['calls'].sum())} matmuls with recorded shapes ({len(g)} distinct)"
        echo(f"{kind} {p}: {what}, "
             + (", ".join(f"{k} = {v:.3f}" for k, v in effs.items() if k in ks) or "nothing applied")
             + (f" (one estimate over {n_joint} GEMM sources)" if n_joint > 1 and ks else "")
             + f", median |error| = {med:.1f}%"
             + (f" ({skipped} rows checked, not fitted: fp32/tf32/4-bit, or a precision whose fit ends on "
                "its bound)" if skipped and ks else
                f" ({skipped} fp32/tf32/4-bit rows checked, not fitted)" if skipped else ""))
    return info


def _write_atomic(profile: dict, out: Path) -> None:
    """Write through a temporary file in the same folder, then rename: ``out`` is either the
    whole profile or untouched. An OS failure is reported against ``out`` and the user's path,
    never the temporary file."""
    out = Path(out)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        write_file_atomic(out, dump_yaml(profile, sort_keys=False).encode("utf-8"))
    except OSError as exc:
        raise InputError("out", f"cannot write {out} ({exc.strerror or exc})") from None


def _content_digest(path: Path) -> str:
    """SHA-256 of what a file holds, as its parser reads it: a gzip file's decompressed bytes (a ``trace.json.gz``
    beside its own ``trace.json`` is the same data), with Windows line ends read as Unix ones and a leading
    byte-order mark dropped (an editor's re-save of a log is the same log). An unreadable gzip stream: its raw
    bytes (its parser then says what is wrong)."""
    import gzip
    import hashlib

    from perfmodel.errors import is_gzip

    def digest(fh) -> str:
        h, carry, first = hashlib.sha256(), b"", True
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            chunk = carry + chunk
            if first:
                chunk, first = chunk.removeprefix(b"\xef\xbb\xbf"), False
            carry = b"\r" if chunk.endswith(b"\r") else b""  # a CR LF split across two chunks
            h.update((chunk[:-1] if carry else chunk).replace(b"\r\n", b"\n"))
        h.update(carry)
        return h.hexdigest()

    try:
        with (gzip.open(path, "rb") if is_gzip(path) else open(path, "rb")) as fh:
            return digest(fh)
    except (OSError, EOFError):
        return sha256_of(path)


def check_inputs_and_out(out: Path, inputs: dict[str, list]) -> None:
    """Refuse an ``--out`` that is one of the inputs (the profile would overwrite the measured data it
    was fitted to) or not a regular file, and a file given twice (its points would count twice in the
    fit). ``inputs``: option name (without ``--``) -> the paths given to it."""
    output_file(out)
    seen: list[tuple[str, Path, str | None]] = []
    for option, paths in inputs.items():
        for p in map(Path, paths):
            if same_file(out, p):
                raise InputError("out", f"is the --{option} input {p}; give another file for the profile",
                                 where=str(out))
            # a copy under another name is the same measurements: hashed only when a regular file (a FIFO
            # or a device is refused, unread, by its parser)
            digest = _content_digest(p) if p.is_file() and p.stat().st_size > 0 else None  # an empty one: its parser says so
            for other_option, q, other_digest in seen:
                if same_file(p, q):
                    also = "" if other_option == option else f" (and to --{other_option} as {q})"
                    raise InputError(option, f"the same file is given twice{also}: its points would count twice "
                                     "in the fit; give each file once", where=str(p))
                if digest is not None and digest == other_digest:
                    also = "" if other_option == option else f" (given to --{other_option})"
                    raise InputError(option, f"has the same content as {q}{also}: its points would count twice "
                                     "in the fit; give each file once", where=str(p))
            seen.append((option, p, digest))


def run_calibration(
    *, gpu: str, out: Path, nccl_tests=(), traces=(), logs=(), gemms=(), runs=(),
    gpus_per_node: int | None = None, scale_out_gbit_per_s: float | None = None, network: str | None = None,
    echo=print, base: Calibration | None = None, pairs: Path | None = None, base_path: Path | None = None,
) -> Calibration:
    """Parse everything first (any bad input raises before anything is written), fit, write.
    ``base_path``: a calibrated profile to refine (``calibrate --calibration``) instead of the shipped one:
    what this run fits replaces its values, everything else it fitted stays."""
    from perfmodel.calibrate.parsers import (
        parse_gemm_csv, parse_kineto_trace, parse_nccl_tests_all, parse_training_log, read_runs_csv,
    )

    shown_echo = echo

    def echo(text: str) -> None:  # a path with a line break in it stays on its summary line
        shown_echo(one_line(text))

    spec = load_gpu(gpu)
    if gpus_per_node is not None and gpus_per_node <= 0:
        raise InputError("gpus_per_node", f"must be a positive integer (got {gpus_per_node})")
    if scale_out_gbit_per_s is not None and not (MIN_GBIT_PER_S <= scale_out_gbit_per_s <= MAX_GBIT_PER_S):
        raise InputError("scale_out_gbit_per_s", f"must be a number from {MIN_GBIT_PER_S:g} to {MAX_GBIT_PER_S:,.0f} "
                         f"(got {scale_out_gbit_per_s})")
    check_network_name(network)
    if Path(out).is_dir():
        raise InputError("out", "is a folder; give a YAML file path", where=str(out))
    if not any((nccl_tests, traces, logs, gemms, runs)):
        raise InputError("inputs", "give at least one of --nccl-tests, --trace, --log, --gemm, --runs")
    check_inputs_and_out(out, {"nccl-tests": nccl_tests, "trace": traces, "log": logs, "gemm": gemms,
                               "runs": runs, "calibration": [base_path] if base_path is not None else []})
    if base_path is not None:
        base = load_calibration(base_path)
    inputs: list[dict] = []
    parsed_nccl = [(p, parse_nccl_tests_all(p)) for p in map(Path, nccl_tests)]
    parsed_traces = [(p, parse_kineto_trace(p)) for p in map(Path, traces)]
    # a file measured on another GPU family than --gpu would be fitted against the wrong datasheet
    for p, ts in parsed_nccl:
        for t in ts:
            check_device_matches(spec.name, t.device_name, str(p))
    for p, summary in parsed_traces:
        check_device_matches(spec.name, summary.device_name, str(p))
    # a given node size that the Rank lines contradict would cost a cross-host table as one node (or the
    # reverse): the fit costs each table as it ran
    for p, ts in parsed_nccl:
        check_node_size_matches(gpus_per_node, ts, str(p))
    # the cluster every fit assumes (recorded in the provenance); a node size read from the Rank lines
    # serves the logs and traces too, as if given (same cluster)
    gpn, gpn_from = node_size(spec, gpus_per_node, [t for _, ts in parsed_nccl for t in ts], scale_out_gbit_per_s)
    gpus_per_node = gpus_per_node if gpn_from == DEFAULT_NODE_SIZE else gpn
    cluster = cluster_record(
        gpn, gpn_from, scale_out_gbit_per_s or spec.default_scale_out_gbit_per_s(gpn),
        "--scale-out-gbit-per-s" if scale_out_gbit_per_s else f"{spec.name} default for {gpn} GPUs per node", network)
    parsed_logs = [(p, parse_training_log(p)) for p in map(Path, logs)]
    log_points = [_log_point(p, log, spec, gpus_per_node, scale_out_gbit_per_s, network) for p, log in parsed_logs]
    parsed_gemm = [(p, check_gemm_rows(parse_gemm_csv(p), spec)) for p in map(Path, gemms)]
    parsed_runs = [(p, read_runs_csv(p)) for p in map(Path, runs)]

    # start from the shipped default profile: a partial calibration (one nccl-tests file, say)
    # overrides what it fits and keeps every other fitted value
    cal = base if base is not None else load_calibration(None)
    records: dict = {}  # this run's fit records for the provenance (provenance.RUN_RECORDS)
    gpus_over: dict[str, dict[str, float]] = {}
    applied_from: list[str] = []  # the kinds of input something was fitted from and applied
    refused: list[str] = []  # inputs whose fit was refused (on its bound) or found nothing to fit
    if parsed_nccl:
        cal, entries, unfitted = _fit_nccl(parsed_nccl, spec, cluster, network, cal, echo,
                                           others=bool(parsed_traces or parsed_logs or parsed_gemm or parsed_runs))
        inputs += entries
        refused += unfitted
        if len(unfitted) < len(parsed_nccl):
            applied_from.append("nccl-tests")
    # the GEMM files and the matmuls the traces recorded with their shapes give the best-shape rate
    trace_gemm = {}
    for p, summary in parsed_traces:
        g = _trace_gemm_rows(summary, p, spec)
        if g is not None:
            trace_gemm[str(p)] = (p, g)
    gemm_info = _estimate_gemm([(p, g, "gemm") for p, g in parsed_gemm] + [(p, g, "trace") for p, g in trace_gemm.values()],
                               spec, cal, echo, refused, applied_from, gpus_over)
    for p, _ in parsed_gemm:
        inputs.append({"kind": "gemm", "path": _rel(p), "sha256": sha256_of(p), **gemm_info[str(p)]})
    for p, summary in parsed_traces:
        cats = {k: round(float(v), 6) for k, v in summary.kernel_time_s.items()}
        # points: its recorded matmuls the GEMM estimate used (0: only summarised and compared)
        inputs.append({"kind": "trace", "path": _rel(p), "sha256": sha256_of(p), "points": 0,
                       "kernels": int(sum(summary.kernel_count.values())), "kernel_time_s": cats,
                       **({f"gemm_{k}" if k in ("median_abs_err_pct",) else k: v
                           for k, v in gemm_info[str(p)].items()} if str(p) in gemm_info else {})})
        echo(f"trace {p}: kernel time by category (s) {cats}")
        if summary.step_time_s:  # the ProfilerStep#N annotations: the step time the trace measured
            steps = sorted(summary.step_time_s.items())
            median_step = float(np.median([t for _, t in steps]))
            inputs[-1].update(step_time_s={int(n): round(float(t), 6) for n, t in steps},
                              median_step_time_s=round(median_step, 6))
            echo(f"  {len(steps)} profiler steps (ProfilerStep#{steps[0][0]}..#{steps[-1][0]}): median "
                 f"{median_step:.4f} s per step")
        if not gemm_info.get(str(p), {}).get("points"):
            refused.append(str(p))  # summarised and compared, nothing fitted
        if len(summary.nccl_collectives):
            by = summary.nccl_collectives.groupby("collective")["busbw_gb_per_s"].median().round(2).to_dict()
            echo(f"  NCCL median busbw (GB/s) by collective: {by}")
            check = _trace_nccl_check(summary.nccl_collectives, spec, gpus_per_node, scale_out_gbit_per_s, network, cal)
            if check is not None:
                inputs[-1].update(check)
                echo(f"  {check['nccl_kernels_compared']} NCCL kernels of collectives the model costs: measured / "
                     f"predicted time median {check['nccl_median_measured_over_predicted']:.2f}x, median |error| "
                     f"{check['nccl_median_abs_err_pct']:.1f}% (a kernel's time includes waiting for the slowest "
                     "rank, so a trace bounds the collective's time from above; nothing is fitted from it)")
    log_entries = {}
    for (p, log), point in zip(parsed_logs, log_points):
        it = log["iteration_time_s"].dropna()
        med = float(it.median()) if len(it) else None
        # points: the iteration lines whose median the kernel-efficiency fit uses; 0 for a log only summarised
        entry = {"kind": "log", "path": _rel(p), "sha256": sha256_of(p),
                 "points": point.iterations if point is not None else 0, "iteration_lines": len(log),
                 "median_iteration_time_s": med}
        inputs.append(entry)
        log_entries[str(p)] = entry
        tps = log["tokens_per_s_per_gpu"].dropna() if "tokens_per_s_per_gpu" in log else log.iloc[0:0]
        what = (f"median iteration time {med:.3f} s" if med is not None
                else f"median {float(tps.median()):,.0f} tokens/s/GPU" if len(tps) else "no timing fields")
        echo(f"log {p}: {len(log)} iteration lines, {what}"
             + ("" if point is not None else "; no Megatron arguments block, so no configuration to predict: "
                "nothing fitted from it"))
        if point is None:
            refused.append(str(p))
    if gpus_over:
        merged = {**cal.gpus}
        for k, v in gpus_over.items():
            merged[k] = {**merged.get(k, {}), **v}
        cal = cal.model_copy(update={"gpus": merged})
    if parsed_runs:
        from perfmodel.calibrate.fit_runs import fit_runs

        from perfmodel.validate import error_table, measured_tokens_per_s_per_gpu, predict_runs

        df = pd.concat([d for _, d in parsed_runs], ignore_index=True)
        pred0 = predict_runs(df, cal)
        scorable = error_table(df, pred0)[0]["mape_pct"].dropna()
        # a row is fitted when it is costed and has a measurement (fit_runs' own test)
        measured = np.asarray(measured_tokens_per_s_per_gpu(df), dtype=float)
        has_measurement = np.isfinite(measured) & (measured > 0)
        skipped = (pred0["status"].to_numpy() != "ok") | ~has_measurement
        if skipped.any() and not scorable.empty:  # said, never silently dropped
            from perfmodel.validate import truth_errors

            why = np.where(pred0["status"].to_numpy() != "ok", pred0["status"].to_numpy(),
                           np.where(truth_errors(df) != "", "measurement unusable", "no measurement"))
            counts = ", ".join(f"{k} {v}" for k, v in pd.Series(why[skipped]).value_counts().items())
            first = int(np.flatnonzero(skipped)[0])
            reason = pred0["reason"].iloc[first] or "no measured tokens/s, time, TFLOP/s or MFU"
            print(f"warning: runs: {int(skipped.sum())} of {len(df)} rows not fitted ({counts}; e.g. "
                  f"{df['run_id'].iloc[first]}: {reason}); perfmodel validate gives each row's reason",
                  file=sys.stderr)
        if scorable.empty:
            what = (f"none of the {len(df)} runs in {', '.join(str(p) for p, _ in parsed_runs)} could be costed "
                    "and scored (perfmodel validate gives each row's reason)")
            if not (parsed_nccl or parsed_gemm or parsed_traces or parsed_logs):
                raise NothingUsable(f"runs: {what}; nothing to fit, no profile written")
            print(f"warning: runs: {what}; no runs parameter fitted", file=sys.stderr)
            for p, _ in parsed_runs:  # still named in the provenance, with nothing taken from it
                inputs.append({"kind": "runs", "path": _rel(p), "sha256": sha256_of(p), "points": 0})
            refused += [str(p) for p, _ in parsed_runs]
            parsed_runs = []
    if parsed_runs:
        pairs_df = pd.read_csv(pairs) if pairs is not None else None
        fit = fit_runs(df, cal, pairs=pairs_df)
        cal = fit.calibration
        if fit.params:
            applied_from.append("runs")
        else:  # as for the other inputs: runs that identify no parameter are said, never an empty fit
            from perfmodel.calibrate.fit_runs import MIN_ROWS_FRAMEWORK

            paths = [str(p) for p, _ in parsed_runs]
            print(f"warning: runs: no parameter is identified by the {int((~skipped).sum())} costed runs of "
                  f"{', '.join(paths)} (a stack's kernel efficiency needs at least {MIN_ROWS_FRAMEWORK} of its "
                  "runs; the global efficiencies need runs that exercise them): nothing fitted from them",
                  file=sys.stderr)
            refused += paths

        per_src = error_table(df, predict_runs(df, cal))[0]["mape_pct"].dropna()  # what validate reports
        start = 0
        for p, d in parsed_runs:  # points: the file's rows that were costed and fitted
            used = int((~skipped[start:start + len(d)]).sum())
            start += len(d)
            inputs.append({"kind": "runs", "path": _rel(p), "sha256": sha256_of(p), "points": used})
        if pairs is not None:
            inputs.append({"kind": "zeropp-pairs", "path": _rel(Path(pairs)), "sha256": sha256_of(Path(pairs)),
                           "points": 2 * len(pairs_df)})
        echo("runs: tokens/s/GPU MAPE per source after the fit (%):")
        for s, v in per_src.sort_values(ascending=False).items():
            echo(f"  {s:<16} {v:6.1f}")
        echo(f"  macro-averaged   {per_src.mean():6.1f}")
        # a stack's kernel efficiency on the top of its range is applied (its runs are faster than kernel speed
        # explains; estimate says so for it: notes.kernel_bound_note), and said here where it is fitted
        from perfmodel.notes import kernel_bound_note

        for stack in sorted({k.split(".")[0] for k in fit.params if k.endswith(".kernel_efficiency")}):
            note = kernel_bound_note(stack, cal)
            if note:
                echo(f"runs: note: {note}")
        records.update({"runs_fit_params": fit.params, "runs_mape_pct_by_source": per_src.round(2).to_dict()})
    points = [pt for pt in log_points if pt is not None]
    if points:
        # after the runs fit: a user's own logs describe the cluster the profile is for
        from perfmodel.calibrate.fit_logs import fit_logs

        cal, table = fit_logs(points, cal)
        if parsed_runs and table.applied.any():
            # the recorded runs residuals describe the profile written: with the logs' efficiencies
            per_src = error_table(df, predict_runs(df, cal))[0]["mape_pct"].dropna()
            echo(f"runs: macro-averaged MAPE with the logs' kernel efficiencies applied: {per_src.mean():.1f}%")
            records["runs_mape_pct_by_source"] = per_src.round(2).to_dict()
        for row in table.itertuples():
            log_entries[row.path].update({
                "framework": row.framework, "measured_iteration_time_s": round(row.measured_iteration_time_s, 6),
                "predicted_before_s": round(float(row.predicted_before_s), 6),
                "predicted_after_s": round(float(row.predicted_after_s), 6),
                "err_after_pct": round(float(row.err_after_pct), 2)})
            log_entries[row.path].update({"kernel_efficiency_fit": round(float(row.kernel_efficiency), 6),
                                          "applied": bool(row.applied)})
            echo(f"log {row.path}: {row.framework} configuration from its arguments block; measured "
                 f"{row.measured_iteration_time_s:.3f} s, predicted {row.predicted_before_s:.3f} s "
                 f"({row.err_before_pct:+.1f}%) before the fit, {row.predicted_after_s:.3f} s "
                 f"({row.err_after_pct:+.1f}%) after; {row.framework} kernel_efficiency = {row.kernel_efficiency:.3f}")
            if not row.fits_memory:
                print(f"warning: log {row.path}: its configuration needs more memory than {spec.name} has in the "
                      "model: is --gpu the one it ran on?", file=sys.stderr)
            if row.at_bound:
                print(f"warning: log {row.path}: the {row.framework} kernel efficiency fit ends on its bound "
                      f"({row.kernel_efficiency:.3f}): kernel speed does not explain this log's time (check --gpu, "
                      "--gpus-per-node and the network), so it is not applied", file=sys.stderr)
        applied = table[table.applied].groupby("framework")["kernel_efficiency"].first()
        if not applied.empty:
            applied_from.append("logs")
        refused += [str(r.path) for r in table.itertuples() if not r.applied]
        if applied.empty and not (parsed_nccl or parsed_gemm or parsed_runs):
            raise NothingUsable("logs: no kernel efficiency fit is within its bounds; nothing to apply, no profile "
                                "written")
        records["logs_fit_params"] = {f"{fw}.kernel_efficiency": float(v) for fw, v in applied.items()}
        # a stack's kernel efficiency the logs replaced is no longer the runs fit's in the profile: said so
        replaced = {k: v for k, v in records.get("runs_fit_params", {}).items() if k in records["logs_fit_params"]}
        if replaced:
            records["runs_fit_params"] = {k: v for k, v in records["runs_fit_params"].items() if k not in replaced}
            records["runs_fit_params_replaced_by_logs"] = replaced
    if refused and not applied_from:
        # every fit was refused (on its bound, nothing usable): a profile would only restate the base one
        raise NothingUsable(f"nothing was fitted from {', '.join(refused)} (see above); no profile written")
    provenance = {
        **base_record(base, base_path),
        **records,
        "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "gpu": spec.name,
        # the runs and GEMM fits take no cluster option (a runs row states its own cluster)
        **({"cluster": cluster} if parsed_nccl or parsed_traces or parsed_logs else {}),
        "inputs": inputs,
    }
    cal = cal.model_copy(update={"provenance": provenance})
    _write_atomic(_plain(cal.model_dump()), out)
    echo(f"wrote {out}")
    return cal


def _profile_intra_node(cal: Calibration, network, spec) -> dict[str, float]:
    """The NVLink tier the profile this run starts from (the shipped one, or ``--calibration``'s) costs
    this GPU on the named fabric with: its entry's values, else the profile-wide (or catalog) ones. The fit
    keeps it when no single-node table of the shared collectives is among the tables it uses
    (``fit_collectives``' ``held_intra``): multi-node tables barely determine it (a 2-node all_reduce of
    0.5-8 GiB trades NVLink against NIC efficiency and drove the former to its bound)."""
    constants, gpu, _ = cal.for_network(spec, network)
    return {"nvlink_efficiency": float(constants.nvlink_efficiency),
            "intra_node_latency_us": float(gpu.intra_node_latency_us)}


def _fit_nccl(parsed_nccl, spec, cluster: dict, network, cal: Calibration, echo, others: bool):
    """The nccl-tests fit merged into ``cal`` (``apply_collectives``): (the calibration, the inputs'
    provenance entries, the files nothing was applied from). NothingUsable when no file has a table
    the fit uses and nothing else was given."""
    # the fabric's entry in the profile this fit is merged into (the shipped EFA one, say)
    inherited = dict(cal.networks.get((network or "").strip().lower(), {}))
    tables = [t for _, ts in parsed_nccl for t in ts]
    # a bandwidth and a latency from one message size: any pair that meets that one time fits it exactly
    # (one 32 MiB all_reduce row fitted a NIC efficiency of 0.29 where its whole sweep says 0.79)
    sizes = {int(s) for t in tables if t.op is not None and (t.n_ranks or 0) > 1
             for s in t.rows["size_bytes"] if s >= MIB}
    if tables and len(sizes) == 1:
        raise InputError("nccl_tests", f"one message size of 1 MiB or more ({next(iter(sizes)):,} bytes) in "
                         f"{', '.join(str(p) for p, _ in parsed_nccl)}: a bandwidth and a latency need two or more; "
                         "run nccl-tests over a range of sizes (e.g. -b 1M -e 1G -f 2)")
    fit = fit_from_tables(
        tables, paths=[str(p) for p, ts in parsed_nccl for _ in ts], gpu_name=spec,
        gpus_per_node=cluster["gpus_per_node"], scale_out_gbit_per_s_per_node=cluster["scale_out_gbit_per_s_per_node"],
        network=network, inherited=inherited, held_intra=_profile_intra_node(cal, network, spec),
    )
    residuals = fit.median_abs_err_pct
    if fit.held:
        shown = ", ".join(f"{k} = {v:.4g}" for k, v in sorted(fit.held.items()))
        on = f" on {network}" if (network or "").strip() else ""
        echo(f"nccl-tests: no single-node table, so the NVLink tier is not refitted: {shown} kept, as the profile "
             f"this run starts from costs {spec.name}{on}")
    if fit.shapes_held:
        shown = ", ".join(f"{k} = {v:g} ({'flat ring' if v else 'hierarchical'})" for k, v in sorted(fit.shapes_held.items()))
        echo(f"nccl-tests: a flat ring and the hierarchical split fit these tables alike (the ring moves the same "
             f"multiple of the split's bytes across the NICs in each, so only the NIC efficiency differs): {shown} "
             "kept, as the profile this run starts from holds it; a second node count or node size would tell them apart")
    unfitted = [str(p) for p, _ in parsed_nccl if residuals.get(str(p)) is None]
    if unfitted:
        what = (f"no table in {', '.join(unfitted)} is one the fit uses (sizes >= 1 MiB of all_reduce, "
                "all_gather, reduce_scatter, alltoall or sendrecv)")
        if len(unfitted) == len(parsed_nccl) and not others:
            raise NothingUsable(f"nccl-tests: {what}; nothing to fit, no profile written")
        print(f"warning: nccl-tests: {what}; nothing fitted from it", file=sys.stderr)
    fitted, dropped, with_them = drop_refused(fit.overrides, tiers_fitted_apart(tables, cluster["gpus_per_node"]))
    with_them = {k: v for k, v in with_them.items() if k not in fit.held}  # kept, not fitted (said above)
    if dropped:
        shown = ", ".join(f"{k} = {v:.4g}" for k, v in dropped.items())
        also = (f" (nor the values of its fit stage and those fitted on top of it: "
                f"{', '.join(f'{k} = {v:.4g}' for k, v in with_them.items())})" if with_them else "")
        print(f"warning: nccl-tests: the fit of {shown} ends on the bound of its range: the collective model does "
              "not explain these tables with it (check --gpu, --gpus-per-node and --scale-out-gbit-per-s), so it is "
              f"not applied{also}", file=sys.stderr)
    if fitted_values(fitted):
        cal = merge_fit(cal, fitted, network, spec.name)
    else:  # every value refused: nothing of these files is applied
        unfitted = [str(p) for p, _ in parsed_nccl]
    entries = []
    for p, ts in parsed_nccl:
        med = residuals.get(str(p))
        entries.append({"kind": "nccl-tests", "path": _rel(p), "sha256": sha256_of(p),
                        "points": fit.points.get(str(p), 0), "median_abs_err_pct_ge_1MiB": med})
        shown = f"{med:.1f}%" if isinstance(med, (int, float)) else "n/a"
        echo(f"nccl-tests {p}: {len(ts)} table(s), median |error| over sizes >= 1 MiB = {shown}")
    return cal, entries, unfitted


def _trace_nccl_check(coll: pd.DataFrame, spec, gpus_per_node, scale_out_gbit_per_s, network, cal) -> dict | None:
    """The trace's NCCL kernels against the model's time for the same collective, size and group (the
    group taken as consecutive ranks, inside one node when it fits): how far the profile is from what
    the trace saw. None when no kernel is of a collective the model costs."""
    from perfmodel.calibrate.comm import collective_inputs, collective_time
    from perfmodel.costs.comm import OPS

    gpn = gpus_per_node or spec.default_gpus_per_node
    rows = coll[coll["collective"].isin(OPS) & (coll["group_size"] > 1) & (coll["bytes"] > 0)]
    if rows.empty:
        return None
    ratios = []
    skipped = 0
    for (op, n), g in rows.groupby(["collective", "group_size"]):
        try:
            inputs = collective_inputs(spec, int(n), gpn, scale_out_gbit_per_s, network, op, cal)
        except (InputError, ValidationError):  # a group no cluster holds (more ranks than MAX_GPUS)
            skipped += len(g)
            continue
        pred = np.asarray(collective_time(op, g["bytes"].to_numpy(float), int(n), inputs), dtype=float)
        ratios.append(g["dur_s"].to_numpy(float) / pred)
    if not ratios:
        return None
    r = np.concatenate(ratios)
    return {"nccl_kernels_compared": int(r.size), "nccl_kernels_not_compared": skipped,
            "nccl_median_measured_over_predicted": round(float(np.median(r)), 4),
            "nccl_median_abs_err_pct": round(float(np.median(np.abs(1.0 / r - 1.0)) * 100.0), 2)}


def _log_point(path: Path, log: pd.DataFrame, gpu, gpus_per_node, scale_out_gbit_per_s, network):
    """The log's configuration and measured iteration time when it prints Megatron's arguments
    block (``fit_logs.LogPoint``), else None. A block that does not describe a costable run is an
    error naming the log: better no profile than one fitted to a guess."""
    from perfmodel.calibrate.fit_logs import MEGATRON_LOG_FRAMEWORKS, LogPoint, measured_iteration_time_s
    from perfmodel.calibrate.log_config import megatron_log_overrides, megatron_log_specs
    from perfmodel.calibrate.parsers.megatron_args import arg_value, parse_megatron_arguments
    from perfmodel.estimate import check_config

    args = parse_megatron_arguments(path)
    if args is None:
        return None
    # the block's own iteration lines: a Megatron-DeepSpeed log may also carry DeepSpeed's timer lines
    log = log[log["framework"].isin(MEGATRON_LOG_FRAMEWORKS)]
    if log.empty:
        return None
    # Megatron-DeepSpeed adds --deepspeed to Megatron's arguments (DeepSpeed's engine runs the step), so a
    # block that says 'deepspeed ... True' is that stack whatever spelling its iteration lines use
    deepspeed = arg_value(args.get("deepspeed")) is True
    framework = "megatron-deepspeed" if deepspeed else log["framework"].mode().iloc[0]
    specs = megatron_log_specs(args, gpu, framework=framework, gpus_per_node=gpus_per_node,
                               scale_out_gbit_per_s=scale_out_gbit_per_s, network=network, where=str(path))
    overrides = megatron_log_overrides(args, specs[3].precision)
    # Megatron prints each iteration once (the last rank). A run resumed from a checkpoint prints its
    # arguments block again (the same configuration: checked with the block) and re-runs the iterations
    # after the last save: the later line of each counts. Without a restart, a number seen twice is
    # several ranks' lines, or several runs'
    repeated = log["iteration"].duplicated(keep="last")
    if repeated.any() and not getattr(args, "later", None):
        row = log[log["iteration"].duplicated()].iloc[0]
        raise InputError("iteration", f"{int(row['iteration'])} is logged twice without a restart's arguments block "
                         "(several ranks' or runs' lines in one log?); give one run's log", f"{path}:{int(row['line'])}")
    log = log[~repeated]
    # a batch-size ramp-up's steps run a smaller batch than the block's global_batch_size: not this run's step
    batch = log["global_batch"].to_numpy(float)
    other = np.isfinite(batch) & (batch != specs[3].global_batch)
    if other.all():
        raise InputError("global batch size", f"every iteration line logs {int(batch[0])}, not the arguments "
                         f"block's global_batch_size {specs[3].global_batch}", f"{path}:{int(log['line'].iloc[0])}")
    if other.any():
        say_note(f"{path}: {int(other.sum())} of {len(log)} iteration lines left out: their global batch size is "
                 f"not the arguments block's {specs[3].global_batch} (batch-size ramp-up)")
        log = log[~other]
    try:
        check_config(*specs)
    except InputError as exc:
        raise InputError(exc.field, exc.rule, str(path)) from None
    measured = measured_iteration_time_s(log, specs[3].global_batch, specs[3].seq_len, specs[1].n_gpus)
    if not np.isfinite(measured):
        raise InputError("training log", "its iteration lines carry no time or tokens/s to fit to", str(path))
    return LogPoint(path=path, framework=framework, specs=specs, measured_iteration_time_s=measured,
                    iterations=len(log), overrides=overrides)


def _plain(obj):
    """numpy scalars -> Python, for YAML."""
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if isinstance(obj, np.generic):
        return obj.item()
    return obj
