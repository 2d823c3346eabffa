"""The busiest pipeline stage: even / first-stages-heavier splits and nanotron's cost-balanced split."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfmodel.costs.pipeline_split import cost_balanced_busiest_stage, fill_drain_stage_s, uneven_busiest_stage


def nanotron_split(n_layers, pp, layer_units, head_units):
    """nanotron build_model's greedy split, block by block as its loop does: (layers, has_head) per rank."""
    costs = [layer_units] * n_layers + [head_units]
    cumulative = np.cumsum(costs)
    thresholds = [cumulative[-1] * ((r + 1) / pp) for r in range(pp)]
    ranks = [[0, 0] for _ in range(pp)]
    r = 0
    for i, cum in enumerate(cumulative):
        if i < n_layers:
            ranks[r][0] += 1
        else:
            ranks[r][1] = 1
        if cum > thresholds[r]:
            r += 1
    return ranks


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 130), st.sampled_from([1, 2, 3, 4, 6, 8, 12, 16, 32]), st.integers(1, 50),
       st.integers(0, 400), st.floats(0.1, 3.0), st.floats(0.0, 10.0))
def test_cost_balanced_split_matches_nanotrons_loop(n_layers, pp, layer_units, head_units, layer_s, head_s):
    """Integer block costs, as nanotron's (4 h^2 + 3 ffn h, V h); thresholds in nanotron's operand
    order, total * ((rank + 1) / pp), so exact ties compare the same way."""
    ranks = nanotron_split(n_layers, pp, layer_units, head_units)
    times = [k * layer_s + head * head_s for k, head in ranks]
    layers, head = cost_balanced_busiest_stage(n_layers, pp, layer_units, head_units, layer_s, head_s)
    assert float(layers) * layer_s + float(head) * head_s == pytest.approx(max(times), rel=1e-9, abs=1e-12)
    assert sum(k for k, _ in ranks) == n_layers


def test_cost_balanced_split_vectorizes():
    L, pp = np.array([16, 32, 80, 16]), np.array([8, 8, 32, 1])
    layers, head = cost_balanced_busiest_stage(L, pp, 1.0, 4.0, 1.0, 4.0)
    for i in range(len(L)):
        one = cost_balanced_busiest_stage(L[i], pp[i], 1.0, 4.0, 1.0, 4.0)
        assert (float(layers[i]), float(head[i])) == (float(one[0]), float(one[1]))
    # nanotron 1B-like: 16 layers, a head worth 4 layers, pp 8 -> the head gets a stage of its own
    assert (float(layers[0]), float(head[0])) == (0.0, 1.0)
    assert (float(layers[3]), float(head[3])) == (16.0, 1.0)  # no pipeline: everything on one stage


@pytest.mark.parametrize("n_layers,pp,head_s,expect", [
    (70, 12, 1.5, (5, 1)),    # BLOOM: [embed | 5] [6] ... [5 | head]; the head stage is the busiest
    (70, 12, 0.5, (6, 0)),    # light head: a 6-layer stage sets the pace
    (126, 8, 0.6, (16, 0)),   # Llama-3.1 405B with embedding/loss accounting: 16 in the middle, 15 + head last
    (126, 8, 1.6, (15, 1)),
    (96, 8, 0.6, (12, 1)),    # even split: every stage 12 layers, the last one with the head
])
def test_uneven_split_last_stage_runs_floor_layers_and_the_head(n_layers, pp, head_s, expect):
    layers, head = uneven_busiest_stage(n_layers, pp, 1.0, head_s)
    assert (float(layers), float(head)) == expect


def _nanotron_1b(pp, vocab, framework="nanotron"):
    import perfmodel as pm

    model = pm.ModelSpec(name="n1b", n_layers=16, hidden_size=2048, ffn_hidden_size=8192, n_heads=32, n_kv_heads=32,
                         vocab_size=vocab, mlp="swiglu", tied_embeddings=True)
    cluster = pm.ClusterSpec.build(pm.load_gpu("h100-sxm5-80gb"), pp)
    job = pm.JobSpec(global_batch=32, seq_len=4096, framework=framework)
    return pm.estimate(model, cluster, pm.ParallelSpec(tp=1, pp=pp, dp=1, micro_batch=1), job)


def test_nanotron_split_moves_the_loss_off_the_heads_rank_and_fills_some_stages_more():
    """16 layers and a 128K-vocabulary head worth 4 layers: at pp 8 the head gets rank 6 of its own
    and the loss rank 7, so every micro-batch's logits cross one more link; at pp 4 rank 0 holds 5
    layers, more than ceil(16 / 4), which the memory counts."""
    big, small = _nanotron_1b(8, 131072), _nanotron_1b(8, 1024)
    assert big.time_breakdown_s["pp_comm_s"] > 5.0 * small.time_breakdown_s["pp_comm_s"]
    nano, generic = _nanotron_1b(4, 131072), _nanotron_1b(4, 131072, framework="generic")
    assert nano.memory_breakdown_gib["weights_gib"] > generic.memory_breakdown_gib["weights_gib"]


def flow_shop_makespan(stage_s, m):
    """m identical micro-batches through the stages in order, each stage one at a time:
    C[j][k] = max(C[j - 1][k], C[j][k - 1]) + t_k, the schedule simulated step by step."""
    done = [0.0] * len(stage_s)
    for _ in range(m):
        prev = 0.0
        for k, t in enumerate(stage_s):
            done[k] = max(done[k], prev) + t
            prev = done[k]
    return done[-1]


@settings(max_examples=300, deadline=None)
@given(st.integers(2, 130), st.sampled_from([2, 3, 4, 6, 8, 12, 16, 24, 48]), st.floats(0.1, 3.0),
       st.floats(0.0, 10.0), st.integers(1, 64))
def test_bubble_pace_matches_a_simulated_pipeline_of_unequal_stages(n_layers, pp, layer_s, head_s, m):
    """m busiest-stage slots plus (pp - 1) slots at fill_drain_stage_s is the simulated makespan of the
    split (the last stage floor(L / pp) layers and the head, the others up to ceil(L / pp))."""
    if pp > n_layers:
        return
    lo, hi = n_layers // pp, -(-n_layers // pp)
    heavy = n_layers - lo - (pp - 1) * lo  # stages before the last that take ceil(L / pp) layers
    stages = [hi] * heavy + [lo] * (pp - 1 - heavy) + [lo]
    assert sum(stages) == n_layers and max(stages) <= hi
    stage_s = [k * layer_s for k in stages]
    stage_s[-1] += head_s
    layers, head = uneven_busiest_stage(n_layers, pp, layer_s, head_s)
    busy = float(layers) * layer_s + float(head) * head_s
    assert busy == pytest.approx(max(stage_s), rel=1e-12)
    fill = float(fill_drain_stage_s(n_layers, pp, layer_s, head_s, busy))
    assert m * busy + (pp - 1) * fill == pytest.approx(flow_shop_makespan(stage_s, m), rel=1e-9)


def test_bubble_of_equal_stages_is_the_narayanan_bubble_and_a_head_or_lighter_stages_shorten_it():
    assert fill_drain_stage_s(96, 8, 1.0, 0.0, 12.0) == pytest.approx(12.0)   # (p - 1) t
    assert fill_drain_stage_s(96, 8, 1.0, 3.0, 15.0) == pytest.approx(12.0)   # the head is on one stage
    # BLOOM's 72 layers over 48 stages: 2-layer stages set the pace, the fill runs at (72 - 2) / 47
    assert fill_drain_stage_s(72, 48, 1.0, 0.0, 2.0) == pytest.approx(70.0 / 47.0)
    assert fill_drain_stage_s(72, 1, 1.0, 0.5, 72.5) == pytest.approx(72.5)
