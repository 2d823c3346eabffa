"""Does the model rank configurations the way the measurements do?

For every group of rows of a runs CSV that share source (slug of run_id), model dimensions, GPU,
GPU count, sequence length and global batch -- i.e. the same job run with different parallel
configurations -- with at least ``--min-configs`` scored rows: the Spearman rank correlation of
predicted vs measured tokens/s/GPU, and the top-1 regret (how much slower, measured, the
configuration the model ranks first is than the measured best: 1 - measured[argmax pred] / max
measured). Prints the groups and the means. No targets are asserted yet.

``--noise-ceiling`` adds what a perfect configuration-only model would score on the HF playbook's
groups if each run carried the run-to-run noise its ZeRO-0 / ZeRO-1 twins show (configurations
that differ only in the ZeRO stage, whose modelled times differ by a few percent): the measured
tokens/s stand for the truth, and each simulated run is, with probability 1/2, slowed by the
|log ratio| of a randomly drawn twin pair (a stall slows a run; nothing speeds one up).

``--tie-ceiling`` adds what the best configuration-only model could score on every group: rows identical in
every column such a model may read (all but the measured ones and the row's identity) must get one
prediction, so each class of identical rows is predicted at its mean measured throughput (the best tied
ranking, scored by Spearman as above) and the top-1 pick is the class with the highest mean; a second line
reads only the cost model's input columns (without ``notes``, ``derived_fields`` and ``model_name``).

    python benchmarks/ranking_quality.py [RUNS_CSV] [--min-configs 4] [--noise-ceiling] [--tie-ceiling]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.stats import spearmanr

from perfmodel.calibrate.parsers.runs_csv import read_runs_csv
from perfmodel.runs import MEASURED_COLUMNS
from perfmodel.validate import measured_tokens_per_s_per_gpu, predict_runs, run_sources

DEFAULT_CSV = Path(__file__).resolve().parents[1] / "calibration" / "data" / "runs" / "calibration_runs.csv"
GROUP_KEYS = ["source_slug", "n_layers", "hidden_size", "ffn_hidden_size", "n_heads", "n_kv_heads", "gpu",
              "n_gpus", "seq_len", "global_batch"]


def _sweeps(frame: pd.DataFrame):
    """``frame`` grouped by ``GROUP_KEYS`` (a blank key counts as one value)."""
    return frame.groupby([frame[k].fillna(-1) if k != "gpu" and k != "source_slug" else frame[k]
                          for k in GROUP_KEYS], sort=True)


def _scored(df: pd.DataFrame) -> pd.DataFrame:
    """The rows the ranking is scored on (costed ``ok`` with a finite prediction and measurement), with their
    source slug, prediction and measurement."""
    pred = predict_runs(df)
    frame = df.assign(
        source_slug=run_sources(df).to_numpy(),
        pred=pred["pred_tokens_per_s_per_gpu"].to_numpy(),
        meas=measured_tokens_per_s_per_gpu(df),
        ok=(pred["status"] == "ok").to_numpy(),
    )
    return frame[frame.ok & np.isfinite(frame.pred) & np.isfinite(frame.meas)]


def ranking_table(df: pd.DataFrame, min_configs: int = 4) -> pd.DataFrame:
    frame = _scored(df)
    rows = []
    for key, g in _sweeps(frame):
        if len(g) < min_configs:
            continue
        rho = spearmanr(g.pred, g.meas).statistic if g.meas.nunique() > 1 and g.pred.nunique() > 1 else np.nan
        regret = 1.0 - g.meas.to_numpy()[np.argmax(g.pred.to_numpy())] / g.meas.max()
        rows.append({"source": key[0], "gpu": key[6], "n_gpus": int(key[7]), "seq_len": int(key[8]),
                     "global_batch": int(key[9]), "hidden": int(key[2]), "configs": len(g),
                     "spearman": rho, "top1_regret": regret})
    return pd.DataFrame(rows)


def noise_ceiling(df: pd.DataFrame, min_configs: int = 4, draws: int = 300, seed: int = 0) -> pd.DataFrame:
    """Mean Spearman and top-1 regret of a perfect model under the HF playbook's twin noise, per group
    (see the module docstring)."""
    frame = df.assign(source_slug=run_sources(df).to_numpy(), meas=measured_tokens_per_s_per_gpu(df))
    hf = frame[(frame.source_slug == "hfpb") & np.isfinite(frame.meas)]
    keys = ["n_layers", "hidden_size", "n_gpus", "seq_len", "global_batch", "tp", "pp", "dp", "micro_batch"]
    once = hf.groupby(keys + ["zero_stage"], as_index=False)["meas"].mean()
    twins = once[once.zero_stage == 0].merge(once[once.zero_stage == 1], on=keys, suffixes=("_0", "_1"))
    slowdowns = np.abs(np.log(twins.meas_1 / twins.meas_0)).to_numpy()
    rng = np.random.default_rng(seed)
    rows = []
    for key, g in hf.groupby(["n_layers", "hidden_size", "gpu", "n_gpus", "seq_len", "global_batch"], sort=True):
        if len(g) < min_configs:
            continue
        truth = np.log(g.meas.to_numpy())
        rho, regret = [], []
        for _ in range(draws):
            hit = rng.random(truth.size) < 0.5
            obs = truth - np.where(hit, rng.choice(slowdowns, truth.size), 0.0)
            rho.append(spearmanr(truth, obs).statistic)
            regret.append(1.0 - np.exp(obs[np.argmax(truth)] - obs.max()))
        rows.append({"n_gpus": int(key[3]), "hidden": int(key[1]), "configs": len(g),
                     "spearman": float(np.mean(rho)), "top1_regret": float(np.mean(regret))})
    return pd.DataFrame(rows)


#: columns that are not a run's configuration: its measurements and its identity
NOT_CONFIGURATION = frozenset({"run_id", "source", "target", *MEASURED_COLUMNS})
#: free-text columns the cost model itself does not read for a row's cost (it reads notes only for a TFLOP/s tag)
TEXT_COLUMNS = ("notes", "derived_fields", "model_name")


def tie_ceiling(df: pd.DataFrame, min_configs: int = 4, ignore: tuple[str, ...] = ()) -> pd.DataFrame:
    """Per group of the rows ``ranking_table`` scores (``GROUP_KEYS``): Spearman and top-1 regret of the best
    prediction a configuration-only model can make, which gives rows identical in every configuration column
    (all but ``NOT_CONFIGURATION`` and ``ignore``) one value: each class at its mean measured throughput.
    ``notes`` may carry measured text (a peak memory, a date) that tells repeats apart: read with it, the
    figure is an upper bound; ``ignore=TEXT_COLUMNS`` reads the cost model's input columns only."""
    frame = _scored(df)
    cols = [c for c in df.columns if c not in NOT_CONFIGURATION and c not in ignore and not c.startswith("_")]
    rows = []
    for key, g in _sweeps(frame):
        if len(g) < min_configs:
            continue
        cls = g[cols].astype(object).where(g[cols].notna(), "").astype(str).agg("|".join, axis=1).to_numpy()
        best = g.meas.groupby(cls).transform("mean").to_numpy()
        rho = spearmanr(best, g.meas).statistic if g.meas.nunique() > 1 and len(set(best)) > 1 else np.nan
        rows.append({"source": key[0], "configs": len(g), "classes": len(set(cls)), "spearman": rho,
                     "top1_regret": 1.0 - g.meas.groupby(cls).mean().max() / g.meas.max()})
    return pd.DataFrame(rows, columns=["source", "configs", "classes", "spearman", "top1_regret"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs_csv", nargs="?", default=str(DEFAULT_CSV))
    ap.add_argument("--min-configs", type=int, default=4)
    ap.add_argument("--noise-ceiling", action="store_true", help="also what a perfect model would score under "
                    "the HF playbook's run-to-run noise")
    ap.add_argument("--tie-ceiling", action="store_true", help="also what the best configuration-only model "
                    "could score, given that identical configurations get one prediction")
    args = ap.parse_args()
    table = ranking_table(read_runs_csv(Path(args.runs_csv)), args.min_configs)
    if table.empty:
        print("no group has enough configurations")
        return 0
    with pd.option_context("display.width", 200, "display.max_rows", 500):
        print(table.round(3).to_string(index=False))
    print(f"groups {len(table)} (rows {int(table.configs.sum())}); mean Spearman {table.spearman.mean():.3f} "
          f"(median {table.spearman.median():.3f}, over {int(table.spearman.notna().sum())} groups with spread); "
          f"mean top-1 regret {table.top1_regret.mean():.1%} (median {table.top1_regret.median():.1%})")
    hf = table.source == "hfpb"
    for label, part in (("HF playbook", table[hf]), ("other sources", table[~hf])):
        if len(part):
            print(f"  {label}: {len(part)} groups, mean Spearman {part.spearman.mean():.3f}, "
                  f"mean top-1 regret {part.top1_regret.mean():.1%}")
    if args.noise_ceiling:
        ceiling = noise_ceiling(read_runs_csv(Path(args.runs_csv)), args.min_configs)
        print(f"a perfect model under the HF playbook's twin noise ({len(ceiling)} groups): mean Spearman "
              f"{ceiling.spearman.mean():.3f}, mean top-1 regret {ceiling.top1_regret.mean():.1%}")
    if args.tie_ceiling:
        runs = read_runs_csv(Path(args.runs_csv))
        for label, ignore in (("every non-measured column", ()), ("the cost model's input columns", TEXT_COLUMNS)):
            t = tie_ceiling(runs, args.min_configs, ignore)
            print(f"best configuration-only model, identical in {label} ({len(t)} groups): mean Spearman "
                  f"{t.spearman.mean():.3f}, mean top-1 regret {t.top1_regret.mean():.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
