"""The configuration search: the batched path agrees with ``estimate``, every candidate obeys the
structural rules, the counts are consistent, and ``perfmodel recommend`` keeps CONTRACT.md."""
from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import perfmodel as pm
from perfmodel.cli import app
from perfmodel.estimate import check_config
from perfmodel.search import enumerate_space, run_search, structural_violations
from perfmodel.search.engine import best_first, evaluate, pareto_front, template_inputs

runner = CliRunner()

CONTRACT_ROW = {"tp", "pp", "dp", "cp", "vpp", "micro_batch", "sp", "zero_stage", "zeropp", "recompute",
                "iteration_time_s", "tokens_per_s_per_gpu", "mfu", "memory_gib"}

CASES = [
    ("gpt3-175b", "a100-sxm4-80gb", 1024, 8, 1536, 2048, "megatron-lm"),
    ("llama3-70b", "h100-sxm5-80gb", 512, 8, 512, 8192, "megatron-lm"),
    ("llama3-8b", "h100-sxm5-80gb", 64, 8, 256, 8192, "torchtitan"),
]


def setup(name, gpu, n, gpn, gb, s, fw):
    model = pm.load_model(name)
    cluster = pm.ClusterSpec.build(pm.load_gpu(gpu), n, gpn)
    job = pm.JobSpec(global_batch=gb, seq_len=s, framework=fw)
    return model, cluster, job


def parallel_spec(row) -> pm.ParallelSpec:
    return pm.ParallelSpec(
        tp=int(row["tp"]), pp=int(row["pp"]), dp=int(row["dp"]), cp=int(row["cp"]), vpp=int(row["vpp"]),
        micro_batch=int(row["micro_batch"]), sp=bool(row["sp"]), zero_stage=int(row["zero_stage"]),
        zeropp=row["zeropp"], recompute=row["recompute"],
        cp_kind=row.get("cp_kind", "ulysses" if int(row.get("cp_ulysses", 0)) else "ring"),
        offload_fraction=float(row.get("offload_fraction", 0.0)),
    )


@pytest.fixture(scope="module", params=CASES, ids=[c[0] for c in CASES])
def searched(request):
    model, cluster, job = setup(*request.param)
    return model, cluster, job, run_search(model, cluster, job, top=20)


def test_winner_equals_scalar_estimate(searched):
    model, cluster, job, res = searched
    for _, row in res.candidates.head(5).iterrows():
        est = pm.estimate(model, cluster, parallel_spec(row), job)
        assert est.iteration_time_s == pytest.approx(row["iteration_time_s"], rel=1e-12)
        assert est.tokens_per_s_per_gpu == pytest.approx(row["tokens_per_s_per_gpu"], rel=1e-12)
        assert est.mfu == pytest.approx(row["mfu"], rel=1e-12)
        assert est.memory_gib == pytest.approx(row["memory_gib"], rel=1e-12)
        assert est.fits
        for k, v in est.time_breakdown_s.items():
            assert v == pytest.approx(row[k], rel=1e-12, abs=1e-15)
        for k, v in est.memory_breakdown_gib.items():
            assert v == pytest.approx(row[k], rel=1e-12, abs=1e-15)


def test_random_evaluated_rows_equal_estimate(searched):
    """Not only the winner: arbitrary evaluated candidates (fitting or not) match the scalar path."""
    model, cluster, job, res = searched
    ev = res.evaluated[0]
    rng = np.random.default_rng(0)
    for i in rng.choice(ev.configs["tp"].size, size=10, replace=False):
        row = {k: ev.configs[k][i] for k in ev.configs}
        row["recompute"] = {0: "none", 1: "selective", 2: "full", 3: "balanced"}[int(row["recompute"])]
        row["zeropp"] = ""
        est = pm.estimate(model, cluster, parallel_spec(row), job)
        assert est.iteration_time_s == pytest.approx(ev.metrics["iteration_time_s"][i], rel=1e-12)
        assert est.memory_gib == pytest.approx(ev.metrics["memory_gib"][i], rel=1e-12)
        assert est.fits == bool(ev.metrics["fits"][i])


def test_candidates_obey_structural_rules(searched):
    model, cluster, job, res = searched
    df = res.candidates
    assert len(df) > 0
    for rec in df.to_dict("records"):
        assert structural_violations(model, cluster, job, rec) == []
        check_config(model, cluster, parallel_spec(rec), job)  # raises on a broken rule
        assert rec["tp"] * rec["pp"] * rec["dp"] * rec["cp"] == cluster.n_gpus
        assert job.global_batch % (rec["micro_batch"] * rec["dp"]) == 0
        assert not (rec["sp"] and rec["tp"] == 1)
        assert rec["zeropp"] == ""
        assert rec["memory_gib"] * 2**30 <= cluster.gpu.hbm_capacity_bytes


def test_every_evaluated_config_obeys_rules_and_is_distinct(searched):
    model, cluster, job, res = searched
    ev = res.evaluated[0]
    stacked = np.stack([ev.configs[k] for k in ev.configs], axis=1)
    assert len(np.unique(stacked, axis=0)) == len(stacked)
    rng = np.random.default_rng(1)
    for i in rng.choice(len(stacked), size=min(200, len(stacked)), replace=False):
        rec = {k: ev.configs[k][i] for k in ev.configs}
        assert structural_violations(model, cluster, job, rec) == []


def test_counts(searched):
    model, cluster, job, res = searched
    space = enumerate_space(model, cluster, job)
    assert res.n_evaluated == space.size
    assert 0 < res.n_feasible <= res.n_evaluated
    assert res.n_feasible == int(res.evaluated[0].metrics["fits"].sum())
    assert res.rejected["does not fit in GPU memory"] == res.n_evaluated - res.n_feasible
    assert res.search_time_s > 0


def test_best_first(searched):
    *_, res = searched
    t = res.candidates["tokens_per_s_per_gpu"].to_numpy()
    assert np.all(np.diff(t) <= 0)
    fits = res.evaluated[0].metrics["fits"]
    assert t[0] == pytest.approx(res.evaluated[0].metrics["tokens_per_s_per_gpu"][fits].max())


def test_chunked_evaluation_equals_one_batch(monkeypatch):
    """The search sorts its configurations by ZeRO stage and CP kind and costs them in chunks, each
    skipping the collectives no row of it runs: the same numbers as one step_costs call over the whole
    space in its own order, on a space holding every ZeRO stage, ZeRO++ and both CP kinds."""
    import importlib

    from perfmodel.search.space import PARALLEL_KEYS, ZEROPP_KEYS, expand_zeropp
    from perfmodel.step import step_costs

    engine = importlib.import_module("perfmodel.search.engine")

    model, cluster, job = setup("gpt3-13b", "v100-sxm3-32gb", 128, 16, 512, 4096, "deepspeed")
    space = expand_zeropp(enumerate_space(model, cluster, job), cluster, job.framework)
    c = space.configs
    assert {0, 1, 2, 3} <= set(np.unique(c["zero_stage"])) and set(np.unique(c["cp_ulysses"])) == {0, 1}
    monkeypatch.setattr(engine, "CHUNK", 64)  # many chunks, most of one kind, some mixed
    assert space.size > 10 * engine.CHUNK
    template = template_inputs(model, cluster, job.for_gpu(cluster.gpu), None)
    keep = ("iteration_time_s", "memory_gib", "fits", "dp_comm_s", "cp_comm_s")
    got = evaluate(template, c, keep=keep)
    want = step_costs({**template, **{k: c[k].astype(float) for k in PARALLEL_KEYS + ZEROPP_KEYS}})
    for k in keep:
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)


@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 3), st.sampled_from([64, 128])), min_size=1,
                max_size=60), st.integers(1, 70))
@settings(max_examples=200, deadline=None)
def test_best_first_top_equals_full_sort(rows, top):
    """The top-k selection (a partition, then a sort of the candidates up to the k-th score) gives the first
    k of the full lexicographic sort, ties on score broken by memory then GPUs."""
    score, mem, gpus = (np.array(col, dtype=float) for col in zip(*rows))
    full = np.lexsort((gpus, mem, score))
    np.testing.assert_array_equal(best_first(score, mem, gpus, top), full[:top])
    np.testing.assert_array_equal(best_first(score, mem, gpus, None), full)


def test_rejected_configs_have_reasons():
    model, cluster, job = setup(*CASES[0])
    space = enumerate_space(model, cluster, job)
    assert "tp must divide n_heads" in space.rejected  # 96 heads, tp = 64 is a divisor of 1024
    bad = {"tp": 8, "pp": 16, "dp": 8, "cp": 1, "vpp": 1, "micro_batch": 1, "sp": 1, "zero_stage": 3}
    assert any("ZeRO-2/3" in r for r in structural_violations(model, cluster, job, bad))


def test_python_api_dataframe():
    model, cluster, job = setup(*CASES[2])
    df = pm.search(model, cluster, job, top=10)
    assert list(df.columns[:15]) == ["n_gpus", "tp", "pp", "dp", "cp", "vpp", "micro_batch", "sp", "zero_stage",
                                     "zeropp", "recompute", "iteration_time_s", "tokens_per_s_per_gpu", "mfu",
                                     "memory_gib"]
    assert len(df) == 10
    assert df.attrs["n_feasible"] <= df.attrs["n_evaluated"]
    full = pm.search("llama3-8b", cluster, job)
    assert len(full) == full.attrs["n_feasible"]


def test_objectives_and_pareto():
    model, cluster, job = setup(*CASES[2])
    res = run_search(model, cluster, job, gpu_counts=[16, 32, 64], objective="cost", train_tokens=1e12,
                     usd_per_gpu_hour=2.0, top=5)
    df = res.candidates
    assert set(df["n_gpus"]) <= {16, 32, 64}
    assert np.all(np.diff(df["cost_usd"].to_numpy()) >= -1e-9)
    cost = 1e12 / (df["tokens_per_s_per_gpu"] * df["n_gpus"]) * df["n_gpus"] / 3600 * 2.0
    assert np.allclose(df["cost_usd"], cost)
    front = res.pareto
    assert list(front["n_gpus"]) == sorted(front["n_gpus"])
    assert np.all(np.diff(front["tokens_per_s"].to_numpy()) > 0)
    ttt = run_search(model, cluster, job, gpu_counts=[16, 32, 64], objective="time-to-train", train_tokens=1e12)
    assert ttt.candidates["time_to_train_s"].is_monotonic_increasing
    with pytest.raises(pm.InputError):
        run_search(model, cluster, job, objective="cost")


@pytest.mark.parametrize("objective, extra", [("throughput", {}), ("cost", {"train_tokens": 1e12, "usd_per_gpu_hour": 2.0}),
                                               ("time-to-train", {"train_tokens": 1e12})])
def test_a_multi_count_search_keeps_few_rows_and_ranks_as_the_whole_one(objective, extra):
    """A --gpus-range search kept every configuration of every count to the end (125 counts: 4 GB); it keeps
    the count holding the best row whole and the others' best rows only, and ranks, counts, draws the Pareto
    front and explains as the search that keeps everything (top=None)."""
    model, cluster, job = setup(*CASES[1])
    counts = [64, 128, 256, 512, 1024]
    pruned = run_search(model, cluster, job, gpu_counts=counts, objective=objective, top=5, **extra)
    whole = run_search(model, cluster, job, gpu_counts=counts, objective=objective, top=None, **extra)
    cols = ["n_gpus", "tp", "pp", "dp", "cp", "vpp", "micro_batch", "zero_stage", "recompute", "iteration_time_s",
            "memory_gib", "offload_fraction", "cp_kind"]
    assert pruned.candidates[cols].reset_index(drop=True).equals(whole.candidates[cols].head(5).reset_index(drop=True))
    assert (pruned.n_evaluated, pruned.n_feasible, pruned.rejected) == (whole.n_evaluated, whole.n_feasible,
                                                                        whole.rejected)
    assert pruned.pareto.equals(whole.pareto)
    winner = int(pruned.source_gpu_index[0])
    sizes = [ev.configs["tp"].size for ev in pruned.evaluated]
    assert sizes[winner] == pruned.evaluated[winner].n_valid  # the winner's count is whole (explain reads it)
    assert all(n <= 5 for i, n in enumerate(sizes) if i != winner)
    assert [ev.n_valid for ev in pruned.evaluated] == [ev.n_valid for ev in whole.evaluated]
    from perfmodel.search.explain import explain

    assert explain(pruned, 8, job.framework) == explain(whole, 8, job.framework)


def test_a_json_search_writes_nothing_to_stderr(monkeypatch):
    """The progress line went to stderr under --json (200 KB on a long --gpus-range), where the README says
    stderr stays empty on success; without --json it is shown, throttled, once the search passes a second."""
    import importlib
    import io

    engine = importlib.import_module("perfmodel.search.engine")  # (perfmodel.search is also the API function)
    clock = iter(np.arange(0.0, 1e6, 0.4))  # every call 0.4 s later: past a second at once
    monkeypatch.setattr(engine.time, "perf_counter", lambda: float(next(clock)))
    args = ["recommend", "--model", "llama3-8b", "--gpu", "h100-sxm5-80gb", "--gpus", "64", "--global-batch",
            "256", "--seq-len", "8192", "--gpus-range", "32,64"]
    res = CliRunner().invoke(app, args + ["--json"])
    assert res.exit_code == 0 and res.stderr == ""
    err = io.StringIO()
    monkeypatch.setattr(engine.sys, "stderr", err)
    bar = engine._Progress(3, True, 0.0)  # not a terminal: whole lines, at most one every 5 s
    for _ in range(40):
        bar(8192)
    lines = err.getvalue().splitlines()
    assert 1 <= len(lines) <= 40 * 0.4 / 5 + 1 and lines[0].startswith("searching: ") and "\r" not in err.getvalue()


def test_a_tie_in_time_prefers_no_offloading():
    """Megatron-Kwai's 405B on 16,384 GPUs: five configurations 5.866 s each, offloading 0 to 100% of the
    warm-up activations; 'less memory wins a tie' made the winner offload everything for no gain."""
    score = np.array([1.0, 1.0, 1.0, 2.0])
    mem = np.array([77.4, 44.4, 60.9, 10.0])
    offload = np.array([0.0, 1.0, 0.5, 0.0])
    gpus = np.full(4, 16384.0)
    assert list(best_first(score, mem, gpus, None, offload)) == [0, 2, 1, 3]
    assert list(best_first(score, mem, gpus, 2, offload)) == [0, 2]
    assert list(best_first(score, mem, gpus, None)) == [1, 2, 0, 3]  # without offload: less memory first
    model, cluster, job = pm.load_model("llama3.1-405b"), pm.ClusterSpec.build(pm.load_gpu("h100-sxm5-80gb"),
                                                                               16384, 8), pm.JobSpec(
        global_batch=2048, seq_len=8192, framework="megatron-kwai")
    top = run_search(model, cluster, job, top=5).candidates
    tied = top[top.iteration_time_s == top.iteration_time_s.iloc[0]]
    assert len(tied) > 1 and tied.offload_fraction.is_monotonic_increasing and top.offload_fraction.iloc[0] == 0.0


def test_pareto_front_drops_dominated():
    import pandas as pd

    best = pd.DataFrame({"n_gpus": [8, 16, 32, 64], "tokens_per_s": [10.0, 25.0, 20.0, 40.0]})
    assert list(pareto_front(best)["n_gpus"]) == [8, 16, 64]


# ---- CLI ----------------------------------------------------------------------------------------
BASE = ["recommend", "--model", "llama3-8b", "--gpu", "h100-sxm5-80gb", "--gpus", "64",
        "--global-batch", "256", "--seq-len", "8192"]


def test_cli_json_contract():
    r = runner.invoke(app, BASE + ["--json", "--top", "3"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert isinstance(out["n_evaluated"], int) and isinstance(out["n_feasible"], int)
    assert isinstance(out["search_time_s"], float)
    assert out["n_feasible"] <= out["n_evaluated"]
    assert len(out["top"]) == 3
    for row in out["top"]:
        assert CONTRACT_ROW <= set(row)
        assert isinstance(row["sp"], bool) and isinstance(row["tp"], int) and row["zeropp"] == ""
        assert row["recompute"] in ("none", "selective", "full")
    assert out["top"][0]["tokens_per_s_per_gpu"] >= out["top"][1]["tokens_per_s_per_gpu"]


def test_cli_table_and_explanation():
    r = runner.invoke(app, BASE + ["--top", "4"])
    assert r.exit_code == 0, r.output
    assert "winner vs" in r.stdout
    assert "time breakdown" in r.stdout
    # the header names the precision the search ran in (bf16 when --precision is left out)
    assert ", bf16, " in r.stdout.splitlines()[0]


def test_cli_gpus_range_prints_pareto():
    args = [a for a in BASE if a not in ("--gpus", "64")] + ["--gpus-range", "16,32,64"]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    assert "Pareto" in r.stdout


def test_cli_gpus_joins_the_gpus_range():
    """--gpus beside --gpus-range is one more count of the range (README), not ignored."""
    args = [a for a in BASE if a not in ("--gpus", "64")] + ["--gpus-range", "16,64", "--gpus", "32", "--json"]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    assert sorted(p["n_gpus"] for p in json.loads(r.stdout)["pareto"]) == [16, 32, 64]


def test_cli_nothing_fits_exits_1():
    r = runner.invoke(app, ["recommend", "--model", "gpt-1t", "--gpu", "a100-sxm4-80gb", "--gpus", "8",
                            "--global-batch", "64", "--seq-len", "2048"])
    assert r.exit_code == 1
    assert "no feasible configuration" in r.stderr


@pytest.mark.parametrize("extra,field", [
    (["--top", "0"], "top"),
    (["--objective", "fastest"], "objective"),
    (["--objective", "cost"], "usd_per_gpu_hour"),
    (["--gpus-range", "16,x"], "gpus_range"),
    (["--emit", "jax"], "emit"),
])
def test_cli_bad_input_exits_2(extra, field):
    r = runner.invoke(app, BASE + extra)
    assert r.exit_code == 2, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {field}:")
    assert "Traceback" not in r.output


def test_cli_bad_model_and_gpus_exit_2():
    for args in (["--model", "no-such-model"], ["--gpus", "0"]):
        r = runner.invoke(app, [a for a in BASE] + args)
        assert r.exit_code == 2, r.output
        assert r.stderr.startswith("error: ")


def test_the_common_default_is_named_with_the_tp_it_has():
    """On 2 GPUs the explanation said 'common default (TP=8 in the node ...) does not fit at any PP': its TP
    is the largest of 8, 4, 2, 1 the node and the search have, and a TP with one PP is not 'any PP'."""
    from perfmodel.search.explain import explain

    model, job = pm.load_model("llama3-8b"), pm.JobSpec(global_batch=64, seq_len=8192)
    res = run_search(model, pm.ClusterSpec.build(pm.load_gpu("h100-sxm5-80gb"), 2, 8), job, top=2)
    line = [ln for ln in explain(res, 8) if "common default" in ln]
    assert line and "TP=2 in the node" in line[0] and line[0].endswith("does not fit in memory (PP=1)")


def test_a_price_without_tokens_is_refused():
    """--usd-per-gpu-hour without --train-tokens was accepted and ignored (no cost column, nothing said)."""
    res = CliRunner().invoke(app, ["recommend", "--model", "llama3-8b", "--gpu", "h100-sxm5-80gb", "--gpus", "64",
                                   "--global-batch", "256", "--seq-len", "8192", "--usd-per-gpu-hour", "2"])
    assert res.exit_code == 2 and res.stderr.count("error:") == 1 and "usd_per_gpu_hour: needs --train-tokens" in res.stderr


def test_a_count_of_nan_scores_does_not_keep_the_winner_from_being_whole():
    """A count whose fitting rows all score NaN took the 'best so far' slot (any key compares False against a
    NaN one), so the count holding the real winner was pruned and explain read a pruned count."""
    import importlib

    engine = importlib.import_module("perfmodel.search.engine")

    def ev(n, tps):
        tps = np.asarray(tps, dtype=float)
        size = tps.size
        return engine.Evaluated(n, {"offload_fraction": np.zeros(size), "tp": np.ones(size)},
                                {"tokens_per_s_per_gpu": tps, "memory_gib": np.full(size, 10.0),
                                 "iteration_time_s": np.ones(size), "mfu": np.full(size, 0.4),
                                 "fits": np.ones(size, dtype=bool)}, {})

    job = pm.JobSpec(global_batch=64, seq_len=2048)
    evaluated = [ev(8, [np.nan, np.nan])]
    best = engine._keep_best_whole(evaluated, None, 1, job, "throughput", None, None)
    evaluated.append(ev(16, [100.0, 90.0, 80.0]))
    best = engine._keep_best_whole(evaluated, best, 1, job, "throughput", None, None)
    assert best[0] == 1 and evaluated[1].configs["tp"].size == 3 and evaluated[0].n_valid == 2


def test_a_count_no_parallel_size_can_split_says_so():
    """96 GPUs for Llama 3 70B at 8K tokens and a batch of 512 have no layout: the reason given was the rule
    that rejected most candidates ('tp must divide n_heads'), though the 3 in 96 divides none of the heads (64),
    the layers (80 or 82), the sequence or the batch."""
    from perfmodel.rules import unplaceable_factor

    assert unplaceable_factor(96, 64, 80, 8192, 512, "megatron-lm") == 3
    assert unplaceable_factor(3000, 64, 80, 8192, 512, "megatron-lm") == 75  # pp takes one 5 (80), not two
    assert unplaceable_factor(96, 64, 80, 8192, 512, "deepspeed") is None  # an uneven pipeline of 3 stages
    assert unplaceable_factor(96, 64, 80, 8192, 384, "megatron-lm") is None  # dp takes the 3 (384 = 3 x 128)
    res = CliRunner().invoke(app, ["recommend", "--model", "llama3-70b", "--gpu", "h100-sxm5-80gb", "--gpus", "96",
                                   "--seq-len", "8192", "--global-batch", "512"])
    assert res.exit_code == 1 and "no parallel size can take the factor 3 of 96 GPUs" in res.output


def test_runner_up_on_another_gpu_count_is_compared_per_gpu_second_in_the_objective():
    """An audit: with --gpus-range the winner (64 GPUs) and runner-up (128) were compared in raw step
    seconds ('compute +31 s': the same batch on half the GPUs) and in tokens/s/GPU under --objective cost.
    The parts are now GPU-seconds (step time x GPUs), the gain the objective's own."""
    from perfmodel.search.explain import explain

    model, job = pm.load_model("llama3-70b"), pm.JobSpec(global_batch=512, seq_len=8192)
    cluster = pm.ClusterSpec.build(pm.load_gpu("h100-sxm5-80gb"), 64, 8)
    crossed = 0
    for objective, extra, unit in (("throughput", {}, "tokens/s/GPU"),
                                   ("cost", {"train_tokens": 1e12, "usd_per_gpu_hour": 2.5}, "cost"),
                                   ("time-to-train", {"train_tokens": 1e12}, "time to train")):
        res = run_search(model, cluster, job, gpu_counts=[64, 128], objective=objective, top=5, **extra)
        win, run = res.candidates.iloc[0], res.candidates.iloc[1]
        line = next(ln for ln in explain(res, 8) if ln.startswith("winner vs runner-up"))
        assert f"; {unit}" not in line and f" {unit};" in line
        if objective == "cost":
            assert f"{win['cost_usd'] / run['cost_usd'] - 1.0:+.1%} cost" in line
        if win["n_gpus"] != run["n_gpus"]:
            crossed += 1
            assert "(step time x GPUs)" in line and " s," not in line
            parts = {k: win[k] * win["n_gpus"] - run[k] * run["n_gpus"] for k in ("compute_s", "dp_comm_s", "bubble_s",
                                                                                    "tp_comm_s", "pp_comm_s")}
            top = max(parts, key=lambda k: abs(parts[k]))
            assert f"{top.removesuffix('_s')} {parts[top]:+.3f} GPU-s" in line
    assert crossed >= 2  # throughput and cost: 64 vs 128 GPUs
