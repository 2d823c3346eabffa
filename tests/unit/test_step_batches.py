"""A configuration costs the same alone and inside any batch.

``step_costs`` skips a term no element of its batch needs (the ZeRO-3 gathers, the all-reduce, the
reduce-scatter or the parameter all-gather of data parallelism, the ring or the Ulysses exchange of
context parallelism), so the search can cost a chunk of one kind without the others' collectives. A
guard that read the wrong elements would cost a configuration differently in a mixed batch (every
term on) and alone (only its own terms): this test compares the two for every ZeRO stage, both CP
kinds and both ways of running ZeRO-1 (reduce-scatter, or nanotron's all-reduce).
"""
from __future__ import annotations

import numpy as np
import pytest

import perfmodel
from perfmodel.estimate import build_inputs
from perfmodel.step import MEMORY_PARTS, TIME_PARTS, stack_inputs, step_costs

COLUMNS = TIME_PARTS + MEMORY_PARTS + ("iteration_time_s", "memory_gib")


def _rows() -> list[tuple[str, dict]]:
    model = perfmodel.load_model("llama3-8b")
    cluster = perfmodel.ClusterSpec.build(perfmodel.load_gpu("h100-sxm5-80gb"), 64, 8)
    out = []
    for framework in ("megatron-lm", "nanotron"):  # ZeRO-1 as reduce-scatter + all-gather; as all-reduce
        job = perfmodel.JobSpec(global_batch=256, seq_len=8192, framework=framework)
        for zero in (0, 1, 2, 3):
            for cp, kind in ((1, "ring"), (2, "ring"), (2, "ulysses")):
                par = perfmodel.ParallelSpec(tp=2, pp=1, dp=32 // cp, cp=cp, cp_kind=kind, micro_batch=1, sp=True,
                                             zero_stage=zero)
                row = build_inputs(model, cluster, par, job)
                # a slow NVLink (2 GB/s): the ring's exchange outlasts the attention it hides behind
                out.append((f"{framework} zero {zero} cp {cp} {kind}", {**row, "nvlink_bytes_per_s": 2e9}))
    return out


ROWS = _rows()


def test_alone_equals_in_a_mixed_batch():
    mixed = step_costs(stack_inputs([r for _, r in ROWS]))
    for i, (name, row) in enumerate(ROWS):
        alone = step_costs(stack_inputs([row]))
        for k in COLUMNS:
            assert alone[k][0] == pytest.approx(mixed[k][i], rel=1e-12, abs=1e-15), (name, k)


@pytest.mark.parametrize("i", range(len(ROWS)), ids=[n for n, _ in ROWS])
def test_every_configuration_pays_its_own_data_parallel_traffic(i):
    """Alone, each configuration's dp x cp = 32 ranks exchange gradients (and gather weights): never 0."""
    name, row = ROWS[i]
    row = {**row, "dp_overlap": 0.0, "param_gather_overlap": 0.0, "zero3_overlap": 0.0}  # nothing hidden
    alone = step_costs(stack_inputs([row]))
    assert alone["dp_comm_s"][0] > 0.0, name
    if row["cp"] > 1:
        assert alone["cp_comm_s"][0] > 0.0, name
    assert np.isfinite(alone["iteration_time_s"][0])


def test_outputs_keep_the_batch_shape_where_a_skipped_term_varies():
    """An input that only a skipped term reads (ZeRO-3's overlap in a batch without ZeRO-3, an op-specific
    fabric value of a collective no row runs) still sets the outputs' shape: the broadcast of every input."""
    name, row = next((n, r) for n, r in ROWS if r["zero_stage"] == 0 and r["cp"] == 1)
    x = {k: np.asarray(v, dtype=float) for k, v in stack_inputs([row]).items()}
    x = {k: v.reshape(()) for k, v in x.items()}  # one configuration as scalars
    x["zero3_overlap"] = np.array([0.1, 0.5, 0.9])
    x["all_to_all.nic_bytes_per_s_per_gpu"] = np.full((2, 1), 1e9)
    out = step_costs(x)
    alone = step_costs({k: v for k, v in x.items() if k != "all_to_all.nic_bytes_per_s_per_gpu"} | {
        "zero3_overlap": np.asarray(0.1)})
    for k in COLUMNS:
        assert np.shape(out[k]) == (2, 3), (name, k)
        assert np.all(out[k] == alone[k]), (name, k)
