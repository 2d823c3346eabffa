"""The busiest pipeline stage: even / first-stages-heavier splits and nanotron's cost-balanced split."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfmodel.costs.pipeline_split import cost_balanced_busiest_stage, uneven_busiest_stage


def nanotron_split(n_layers, pp, layer_units, head_units):
    """nanotron build_model's greedy split, block by block as its loop does: (layers, has_head) per rank."""
    costs = [layer_units] * n_layers + [head_units]
    cumulative = np.cumsum(costs)
    thresholds = [cumulative[-1] * (r + 1) / pp for r in range(pp)]
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
    """nanotron's block costs are whole numbers (4 h^2 + 3 ffn h, V h), so ties compare exactly."""
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
