"""Why the winner wins: compare it with the runner-up and with the common default layout.

The common default is what practitioners start from (Megatron-LM / NeMo recipes): TP = the
largest of 8, 4, 2, 1 that fits in one node and divides the heads, sequence parallelism on,
the distributed optimizer (ZeRO-1), selective recomputation, micro-batch 1, no CP, no
interleaving, and the smallest PP that fits in memory.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from perfmodel.costs.memory import RECOMPUTE_SELECTIVE
from perfmodel.rules import AUTOTP, default_zero_stage
from perfmodel.search.engine import Evaluated, SearchResult, breakdown_frame
from perfmodel.step import TIME_PARTS

CONFIG_KEYS = ("tp", "pp", "dp", "cp", "vpp", "micro_batch", "sp", "zero_stage", "recompute")
#: the dimensions a configuration has only where they apply: shown and compared when set
EXTRA_KEYS = ("cp_kind", "zeropp", "offload_fraction")
_SHORT = {"micro_batch": "mb", "zero_stage": "zero", "zeropp": "zero++", "offload_fraction": "offload"}


def _extra(row, k):
    """An optional dimension's value, or None where it does not apply (the CP kind without cp > 1, no
    ZeRO++ parts, no offloading)."""
    if k not in row:
        return None
    v = row[k]
    if k == "cp_kind":
        return v if int(row["cp"]) > 1 else None
    if k == "zeropp":
        return v if isinstance(v, str) and v else None
    return f"{float(v):g}" if v is not None and float(v) > 0 else None


def describe(row) -> str:
    """``tp=4 pp=16 dp=16 cp=1 vpp=3 mb=2 sp=on zero=1 recompute=none`` (and ``cp_kind=ulysses``,
    ``zero++=qwz,hpz``, ``offload=0.5`` where they apply)."""
    parts = []
    for k in CONFIG_KEYS:
        v = row[k]
        if k == "sp":
            v = "on" if bool(v) else "off"
        parts.append(f"{_SHORT.get(k, k)}={v}")
    parts += [f"{_SHORT.get(k, k)}={_extra(row, k)}" for k in EXTRA_KEYS if _extra(row, k) is not None]
    if "n_gpus" in row and row.get("_multi", False):
        parts.insert(0, f"gpus={row['n_gpus']}")
    return " ".join(parts)


def default_sp(framework: str | None) -> bool:
    """Whether the common default shards the sequence with its TP: yes, but where the stack's TP has no
    sequence parallelism (DeepSpeed's AutoTP)."""
    return (framework or "").lower() not in AUTOTP


def default_row(ev: Evaluated, gpus_per_node: int, framework: str | None = None, require_fit: bool = True) -> int | None:
    """Index (into ``ev``) of the common-default configuration, or None if it never fits (or, with
    ``require_fit=False``, is not in the evaluated space at all)."""
    c, fits = ev.configs, ev.metrics["fits"]
    zero = default_zero_stage(framework)
    sp = int(default_sp(framework))
    t = default_tp(ev, gpus_per_node)
    if t is not None:
        m = (
            (c["tp"] == t) & (c["cp"] == 1) & (c["vpp"] == 1) & (c["micro_batch"] == 1)
            & (c["sp"] == sp * int(t > 1)) & (c["zero_stage"] == np.where(c["dp"] * c["cp"] > 1, zero, 0))
            & (c["recompute"] == RECOMPUTE_SELECTIVE) & (fits if require_fit else True)
            # nothing the common default does not do: no activation offloading, no ZeRO++
            & (c["offload_fraction"] == 0) & ~np.any([c[k] > 0 for k in ("qwz", "hpz", "qgz") if k in c], axis=0)
        )
        idx = np.flatnonzero(m)
        if idx.size:
            return int(idx[np.argmin(c["pp"][idx])])
    return None


def default_tp(ev: Evaluated, gpus_per_node: int) -> int | None:
    """The common default's TP: the largest of 8, 4, 2, 1 that fits in a node and that the search has."""
    tps = np.unique(ev.configs["tp"])
    return next((t for t in (8, 4, 2, 1) if t <= gpus_per_node and t in tps), None)


def _delta_text(a: pd.Series, b: pd.Series, n: int = 3) -> str:
    """The largest time-part differences a - b, e.g. ``bubble -0.88 s, tp_comm +0.97 s``. Between two GPU
    counts, in GPU-seconds (each part times its row's GPUs): the same batch on twice the GPUs takes about half
    the step, which is no reason one layout beats the other."""
    per_gpu = "n_gpus" in a and "n_gpus" in b and a["n_gpus"] != b["n_gpus"]
    wa, wb = (float(a["n_gpus"]), float(b["n_gpus"])) if per_gpu else (1.0, 1.0)
    unit = " GPU-s" if per_gpu else " s"
    d = {k.removesuffix("_s"): float(a[k] * wa - b[k] * wb) for k in TIME_PARTS}
    top = sorted(d.items(), key=lambda kv: -abs(kv[1]))[:n]
    # (a difference that prints as 0.000 is not shown)
    shown = ", ".join(f"{k} {v:+.3f}{unit}" for k, v in top if abs(v) >= 0.0005)
    if per_gpu:  # the step times themselves differ (about as the GPU counts): said beside the GPU-seconds
        steps = f"step {float(a['iteration_time_s']):.3f} s vs {float(b['iteration_time_s']):.3f} s"
        return f"(step time x GPUs) {shown or 'no difference that rounds to 1 GPU-ms'}; {steps}"
    return shown or "no difference that rounds to 1 ms"


def _gain_text(win: pd.Series, run: pd.Series, objective: str) -> str:
    """The winner's edge in the objective the candidates were ranked by."""
    if objective == "time-to-train" and np.isfinite(win.get("time_to_train_s", np.nan)):
        return f"{win['time_to_train_s'] / run['time_to_train_s'] - 1.0:+.1%} time to train"
    if objective == "cost" and np.isfinite(win.get("cost_usd", np.nan)):
        return f"{win['cost_usd'] / run['cost_usd'] - 1.0:+.1%} cost"
    return f"{win['tokens_per_s_per_gpu'] / run['tokens_per_s_per_gpu'] - 1.0:+.1%} tokens/s/GPU"


def _diff_keys(a, b) -> str:
    def shown(row, k):
        return ("on" if bool(row[k]) else "off") if k == "sp" else row[k]

    diffs = [f"{_SHORT.get(k, k)} {shown(a, k)} vs {shown(b, k)}" for k in CONFIG_KEYS if a[k] != b[k]]
    # the CP kind only where both split the sequence (a cp change is listed already)
    diffs += [f"{_SHORT.get(k, k)} {_extra(a, k) or 'none'} vs {_extra(b, k) or 'none'}"
              for k in EXTRA_KEYS if _extra(a, k) != _extra(b, k)
              and (k != "cp_kind" or (_extra(a, k) is not None and _extra(b, k) is not None))]
    if "n_gpus" in a and a["n_gpus"] != b["n_gpus"]:
        diffs.insert(0, f"gpus {a['n_gpus']} vs {b['n_gpus']}")
    return ", ".join(diffs) or "same layout"


def _why_context_parallel(ev: Evaluated, win) -> str | None:
    """When the winner splits the sequence (cp > 1): what the best cp = 1 configuration does."""
    if int(win["cp"]) <= 1:
        return None
    c, m = ev.configs, ev.metrics
    no_cp = c["cp"] == 1
    if not no_cp.any():  # (the winner's GPU count keeps every valid configuration: none without CP was valid)
        return (f"why cp={int(win['cp'])}: no layout without context parallelism is valid for this job on "
                f"{ev.n_gpus:,} GPUs (its batch, heads and layers cannot fill them without splitting the sequence)")
    fit = no_cp & m["fits"]
    least = float(np.min(np.where(no_cp, m["memory_gib"], np.inf)))
    if not fit.any():
        return (f"why cp={int(win['cp'])}: without context parallelism nothing fits: the smallest cp=1 "
                f"configuration needs {least:.1f} GiB per GPU (activations grow with the sequence; CP splits them)")
    best = float(np.max(np.where(fit, m["tokens_per_s_per_gpu"], -np.inf)))
    return (f"why cp={int(win['cp'])}: the best cp=1 configuration that fits reaches {best:,.0f} tokens/s/GPU "
            f"({win['tokens_per_s_per_gpu'] / best - 1.0:+.1%} for the winner)")


def explain(result: SearchResult, gpus_per_node: int, framework: str | None = None) -> list[str]:
    """A few lines: winner vs runner-up, winner vs the common default, why CP when it is used."""
    df = result.candidates
    if df.empty:
        return []
    win = df.iloc[0]
    lines = []
    cp_line = _why_context_parallel(result.evaluated[int(result.source_gpu_index[0])], win)
    if cp_line:
        lines.append(cp_line)
    if len(df) > 1:
        run = df.iloc[1]
        gain = _gain_text(win, run, result.objective)
        if gain.startswith(("+0.0%", "-0.0%")):  # as fast: what decides between equals is said (README)
            gain += (" (equal within 0.05%; equals are ranked by less activation offloading, then less memory, "
                     "then fewer GPUs)")
        lines.append(
            f"winner vs runner-up ({_diff_keys(win, run)}): {gain}; "
            f"time {_delta_text(win, run)}; memory {win['memory_gib'] - run['memory_gib']:+.1f} GiB"
        )
    gi = int(result.source_gpu_index[0])
    ev = result.evaluated[gi]
    d = default_row(ev, gpus_per_node, framework)
    zname = f"ZeRO-{default_zero_stage(framework)}"
    spname = "SP" if default_sp(framework) else "no SP"
    if d is None:
        t = default_tp(ev, gpus_per_node)
        tp_text = f"TP={t} in the node" if t is not None else "TP in the node"
        what = (f"common default ({tp_text}, {spname}, {zname}, selective recompute, mb=1, smallest PP that "
                "fits)")
        if default_row(ev, gpus_per_node, framework, require_fit=False) is None:
            lines.append(f"{what} is not among the configurations {framework or 'the stack'} can run for this job")
        else:
            pps = np.unique(ev.configs["pp"][ev.configs["tp"] == t])
            lines.append(f"{what} does not fit in memory" + (" at any PP" if pps.size > 1 else f" (PP={int(pps[0])})"))
        return lines
    b = breakdown_frame(ev, np.array([d])).iloc[0]
    row = {k: int(ev.configs[k][d]) for k in CONFIG_KEYS}
    row["sp"] = bool(row["sp"])
    row["recompute"] = "selective"
    row["n_gpus"] = ev.n_gpus
    tps = float(ev.metrics["tokens_per_s_per_gpu"][d])
    same = all(row[k] == win[k] for k in CONFIG_KEYS) and row["n_gpus"] == win["n_gpus"]
    if same:
        lines.append(f"the winner is the common default (TP in the node, {spname}, {zname}, selective recompute, "
                     "smallest PP that fits)")
        return lines
    full = pd.Series({**row, **b.to_dict()})
    # the edge in the objective's terms, as for the runner-up: a step's cost is GPUs x time (tokens/s/GPU alone
    # sets it), the time to train 1 / (tokens/s/GPU x GPUs)
    ratio = win["tokens_per_s_per_gpu"] / tps
    edge = {"cost": f"{1.0 / ratio - 1.0:+.1%} cost",
            "time-to-train": f"{tps * ev.n_gpus / (win['tokens_per_s_per_gpu'] * win['n_gpus']) - 1.0:+.1%} time to "
                             "train"}.get(result.objective, f"{ratio - 1.0:+.1%} tokens/s/GPU")
    lines.append(
        f"winner vs common default {describe(row)} ({tps:,.0f} tokens/s/GPU, "
        f"{float(ev.metrics['memory_gib'][d]):.1f} GiB): {edge}; time {_delta_text(win, full)}"
    )
    return lines
