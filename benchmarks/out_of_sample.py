"""How the shipped profile does on measured runs it was never fitted on.

    python benchmarks/out_of_sample.py [--as FRAMEWORK ...]

The runs: MosaicML's MPT benchmarks (calibration/data/outofsample/llmfoundry_runs.csv, built by
calibration/build_outofsample.py from mosaicml/llm-foundry's benchmarking README; a source, a stack and
a model family the shared data set does not have). Their stack has no profile, so they run with the
generic one, as any unknown or blank framework does; ``--as`` also scores them as if they had been run
by a stack the model knows (e.g. torchtitan, the other FSDP stack). Prints the MAPE of tokens/s/GPU and
the median predicted / measured ratio by GPU and precision and by sequence length.

Then NVIDIA's DGX Cloud benchmarking recipes (calibration/data/outofsample/dgxc_runs.csv, built by
calibration/build_dgxc.py from NVIDIA/dgxc-benchmarking's READMEs: NeMo on 8-2,304 H100s, GPT-3 175B,
Llama 3.1 8B/70B/405B, Nemotron-4 15B/340B, bf16 and fp8; a source the shared data set does not list),
run with the NeMo profile they name: MAPE and the median predicted / measured ratio by model and precision.

Then InternEvo's training-performance document (calibration/data/outofsample/internevo_runs.csv, built by
calibration/build_internevo.py from InternLM/InternEvo's doc/en/train_performance.md: InternLM 7B on 8-1,024
A100s, tp 1 or 2, InternEvo's ZeRO-1 over all data-parallel ranks or inside one node; a stack without a
profile, so the generic one): MAPE and the median predicted / measured ratio by configuration and GPU count.

``--unknown-stacks`` also costs every source of the calibration runs but the HF playbook as if its stack
were unknown (the generic profile), against its own stack's profile: how an unseen stack fares. (The
generic kernel efficiency is the median over the calibrated stacks, each source's own among them.)
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from perfmodel.calibrate.parsers.runs_csv import read_runs_csv
from perfmodel.validate import measured_tokens_per_s_per_gpu, predict_runs

RUNS = Path(__file__).resolve().parents[1] / "calibration" / "data" / "outofsample" / "llmfoundry_runs.csv"
DGXC_RUNS = RUNS.with_name("dgxc_runs.csv")
INTERNEVO_RUNS = RUNS.with_name("internevo_runs.csv")
CALIBRATION_RUNS = Path(__file__).resolve().parents[1] / "calibration" / "data" / "runs" / "calibration_runs.csv"


def score(runs: pd.DataFrame, framework: str | None = None) -> pd.DataFrame:
    """One row per run: its predicted / measured tokens/s/GPU (the stated framework, or ``framework``)."""
    frame = runs if framework is None else runs.assign(framework=framework)
    pred = predict_runs(frame)
    ratio = pred["pred_tokens_per_s_per_gpu"].to_numpy() / measured_tokens_per_s_per_gpu(frame)
    return runs.assign(ratio=ratio)


def unknown_stacks() -> pd.DataFrame:
    """Per source (HF playbook aside): MAPE with its own stack's profile and as an unknown stack."""
    from perfmodel.validate import run_sources

    runs = read_runs_csv(CALIBRATION_RUNS)
    source = run_sources(runs)
    rows = []
    for name in sorted(set(source) - {"hfpb"}):
        part = runs[(source == name).to_numpy()].reset_index(drop=True)
        own, unknown = (100.0 * np.abs(score(part, fw).ratio - 1.0).mean() for fw in (None, "unknown-stack"))
        rows.append({"source": name, "own_stack_mape_pct": own, "as_unknown_mape_pct": unknown})
    return pd.DataFrame(rows).set_index("source")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--as", dest="frameworks", action="append", default=[], metavar="FRAMEWORK")
    ap.add_argument("--unknown-stacks", action="store_true",
                    help="also cost the calibration sources as if their stacks were unknown")
    args = ap.parse_args()
    runs = read_runs_csv(RUNS)
    for fw in [None, *args.frameworks]:
        scored = score(runs, fw)
        ape = 100.0 * np.abs(scored.ratio - 1.0)
        label = "as stated (generic profile)" if fw is None else f"as {fw}"
        print(f"{len(scored)} runs {label}: MAPE {ape.mean():.1f}% (median APE {ape.median():.1f}%), "
              f"median predicted / measured {scored.ratio.median():.3f}")
        with pd.option_context("display.width", 160):
            print(scored.pivot_table(index=["gpu", "precision"], columns="recompute", values="ratio",
                                     aggfunc="median").round(2).to_string())
            print(scored.pivot_table(index="seq_len", columns="gpu", values="ratio",
                                     aggfunc="median").round(2).to_string())
    dgxc = score(read_runs_csv(DGXC_RUNS))
    ape = 100.0 * np.abs(dgxc.ratio - 1.0)
    print(f"{len(dgxc)} DGX Cloud recipe runs (NeMo profile): MAPE {ape.mean():.1f}% (median APE {ape.median():.1f}%, "
          f"worst {ape.max():.1f}%), median predicted / measured {dgxc.ratio.median():.3f}")
    with pd.option_context("display.width", 160):
        print(dgxc.pivot_table(index="model_name", columns="precision", values="ratio",
                               aggfunc="median").round(3).to_string())
    internevo = score(read_runs_csv(INTERNEVO_RUNS))
    ape = 100.0 * np.abs(internevo.ratio - 1.0)
    print(f"{len(internevo)} InternEvo runs (generic profile): MAPE {ape.mean():.1f}% (median APE {ape.median():.1f}%, "
          f"worst {ape.max():.1f}%), median predicted / measured {internevo.ratio.median():.3f}")
    with pd.option_context("display.width", 160):
        config = internevo.notes.str.extract(r"\((tp=\d+, zero1=-?\d+)\)", expand=False).rename("configuration")
        print(internevo.assign(configuration=config).pivot_table(
            index="configuration", columns="n_gpus", values="ratio", aggfunc="median").round(2).to_string())
    if args.unknown_stacks:
        table = unknown_stacks()
        print(table.round(1).to_string())
        print(f"macro over {len(table)} sources: own stack {table.own_stack_mape_pct.mean():.1f}%, "
              f"as an unknown stack {table.as_unknown_mape_pct.mean():.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
