"""Build the InternEvo out-of-sample runs CSV: ``python calibration/build_internevo.py``.

InternEvo's training-performance document (InternLM/InternEvo ``doc/en/train_performance.md``, commit
3a665e88d3; kept unchanged in ``data/outofsample/internevo_train_performance.md``): InternLM 7B on 8 to
1,024 A100 80 GB GPUs, 8 per node, 4 x 100 Gbit/s RoCE per node, bf16, tensor parallelism 1 or 2, no
pipeline. A stack (InternEvo: flash attention, its Hybrid ZeRO optimizer) and a model family the shared
data set does not have, so the runs are costed with the generic profile; the fit never reads them
(``calibration/refit.py`` fits ``data/runs/calibration_runs.csv`` only).

Only the "Throughput Measurement" table is converted (32 runs: four parallel configurations x eight GPU
counts). Its runs pack samples of at most ``seq_len`` tokens into each micro-batch and keep them apart
(``pack_sample_into_one=False``: flash attention over each sample), which the runs schema states as
``micro_bsz`` sequences of ``seq_len``. The document's "FLOPS Testing" tables are left out: they pack
the micro-batch into one sample (``PackedDatasetWithoutCuSeqlen``), whose attention span the document
does not state -- its TFLOP/s count 2,048-token sequences, the data set class a single sequence of the
whole micro-batch -- so they cannot be stated without guessing.

``zero1`` is where InternEvo keeps its optimizer shards. ``zero1=-1`` shards them over all data-parallel
ranks ("equivalent to Deepspeed Zero-1", the document says): ZeRO stage 1. ``zero1=8`` (tp 1) and
``zero1=4`` (tp 2) shard them inside one node (8 GPUs) and keep every node's copy the same, so every node
needs the whole reduced gradient: the traffic that leaves a node is ZeRO-0's gradient all-reduce (the
parameters are re-sent only inside the node), which is how those rows are stated (zero_stage 0, flagged
in ``derived_fields``); the schema has no partial-group ZeRO.

Checks before writing (a transcription error stops the build): the hardware and hyper-parameter tables
read as expected; every configuration processes the same tokens per GPU per step ("the number of tokens
processed per GPU in a single iteration remained consistent": micro_num x micro_bsz x seq_len / tp); each
hybrid group is one node's data-parallel ranks (zero1 x tp = 8); and the summary table's TGS row is the
(tp=1, zero1=8) row, as the text says.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pandas as pd

from perfmodel.calibrate.build_runs import runs_frame, write_runs

HERE = Path(__file__).resolve().parent
TABLES = HERE / "data" / "outofsample" / "internevo_train_performance.md"
OUT = HERE / "data" / "outofsample" / "internevo_runs.csv"
HEADER_FROM = HERE / "data" / "runs" / "calibration_runs.csv"
SOURCE = "InternLM/InternEvo doc/en/train_performance.md (commit 3a665e88d3)"
GPUS_PER_NODE = 8  # "zero1=8, tp=1: optimizer states are distributed within 8 GPUs in a single node"
#: configs/_base_/models/internlm_7B.py: 32 layers, hidden 4096, 32 heads, vocabulary 103168, MLP ratio 8/3
#: rounded up to a multiple of 256 by InternEvo's FeedForward (multiple_of=256): int(4096 x 8/3) = 10922 -> 11008
INTERNLM_7B = {"n_layers": 32, "hidden_size": 4096, "ffn_hidden_size": 11008, "n_heads": 32, "n_kv_heads": 32,
               "vocab_size": 103168, "mlp": "swiglu", "tied_embeddings": 0}
GPU_NAMES = {"nvidia_a100-sxm4-80gb": "a100-sxm4-80gb"}


def _table_rows(block: str) -> list[list[str]]:
    """The cells of a markdown table's body rows (header and separator dropped)."""
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in block.splitlines()
            if line.startswith("|")]
    return [r for r in rows[2:] if r]


def read_tables(text: str) -> dict:
    """The four tables the conversion needs, by their place in the document."""
    def block(after: str, before: str) -> str:
        start = text.index(after)
        return text[start:text.index(before, start)]

    return {
        "summary": _table_rows(block("## Training Performance", "We tested")),
        "hardware": _table_rows(block("| Hardware ", "| Hyperparameters")),
        "hyper": _table_rows(block("| Hyperparameters", "The configuration of `zero1`")),
        "throughput": _table_rows(block("| Parallel Configuration", "<div")),
        "gpu_counts": [int(c.split()[0]) for c in
                       [x.strip() for x in block("| Parallel Configuration", "\n").strip().strip("|").split("|")][1:]],
    }


def convert(tables: dict) -> tuple[pd.DataFrame, list[str]]:
    problems: list[str] = []
    hardware = {k: v for k, v in tables["hardware"]}
    gpu = GPU_NAMES.get(hardware.get("GPU", ""))
    link = re.fullmatch(r"(\d+) \* (\d+)Gb RoCE", hardware.get("Inter-machine bandwidth", ""))
    if gpu is None or link is None:
        problems.append(f"hardware table: GPU {hardware.get('GPU')!r} / bandwidth "
                        f"{hardware.get('Inter-machine bandwidth')!r} not as expected")
        return runs_frame([], "ie", HEADER_FROM), problems
    scale_out = int(link.group(1)) * int(link.group(2))
    hyper = {r[0]: r[1:] for r in tables["hyper"]}  # micro_num / micro_bsz / seq_len -> [tp=1, tp=2]
    per_tp = {tp: {k: int(v[i]) for k, v in hyper.items()} for i, tp in enumerate((1, 2))}
    tokens = {tp: p["micro_num"] * p["micro_bsz"] * p["seq_len"] // tp for tp, p in per_tp.items()}
    if len(set(tokens.values())) != 1:
        problems.append(f"hyper-parameter table: tokens per GPU per step differ by tp ({tokens})")
    counts = tables["gpu_counts"]
    summary_tgs = [int(c) for c in tables["summary"][0][1:]]
    rows = []
    for cells in tables["throughput"]:
        m = re.fullmatch(r"\(tp=(\d+), zero1=(-?\d+)\)", cells[0])
        if m is None or len(cells) != len(counts) + 1:
            problems.append(f"throughput table: unexpected row {cells}")
            continue
        tp, zero1 = int(m.group(1)), int(m.group(2))
        tgs = [int(c) for c in cells[1:]]
        hybrid = zero1 > 0
        if hybrid and zero1 * tp != GPUS_PER_NODE:
            problems.append(f"throughput table: {cells[0]} is not one node's data-parallel ranks")
        if (tp, zero1) == (1, 8) and tgs != summary_tgs:
            problems.append(f"throughput table: {cells[0]} is not the summary table's TGS row {summary_tgs}")
        p = per_tp[tp]
        for n, value in zip(counts, tgs):
            dp = n // tp
            rows.append({
                "source": SOURCE, "model_name": "InternLM 7B (InternEvo benchmark)", **INTERNLM_7B,
                "seq_len": p["seq_len"], "gpu": gpu, "n_gpus": n, "gpus_per_node": GPUS_PER_NODE,
                "scale_out_gbit_per_s_per_node": scale_out, "network": "RoCE", "tp": tp, "pp": 1, "dp": dp,
                "cp": 1, "ep": 1, "vpp": 1, "sp": 0, "zero_stage": 0 if hybrid else 1,
                "micro_batch": p["micro_bsz"], "global_batch": dp * p["micro_bsz"] * p["micro_num"],
                "recompute": "none", "precision": "bf16", "framework": "internevo",
                "tokens_per_s_per_gpu": value, "target": "tokens_per_s_per_gpu",
                "derived_fields": (
                    "norm: model dimensions from configs/_base_/models/internlm_7B.py @ 0aa6d26e78 (ffn: MLP ratio "
                    "8/3 rounded up to a multiple of 256 as InternEvo's FeedForward does; untied head) -- assumed to "
                    "be the document's '7B model'; dp = GPUs / tp; micro_batch = micro_bsz samples of at most "
                    "seq_len tokens (pack_sample_into_one=False: attention within each sample); global_batch = dp x "
                    "micro_bsz x micro_num; recompute none (checkpoint=False); bf16 (the Chinese version of the "
                    "document, doc/train_performance.md @ 23c67edf7a, states dtype=torch.bfloat16 for this test); "
                    "sp 0 (the document's configuration block: sequence_parallel=False); network RoCE at 4 x 100 Gbit/s per node; "
                    + (f"zero_stage=0: zero1={zero1} keeps the optimizer shards inside one node and every node's "
                       "copy the same, so the traffic leaving a node is ZeRO-0's gradient all-reduce (the schema "
                       "has no partial-group ZeRO)" if hybrid else
                       "zero_stage=1: zero1=-1 shards the optimizer over all data-parallel ranks") +
                    "; framework 'internevo' has no perfmodel profile"),
                "notes": f"Parallel configuration (tp={tp}, zero1={zero1}); micro_num {p['micro_num']}",
            })
    return runs_frame(rows, "ie", HEADER_FROM), problems


def main() -> int:
    return write_runs(*convert(read_tables(TABLES.read_text())), OUT, HERE.parent)


if __name__ == "__main__":
    sys.exit(main())
