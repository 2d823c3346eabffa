"""Pipeline sends cross the scale-out network as soon as the stages span NVLink domains, even when
the stage stride (tp x cp x dp) is smaller than a node: ranks are placed tp-cp-dp-pp, so with 16
GPUs, 8 per node, pp 4 and dp 4, the hop from stage 1 (ranks 4-7) to stage 2 (ranks 8-11) leaves
the node, and the pipeline runs at its slowest hop. Before, that send was costed as NVLink and the
step time did not depend on the network at all."""
from __future__ import annotations

import pytest

import perfmodel


def _pp_comm_s(gpus: int, pp: int, scale_out: float, tp: int = 1) -> float:
    model = perfmodel.load_model("llama3-8b")
    cluster = perfmodel.ClusterSpec.build(perfmodel.load_gpu("h100-sxm5-80gb"), gpus, 8, scale_out)
    par = perfmodel.ParallelSpec(tp=tp, pp=pp, dp=gpus // (tp * pp), micro_batch=1, zero_stage=1, recompute="none")
    job = perfmodel.JobSpec(global_batch=64, seq_len=4096, framework="megatron-lm")
    return perfmodel.estimate(model, cluster, par, job).time_breakdown_s["pp_comm_s"]


def test_a_pipeline_spanning_nodes_pays_the_network_even_with_a_small_stride():
    slow, fast = _pp_comm_s(16, 4, 100.0), _pp_comm_s(16, 4, 3200.0)
    assert slow > 2.0 * fast > 0.0
    # one node: every hop is NVLink, the NIC bandwidth does not matter
    assert _pp_comm_s(8, 4, 100.0) == pytest.approx(_pp_comm_s(8, 4, 3200.0), rel=1e-12)
    # a stride of a whole node (tp 8): every hop crosses, as before
    assert _pp_comm_s(32, 4, 100.0, tp=8) > _pp_comm_s(32, 4, 3200.0, tp=8)
