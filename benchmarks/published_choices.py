"""Where published, hand-tuned configurations rank in perfmodel's search for the same job.

* Megatron SC'21 (Narayanan et al. 2021, Table 1; runs sc21-t1-*): GPT 1.7B .. 1T on A100s.
* Kuaishou ATC'24 optimal configurations (runs kwai-atc24-*, framework megatron-kwai): see
  ``benchmarks/kuaishou_cases.py`` (reused here).

For each run: the rank of the published layout (tp, pp, cp, vpp, micro-batch, recompute; the
search's best choice of the remaining axes) among all configurations that fit, and the predicted
gap between our winner and it. The search uses the shipped default profile.

    python benchmarks/published_choices.py
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import perfmodel as pm  # noqa: E402
from perfmodel.search.engine import run_search  # noqa: E402

RUNS = ROOT / "calibration" / "data" / "runs" / "calibration_runs.csv"


def _model(r) -> pm.ModelSpec:
    return pm.ModelSpec(
        name=str(r.model_name), n_layers=int(r.n_layers), hidden_size=int(r.hidden_size),
        ffn_hidden_size=int(r.ffn_hidden_size), n_heads=int(r.n_heads), n_kv_heads=int(r.n_kv_heads),
        vocab_size=int(r.vocab_size), mlp=str(r.mlp), tied_embeddings=bool(r.tied_embeddings),
    )


def sc21_ranks() -> pd.DataFrame:
    runs = pd.read_csv(RUNS)
    rows = []
    for _, r in runs[runs.run_id.str.startswith("sc21-t1")].iterrows():
        model = _model(r)
        cluster = pm.ClusterSpec.build(pm.load_gpu(str(r.gpu)), int(r.n_gpus), 8, float(r.scale_out_gbit_per_s_per_node))
        job = pm.JobSpec(global_batch=int(r.global_batch), seq_len=int(r.seq_len), precision=str(r.precision),
                         framework=str(r.framework))
        df = run_search(model, cluster, job, top=None).candidates
        mb = int(r.micro_batch) if r.micro_batch == r.micro_batch else None
        hit = df[(df.tp == r.tp) & (df.pp == r.pp) & (df.cp == r.cp) & (df.recompute == str(r.recompute))]
        if mb is not None:
            hit = hit[hit.micro_batch == mb]
        rank = int(hit.index[0]) + 1 if len(hit) else None
        rows.append({
            "run_id": r.run_id, "model": r.model_name, "gpus": int(r.n_gpus),
            "published": f"t{r.tp} p{r.pp} d{r.dp} {r.recompute}", "rank": rank, "n_feasible": len(df),
            "gap_to_winner_pct": round((df.tokens_per_s_per_gpu.iloc[0] / hit.tokens_per_s_per_gpu.iloc[0] - 1) * 100, 1)
            if len(hit) else None,
            "winner": f"t{df.tp.iloc[0]} p{df.pp.iloc[0]} vpp{df.vpp.iloc[0]} mb{df.micro_batch.iloc[0]} {df.recompute.iloc[0]}",
        })
    return pd.DataFrame(rows)


def main() -> None:
    import kuaishou_cases

    pd.set_option("display.width", 200)
    for name, table in (("Megatron SC'21 Table 1", sc21_ranks()), ("Kuaishou ATC'24", kuaishou_cases.published_ranks())):
        found = table.dropna(subset=["rank"])
        print(f"== {name}")
        print(table.to_string(index=False))
        print(f"found {len(found)} of {len(table)}; median rank {np.median(found['rank']):.0f}; "
              f"median predicted gap to our winner {np.median(found['gap_to_winner_pct']):.1f}%\n")


if __name__ == "__main__":
    main()
