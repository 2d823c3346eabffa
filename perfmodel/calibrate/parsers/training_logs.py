"""Training-log lines -> one row per logged iteration (REFERENCES.md §3c).

Recognised lines (a launcher label, ``parsers.launcher``, may precede them):
- Megatron-LM ``iteration N/M | ... elapsed time per iteration (ms): X | throughput per GPU
  (TFLOP/s/GPU): Y`` (throughput only with ``--log-throughput``; BigScience's Megatron-DeepSpeed prints
  ``(s)``);
- Megatron-Kwai: the same with ``tokens per sec per gpu: Z``;
- Megatron-DeepSpeed: ``samples/sec: S | iteration N/M | ... approx flops per GPU: 112.9TFLOPS`` (BigScience's
  fork), or Microsoft's ``iteration N/M | ... elapsed time per iteration (ms): X | ... | samples per second: S |
  tokens per gpu per second (tgs): T | TFLOPs: F |`` (microsoft/Megatron-DeepSpeed ``megatron/training.py``
  ``training_log``; forks of it may drop the tgs field);
- DeepSpeed ThroughputTimer ``global_step=G, ..., CurrSamplesPerSec=S`` (2021-22: ``E/G,
  RunningAvgSamplesPerSec=R, CurrSamplesPerSec=S``; older: ``E/G, SamplesPerSec=S``);
- DeepSpeed flops profiler block ``Profile Summary at step N`` ... ``iter latency`` ...;
- torchtitan ``step: N ... tps: 1,234  tflops: 3.15  mfu: 0.32%`` (``wps:`` before late 2024; colour
  codes stripped).
Each source's own TFLOP/s uses its own FLOP convention; calibrate on time or tokens/s.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from perfmodel.calibrate.parsers.launcher import strip_launcher_prefix
from perfmodel.errors import InputError, read_text_file, say_note

COLUMNS = ["iteration", "iteration_time_s", "tokens_per_s_per_gpu", "tflop_per_s_per_gpu",
           "samples_per_s", "mfu", "framework", "line", "global_batch"]
_NUM = r"([0-9][0-9,]*\.?[0-9]*(?:[eE][+-]?\d+)?)"
_MEGATRON_IT = re.compile(r"\biteration\s+(\d+)\s*/\s*(\d+)\s*\|")
# in ms; BigScience's Megatron-DeepSpeed (the BLOOM fork) prints '(s)' with four decimals
_ELAPSED_MS = re.compile(r"elapsed time per iteration \((ms|s)\):\s*" + _NUM)
_ELAPSED_LABEL = re.compile(r"elapsed time per iteration \((ms|s)\):\s*([^|\s]*)")
_ELAPSED_UNIT_S = {"ms": 1e-3, "s": 1.0}
_MEGATRON_TFLOP = re.compile(r"throughput per GPU \(TFLOP/s/GPU\):\s*" + _NUM)
# Megatron's training_log prints the step's batch ('global batch size: %5d'), which a ramp-up changes
_GLOBAL_BATCH = re.compile(r"\|\s*global batch size:\s*(\d+)\s*\|")
_KWAI_TOKENS = re.compile(r"tokens per sec per gpu:\s*" + _NUM)
_MDS_SAMPLES = re.compile(r"samples/sec:\s*" + _NUM)
_MDS_TFLOP = re.compile(r"approx flops per GPU:\s*" + _NUM + r"\s*TFLOPS")
# microsoft/Megatron-DeepSpeed training_log: 'samples per second' and 'TFLOPs' always, 'tgs' in most versions
_MSDS_SAMPLES = re.compile(r"\|\s*samples per second:\s*" + _NUM)
_MSDS_TGS = re.compile(r"\|\s*tokens per gpu per second \(tgs\):\s*" + _NUM)
_MSDS_TFLOP = re.compile(r"\|\s*TFLOPs:\s*" + _NUM)
_DS_TIMER = re.compile(r"global_step=(\d+),.*?CurrSamplesPerSec=" + _NUM)
_DS_TIMER_OLD = re.compile(r"\b\d+/(\d+), SamplesPerSec=" + _NUM)
# DeepSpeed 0.5-0.7 ThroughputTimer (2021-22): 'EPOCH/STEP, RunningAvgSamplesPerSec=R, CurrSamplesPerSec=S, ...'
_DS_TIMER_2022 = re.compile(r"\b\d+/(\d+), RunningAvgSamplesPerSec=" + _NUM + r", CurrSamplesPerSec=" + _NUM)
# NeMo / PyTorch Lightning: 'train_step_timing in s: 6.08' (NeMo 2) or '=49.50' (a Lightning progress bar)
_NEMO_STEP_TIMING = re.compile(r"train_step_timing in s[:=]")
# tokens/s per GPU: 'tps' since late 2024, 'wps' before
_TITAN = re.compile(r"\bstep:\s*(\d+)\s.*?\b[tw]ps:\s*" + _NUM + r"(?:.*?\btflops:\s*" + _NUM +
                    r")?(?:.*?\bmfu:\s*(?:" + _NUM + r"%|N/A))?")
_PROFILE_STEP = re.compile(r"Profile Summary at step (\d+)")
_ITER_LATENCY = re.compile(r"^\s*iter latency:\s*" + _NUM + r"\s*(s|ms|us)\b")
_PROFILE_TFLOP = re.compile(r"^\s*fwd\+bwd FLOPS per GPU.*:\s*" + _NUM + r"\s*TFLOPS")
_PROFILE_SAMPLES = re.compile(r"^\s*samples/second:\s*" + _NUM)
_UNIT_S = {"s": 1.0, "ms": 1e-3, "us": 1e-6}
MAX_ITERATION = 2**63 - 1
"""Largest iteration / step number accepted (it is stored as int64)."""
_RATE_FIELDS = ("tokens_per_s_per_gpu", "tflop_per_s_per_gpu", "samples_per_s", "mfu")


def _f(m: re.Match | None, group: int = 1) -> float:
    if m is None or m.group(group) is None:
        return np.nan
    return float(m.group(group).replace(",", ""))


def _row(iteration: float, framework: str, line: int, *, time_s: float = np.nan,
         tokens: float = np.nan, tflop: float = np.nan, samples: float = np.nan,
         mfu: float = np.nan, global_batch: float = np.nan) -> dict:
    return {"iteration": iteration, "iteration_time_s": time_s, "tokens_per_s_per_gpu": tokens,
            "tflop_per_s_per_gpu": tflop, "samples_per_s": samples, "mfu": mfu,
            "framework": framework, "line": line, "global_batch": global_batch}


#: a literal every line of a format holds, checked before its patterns (a long log is mostly other lines)
_LINE_TOKENS = ("iteration", "SamplesPerSec=", "step:", "Profile Summary")


def _parse_line(text: str, lineno: int) -> dict | None:
    it = _MEGATRON_IT.search(text) if "iteration" in text else None
    if it and _ELAPSED_MS.search(text):
        row = _megatron_row(text, it, lineno)
        row["global_batch"] = _f(_GLOBAL_BATCH.search(text))
        return row
    if "SamplesPerSec=" in text:
        ds = _DS_TIMER.search(text) or _DS_TIMER_OLD.search(text)
        if ds:
            return _row(int(ds.group(1)), "deepspeed", lineno, samples=_f(ds, 2))
        ds = _DS_TIMER_2022.search(text)
        if ds:
            return _row(int(ds.group(1)), "deepspeed", lineno, samples=_f(ds, 3))
    titan = _TITAN.search(text) if "step:" in text else None
    if titan:
        return _row(int(titan.group(1)), "torchtitan", lineno, tokens=_f(titan, 2),
                    tflop=_f(titan, 3), mfu=_f(titan, 4) / 100.0)
    return None


def _megatron_row(text: str, it: re.Match, lineno: int) -> dict:
    """A Megatron-family iteration line (Megatron-LM, Megatron-Kwai, both Megatron-DeepSpeeds)."""
    elapsed = _ELAPSED_MS.search(text)
    time_s = _f(elapsed, 2) * _ELAPSED_UNIT_S[elapsed.group(1)]
    if _KWAI_TOKENS.search(text):
        return _row(int(it.group(1)), "megatron-kwai", lineno, time_s=time_s,
                    tokens=_f(_KWAI_TOKENS.search(text)))
    if _MDS_SAMPLES.search(text) or _MDS_TFLOP.search(text):
        return _row(int(it.group(1)), "megatron-deepspeed", lineno, time_s=time_s,
                    tflop=_f(_MDS_TFLOP.search(text)), samples=_f(_MDS_SAMPLES.search(text)))
    if _MSDS_SAMPLES.search(text) and _MSDS_TFLOP.search(text):
        return _row(int(it.group(1)), "megatron-deepspeed", lineno, time_s=time_s,
                    tokens=_f(_MSDS_TGS.search(text)), tflop=_f(_MSDS_TFLOP.search(text)),
                    samples=_f(_MSDS_SAMPLES.search(text)))
    return _row(int(it.group(1)), "megatron-lm", lineno, time_s=time_s,
                tflop=_f(_MEGATRON_TFLOP.search(text)))


def _check_row(row: dict, where: str) -> None:
    """A logged iteration must have an iteration number that fits int64, a finite time > 0
    and finite rates: an overflowing number or a 0 ms step is a broken line, not a measurement."""
    if not 0 <= row["iteration"] <= MAX_ITERATION:
        raise InputError("iteration", f"must be a whole number from 0 to {MAX_ITERATION:,} "
                         f"(got {row['iteration']})", where)
    _check_time(row["iteration_time_s"], where)
    for field in _RATE_FIELDS:
        value = row[field]
        if not np.isnan(value) and not np.isfinite(value):
            raise InputError(field, f"must be a finite number (got {value})", where)


#: the longest step a log may report: a day (a 1e300 ms step is a broken line, not a measurement)
MAX_ITERATION_TIME_S = 86_400.0


def _check_time(time_s: float, where: str) -> None:
    if not np.isnan(time_s) and not 0.0 < time_s < np.inf:
        raise InputError("iteration_time_s", f"must be a finite time > 0 (got {time_s:g} s)", where)
    if not np.isnan(time_s) and time_s > MAX_ITERATION_TIME_S:
        raise InputError("iteration_time_s", f"must be at most {MAX_ITERATION_TIME_S:,.0f} s (a day) a step "
                         f"(got {time_s:g} s)", where)


def _drop_truncated_last(rows: list[dict], fields: dict[int, int], last_line: int, path: Path) -> list[dict]:
    """``rows`` less the last line of a file that ends without a line break when it is an iteration line
    with fewer fields than every other line of its format: a log copied or read while being written ends
    mid-line ("... per iteration (ms): 59" cut from 5912.3), and its number is not a measurement. Said in
    one ``note:`` line."""
    if not rows or rows[-1]["line"] != last_line or last_line not in fields:
        return rows
    others = [fields[r["line"]] for r in rows[:-1] if r["framework"] == rows[-1]["framework"] and r["line"] in fields]
    if not others or fields[last_line] >= min(others):
        return rows
    say_note(f"{path}:{last_line}: last line ignored: it has fewer fields than the other {rows[-1]['framework']} "
             "iteration lines (a log cut mid-line)")
    return rows[:-1]


def parse_training_log(path: str | Path) -> pd.DataFrame:
    """One row per iteration line, columns ``COLUMNS``; NaN where a line lacks a field.

    ``line`` is the 1-based line number; ``mfu`` is a fraction (torchtitan only).
    """
    path = Path(path)
    rows: list[dict] = []
    fields: dict[int, int] = {}  # a one-line row's 'name: value' fields, by its line number
    last_line = 0  # the last line with text
    profile: dict | None = None  # the DeepSpeed flops-profiler block being read
    log_text = read_text_file(path, "log", errors="replace")
    # a file that ends without a line break was cut (copied or read while being written)
    cut = bool(log_text) and not log_text.endswith("\n")
    for lineno, raw in enumerate(log_text.splitlines(), start=1):
        last_line = lineno if raw.strip() else last_line
        if profile is None and not any(token in raw for token in _LINE_TOKENS):
            continue  # no format's line
        # terminal colour codes (torchtitan colours its metrics) and rank labels are not content
        text = strip_launcher_prefix(raw)
        step = _PROFILE_STEP.search(text)
        if step:
            profile = _row(int(step.group(1)), "deepspeed", lineno)
            _check_row(profile, f"{path}:{lineno}")
            rows.append(profile)
            continue
        if profile is not None and lineno - profile["line"] > 60:
            profile = None  # a summary block is ~40 lines; stop if it never closed
        if profile is not None:
            lat = _ITER_LATENCY.search(text)
            if lat:
                profile["iteration_time_s"] = _f(lat) * _UNIT_S[lat.group(2)]
                _check_time(profile["iteration_time_s"], f"{path}:{lineno}")
            elif _PROFILE_TFLOP.search(text):
                profile["tflop_per_s_per_gpu"] = _f(_PROFILE_TFLOP.search(text))
                _check_row(profile, f"{path}:{lineno}")
            elif _PROFILE_SAMPLES.search(text):
                profile["samples_per_s"] = _f(_PROFILE_SAMPLES.search(text))
                _check_row(profile, f"{path}:{lineno}")
                profile = None  # the last summary field
            continue
        label = _ELAPSED_LABEL.search(text)
        if label and _MEGATRON_IT.search(text) and not _ELAPSED_MS.search(text):
            # an iteration line whose time is not a number (nan, negative, garbled) is broken, not skipped
            raise InputError("iteration_time_s", f"must be a finite time > 0 (got {label.group(2)!r} "
                             f"{label.group(1)})", f"{path}:{lineno}")
        row = _parse_line(text, lineno)
        it = _MEGATRON_IT.search(text) if row is not None else None
        if it and int(it.group(1)) > int(it.group(2)):  # "iteration N/M": M is the run's --train-iters
            raise InputError("iteration", f"{it.group(1)} of {it.group(2)}: past the run's last iteration (an edited "
                             "or mixed-up line)", f"{path}:{lineno}")
        if row is not None:
            _check_row(row, f"{path}:{lineno}")
            rows.append(row)
            fields[lineno] = text.count(":")
    if cut:
        rows = _drop_truncated_last(rows, fields, last_line, path)
    if not rows:
        nemo = next((i for i, line in enumerate(log_text.splitlines(), start=1)
                     if _NEMO_STEP_TIMING.search(line)), None)
        if nemo is not None:
            raise InputError("training log", "a NeMo / PyTorch Lightning log (train_step_timing) is not read: it "
                             "states no model or parallel configuration to fit against; give its runs as rows of a "
                             "runs CSV (--runs)", f"{path}:{nemo}")
        raise InputError("training log", "no iteration lines found (expected "
                         "Megatron/DeepSpeed/torchtitan format)", f"{path}:1")
    df = pd.DataFrame(rows, columns=COLUMNS)
    return df.astype({"iteration": "int64", "line": "int64"})
