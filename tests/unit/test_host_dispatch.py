"""The host's dispatch time per layer (``layer_overhead_s``) is a floor under a layer's kernel time.

PyTorch enqueues CUDA kernels and returns before they run ("CUDA semantics: asynchronous execution"), so
the host runs ahead of a layer whose kernels take longer than its dispatch, and the GPU waits on the host
only where the kernels are shorter. A layer's forward takes max(kernels, host / 3), its backward
max(kernels, 2 host / 3). Before 2026-12-02 the host time was added to every layer whatever its kernels,
which charged a large micro-batch's long layers for launches the GPU never waits on.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import perfmodel
from perfmodel.estimate import build_inputs
from perfmodel.step import stack_inputs, step_costs


def _row(model: str, micro_batch: int, seq_len: int, host_s: float) -> dict:
    cluster = perfmodel.ClusterSpec.build(perfmodel.load_gpu("h100-sxm5-80gb"), 8, 8)
    job = perfmodel.JobSpec(global_batch=8 * micro_batch * 4, seq_len=seq_len, framework="nanotron")
    par = perfmodel.ParallelSpec(tp=1, pp=1, dp=8, micro_batch=micro_batch, sp=False, zero_stage=0,
                                 recompute="none")
    return {**build_inputs(perfmodel.load_model(model), cluster, par, job), "layer_overhead_s": host_s}


def _compute_s(row: dict) -> float:
    return float(step_costs(stack_inputs([row]))["compute_s"][0])


def test_long_layers_hide_the_host():
    """Llama-3 8B, 8 x 8K tokens a micro-batch: each layer's kernels take tens of milliseconds, so a 3 ms
    host dispatch per layer costs nothing (it added 32 layers x 4 micro-batches x 3 ms = 0.38 s before)."""
    without = _compute_s(_row("llama3-8b", 8, 8192, 0.0))
    with_host = _compute_s(_row("llama3-8b", 8, 8192, 3e-3))
    assert with_host == without


def test_short_layers_wait_on_the_host():
    """GPT-3 1.3B, one 128-token sequence a micro-batch: the kernels of a layer take microseconds, so the
    layer takes the host's 3 ms (1 ms forward, 2 ms backward) and the step its layers x micro-batches x 3 ms."""
    row = _row("gpt3-1.3b", 1, 128, 3e-3)
    layers, n_micro = row["n_layers"], row["global_batch"] / (row["dp"] * row["micro_batch"])
    kernels = _compute_s({**row, "layer_overhead_s": 0.0})
    assert kernels < 0.2 * layers * n_micro * 3e-3  # the kernels alone are far shorter
    # every layer at the host's pace: what is left is the head's logits (no host floor there)
    head_s = _compute_s({**_row("gpt3-1.3b", 1, 128, 0.0), "n_layers": 0.0})
    assert _compute_s(row) == pytest.approx(layers * n_micro * 3e-3 + head_s, rel=1e-9)


@settings(max_examples=40, deadline=None)
@given(host_ms=st.floats(0.0, 20.0), more_ms=st.floats(0.0, 20.0), mb=st.sampled_from([1, 2, 8]),
       seq=st.sampled_from([128, 1024, 8192]))
def test_more_host_time_is_never_faster_and_never_more_than_added(host_ms, more_ms, mb, seq):
    """The step grows with the host's time, by at most the extra host time of every layer and micro-batch."""
    a = _row("llama3-8b", mb, seq, host_ms * 1e-3)
    b = {**a, "layer_overhead_s": (host_ms + more_ms) * 1e-3}
    ta, tb = (float(step_costs(stack_inputs([r]))["iteration_time_s"][0]) for r in (a, b))
    n_micro = a["global_batch"] / (a["dp"] * a["micro_batch"])
    assert ta <= tb <= ta + a["n_layers"] * n_micro * more_ms * 1e-3 * (1 + 1e-9) + 1e-12
    assert np.isfinite(tb)
