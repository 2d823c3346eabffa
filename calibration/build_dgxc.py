"""Build the second out-of-sample runs CSV, NVIDIA's DGX Cloud benchmarking recipes:
``python calibration/build_dgxc.py``.

NVIDIA/dgxc-benchmarking publishes, for each recipe, an "Expected Performance" table: the measured
training step time of NeMo Framework runs on DGX H100 at 8 to 2,304 GPUs, bf16 and fp8, for GPT-3 175B,
Llama 3.1 8B / 70B / 405B and Nemotron-4 15B / 340B (70 runs). The tables are kept unchanged in
``data/outofsample/dgxc_readme_tables.md`` (each section names its README and commit); this script
converts them to the runs schema (``data/outofsample/dgxc_runs.csv``). The fit never reads them
(``calibration/refit.py`` fits ``data/runs/calibration_runs.csv`` only); the source is not among the
shared data set's sources. They check the shipped NeMo profile on jobs, scales and models it was not
fitted on (``benchmarks/out_of_sample.py``).

Every row is checked against its own redundant cells before it is written (a transcription error stops
the build): throughput = sequence length x global batch / step time (within 0.5%), MFU = global batch x
model FLOPs / step time / GPUs / peak with the README's own FLOP formula and peaks (within 0.5 points),
and, where the table states gradient accumulation, global batch = micro-batch x accumulation x data
parallel size.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pandas as pd

from perfmodel.calibrate.build_runs import runs_frame, write_runs

HERE = Path(__file__).resolve().parent
TABLES = HERE / "data" / "outofsample" / "dgxc_readme_tables.md"
OUT = HERE / "data" / "outofsample" / "dgxc_runs.csv"
HEADER_FROM = HERE / "data" / "runs" / "calibration_runs.csv"
REPO = "NVIDIA/dgxc-benchmarking"
#: the READMEs' peaks (TFLOP/s): "H100 FP8 is 1979 TFLOPS and for H100 BF16 is 989 TFLOPS"
README_PEAK_TFLOP_PER_S = {"bf16": 989.0, "fp8": 1979.0}
THROUGHPUT_TOLERANCE = 0.002
MFU_TOLERANCE_POINTS = 0.5
STEP = "Training step time (seconds per step)"
TPS = "Throughput in tokens per second"
MFU = "Model flops utilization"
#: cells of the READMEs that disagree with their own row, kept as printed and flagged in the row's notes
#: (README, precision, GPUs); the row's tokens/s are the step time's
KNOWN_README_INCONSISTENCIES = {
    ("llama3.1/README_70b.md", "bf16", 2048): "FLAG: the README prints a step time of 14.98 s, but its "
    "throughput (2,248,957), MFU (53.38%) and days (5.15) are exactly twice the 1,024-GPU column's, i.e. 14.92 s; "
    "the printed step time is kept",
}
#: query groups in the README's FLOP formula where it differs from the model's KV heads (README_405b.md Notes:
#: "12 * 126 * 16384^2 * (1 + 16/128 + 8192/16384)"); used for the MFU check only
README_QUERY_GROUPS = {"llama3.1-405b": 16}
#: the vocabulary a recipe trains with where it is not the model's own
VOCAB_OVERRIDE = {
    "llama3.1/README_405b.md": (51200, "vocab_size 51200: the README says 'Llama3.1 405B uses the GPT2BPETokenizer "
                                "as a proxy' (GPT-2's 50,257 tokens, padded as Megatron pads them to a multiple of "
                                "128 x tp 8)"),
}


def readme_model_flops(catalog: str, n_layers: int, seq: int) -> float:
    """FLOPs per sequence by the README's Notes: Llama (GQA, SwiGLU)
    s (12 L h^2 (1 + g/a + s/h) + 18 L F h + 6 V h); GPT-3 and Nemotron s (72 L h^2 + 12 L h s + 6 V h)."""
    from perfmodel.catalog import load_model

    m = load_model(catalog)
    L, h, V = n_layers, m.hidden_size, m.vocab_size
    if catalog.startswith("llama"):
        g = README_QUERY_GROUPS.get(catalog, m.n_kv_heads)
        return seq * (12 * L * h * h * (1 + g / m.n_heads + seq / h) + 18 * L * m.ffn_hidden_size * h + 6 * V * h)
    return seq * (72 * L * h * h + 12 * L * h * seq + 6 * V * h)


def read_tables(text: str) -> list[dict]:
    """One dict per table: section (path, commit, catalog model, seq), the header's settings, the column
    headers and the labelled rows, all as printed."""
    tables, section, current = [], None, None
    for line in text.splitlines():
        if line.startswith("## "):
            path_commit, catalog, seq, _ = (p.strip() for p in line[3:].split("|"))
            path, commit = (p.strip() for p in path_commit.split("@"))
            section = {"path": path, "commit": commit, "catalog": catalog, "seq": int(seq.split()[1])}
            current = None
        elif line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if section is None:
                raise ValueError(f"table row before any section heading: {line}")
            if current is None:
                current = {**section, "title": cells[0], "columns": cells[1:], "rows": {}}
                tables.append(current)
            elif not set(cells[0]) <= set("-:"):
                current["rows"][cells[0]] = cells[1:]
        elif not line.strip():
            current = None
    return tables


def _settings(title: str) -> dict[str, int]:
    return {k: int(v) for k, v in re.findall(r"\b(TP|PP|CP|VP|MBS|GA)=(\d+)", title)}


def _step_time(cell: str) -> tuple[float, str]:
    """The step-time cell as a number; a cell printed with a space inside a number ("8.7  5") is read
    without it, and said so (the throughput check then confirms or rejects that reading)."""
    joined = re.sub(r"\s+", "", cell)
    return float(joined), ("" if joined == cell else f"step time printed as '{cell}', read as {joined}")


def convert(tables: list[dict]) -> tuple[pd.DataFrame, list[str]]:
    from perfmodel.catalog import load_model

    out, problems = [], []
    for t in tables:
        cfg = _settings(t["title"])
        precision = "fp8" if "FP8" in t["title"] else "bf16"
        model = load_model(t["catalog"])
        for j, col in enumerate(t["columns"]):
            n = int(re.search(r"(\d+)x H100", col).group(1))
            rows = {k: v[j] for k, v in t["rows"].items()}
            gbs_m = re.search(r"GBS=(\d+)", col)
            gbs = int(gbs_m.group(1)) if gbs_m else int(rows["GBS"])
            layers = int(rows.get("Layers", model.n_layers))
            pp = int(rows.get("PP", cfg.get("PP", 1)))
            vp_cell = rows.get("VP", str(cfg.get("VP", 1)))
            vpp = 1 if vp_cell == "n/a" else int(vp_cell)
            tp, cp, mbs = cfg.get("TP", 1), cfg.get("CP", 1), cfg["MBS"]
            step_s, step_note = _step_time(rows[STEP])
            tps, mfu_pct = float(rows[TPS]), float(rows[MFU].rstrip("%"))
            seq = t["seq"]
            where = f"{t['path']}: {t['title'].split(' (')[0]} on {n} GPUs"
            dp, rem = divmod(n, tp * pp * cp)
            if rem:
                problems.append(f"{where}: {n} GPUs is not a multiple of tp x pp x cp = {tp * pp * cp}")
                continue
            if "GA" in cfg and gbs != mbs * cfg["GA"] * dp:
                problems.append(f"{where}: GBS {gbs} is not MBS x GA x dp = {mbs} x {cfg['GA']} x {dp}")
            flag = KNOWN_README_INCONSISTENCIES.get((t["path"], precision, n), "")
            if abs(seq * gbs / step_s - tps) > THROUGHPUT_TOLERANCE * tps and not flag:
                problems.append(f"{where}: throughput {tps:.0f} is not seq x GBS / step time = {seq * gbs / step_s:.0f}")
            mfu_calc = 100.0 * gbs * readme_model_flops(t["catalog"], layers, seq) / step_s / n / (
                README_PEAK_TFLOP_PER_S[precision] * 1e12)
            if abs(mfu_calc - mfu_pct) > MFU_TOLERANCE_POINTS and not flag:
                problems.append(f"{where}: MFU {mfu_pct}% but the README's formula gives {mfu_calc:.2f}%")
            proxy = layers != model.n_layers
            vocab, vocab_note = VOCAB_OVERRIDE.get(t["path"], (model.vocab_size, ""))
            out.append({
                "source": f"{REPO} {t['path']} (commit {t['commit'][:10]}) [{t['title'].split(' (')[0]}]",
                "model_name": f"{t['title'].split(' (')[0].rsplit(' ', 1)[0]} [{t['catalog']}]"
                + (f" ({layers}-layer proxy)" if proxy else ""),
                "n_layers": layers, "hidden_size": model.hidden_size, "ffn_hidden_size": model.ffn_hidden_size,
                "n_heads": model.n_heads, "n_kv_heads": model.n_kv_heads, "vocab_size": vocab,
                "seq_len": seq, "mlp": model.mlp, "tied_embeddings": int(model.tied_embeddings),
                "gpu": "h100-sxm5-80gb", "n_gpus": n, "gpus_per_node": 8, "tp": tp, "pp": pp, "dp": dp, "cp": cp,
                "ep": 1, "vpp": vpp, "micro_batch": mbs, "global_batch": gbs, "precision": precision,
                "framework": "nemo", "iteration_time_s": step_s, "tokens_per_s_per_gpu": round(seq * gbs / step_s / n, 3),
                "mfu": round(mfu_pct / 100.0 * README_PEAK_TFLOP_PER_S[precision] / README_PEAK_TFLOP_PER_S["bf16"], 5),
                "target": "tokens_per_s_per_gpu",
                "derived_fields": (
                    f"norm: model dimensions from perfmodel's catalog entry {t['catalog']} (its source cites them)"
                    + (f", n_layers {layers} from the table's Layers row (a proxy of the {model.n_layers}-layer model)"
                       if proxy else "")
                    + (f"; {vocab_note}" if vocab_note else "")
                    + "; dp = GPUs / (tp x pp x cp); tokens_per_s_per_gpu = seq x GBS / step time / GPUs (the "
                    "README's throughput cell, checked against it); "
                    "gpu h100-sxm5-80gb and 8 GPUs per node (the README: DGX H100, N_GPUS_PER_NODE 8); sp, "
                    "zero_stage and recompute blank (not stated: NeMo's defaults apply); mfu as printed, fp8 "
                    "rows rescaled from the fp8 peak to the 16-bit one (x 1979/989)"),
                "notes": "; ".join(filter(None, [
                    f"train_step_timing of the README's run (NeMo Framework, DGX H100); README MFU {mfu_pct}% "
                    f"of the {precision} peak", step_note, flag])),
            })
    return runs_frame(out, "dgxc", HEADER_FROM), problems


def main() -> int:
    return write_runs(*convert(read_tables(TABLES.read_text())), OUT, HERE.parent)


if __name__ == "__main__":
    sys.exit(main())
