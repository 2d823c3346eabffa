"""benchmarks/ranking_quality.py --tie-ceiling: the best ranking a configuration-only model can give when
rows identical in every configuration column must share one prediction."""
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from ranking_quality import tie_ceiling  # noqa: E402

ROW = {"source": "t", "model_name": "m", "n_layers": 32, "hidden_size": 4096, "ffn_hidden_size": 11008,
       "n_heads": 32, "n_kv_heads": 32, "gpu": "h100-sxm5-80gb", "n_gpus": 8, "seq_len": 4096,
       "global_batch": 64, "pp": 1, "micro_batch": 1, "target": "tokens_per_s_per_gpu"}


def runs(layouts_and_throughputs, notes=None):
    rows = []
    for i, ((tp, dp), tps) in enumerate(layouts_and_throughputs):
        rows.append(dict(ROW, run_id=f"t-{i + 1:03d}", tp=tp, dp=dp, tokens_per_s_per_gpu=tps,
                         notes=None if notes is None else notes[i]))
    return pd.DataFrame(rows)


def test_distinct_configurations_can_be_ranked_perfectly():
    t = tie_ceiling(runs([((1, 8), 900.0), ((2, 4), 1000.0), ((4, 2), 800.0), ((8, 1), 700.0)]))
    assert len(t) == 1 and t.classes[0] == 4
    assert t.spearman[0] == pytest.approx(1.0) and t.top1_regret[0] == 0.0


def test_repeated_configurations_share_one_prediction():
    """Two measurements of tp 2 (1,000 and 600) tie: the class mean 800 ranks third of four, its best run is
    out of reach, and the best pick is tp 1 (900) at 10% regret."""
    t = tie_ceiling(runs([((1, 8), 900.0), ((2, 4), 1000.0), ((2, 4), 600.0), ((8, 1), 700.0)]))
    assert t.classes[0] == 3
    assert t.top1_regret[0] == pytest.approx(0.1)
    assert t.spearman[0] < 1.0
    # a column that tells the two runs apart (here notes) separates them again, unless ignored
    notes = ["a", "b", "c", "d"]
    told = tie_ceiling(runs([((1, 8), 900.0), ((2, 4), 1000.0), ((2, 4), 600.0), ((8, 1), 700.0)], notes))
    assert told.classes[0] == 4 and told.top1_regret[0] == 0.0
    blind = tie_ceiling(runs([((1, 8), 900.0), ((2, 4), 1000.0), ((2, 4), 600.0), ((8, 1), 700.0)], notes),
                        ignore=("notes",))
    assert blind.classes[0] == 3 and np.isclose(blind.top1_regret[0], 0.1)


def test_the_ceiling_reads_the_sweeps_the_ranking_scores():
    """Same groups as ranking_table on the shipped runs (rows the model costs, >= 4 configurations), and a
    CSV without any group gives an empty table, not an error."""
    from ranking_quality import DEFAULT_CSV, ranking_table

    from perfmodel.calibrate.parsers.runs_csv import read_runs_csv

    runs = read_runs_csv(DEFAULT_CSV)
    table, ceiling = ranking_table(runs), tie_ceiling(runs)
    assert len(ceiling) == len(table) > 30
    assert list(ceiling.configs) == list(table.configs)
    assert (ceiling.spearman >= table.spearman - 1e-12).all()  # the model ranks no shipped sweep above it
    empty = tie_ceiling(runs.iloc[:2])
    assert empty.empty and "spearman" in empty
