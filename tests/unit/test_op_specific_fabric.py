"""A fabric's per-collective calibration (``networks.<fabric>.<op>.<key>``, what ``perfmodel calibrate
--nccl-tests`` fits per op) prices that collective in the step model too, as ``perfmodel comm`` does:
before, the step costed every collective with the fabric's op-less values (Slingshot: a 1 GiB all-gather
on 2,160 A100s 38 ms in a step against 86 ms in ``comm``)."""
from __future__ import annotations

import pandas as pd
import pytest

import perfmodel as pm
from perfmodel.calibrate.comm import collective_inputs, collective_time
from perfmodel.calibration_profile import Calibration, load_calibration
from perfmodel.estimate import build_inputs
from perfmodel.validate import predict_runs

SLOW_GATHER = Calibration(networks={"testnet": {"nic_efficiency": 0.7, "all_gather.nic_efficiency": 0.1}})


def _estimate(zero, cal, network="testnet"):
    model = pm.load_model("llama3-8b")
    cluster = pm.ClusterSpec.build(pm.load_gpu("h100-sxm5-80gb"), 64, 8, 400.0, network=network)
    return pm.estimate(model, cluster, pm.ParallelSpec(tp=1, pp=1, dp=64, zero_stage=zero),
                       pm.JobSpec(global_batch=128, seq_len=4096), cal)


def test_an_all_gather_of_its_own_slows_zero3_and_not_plain_data_parallelism():
    slow3, plain3 = _estimate(3, SLOW_GATHER), _estimate(3, Calibration(networks={"testnet": {"nic_efficiency": 0.7}}))
    assert slow3.time_breakdown_s["dp_comm_s"] > 2 * plain3.time_breakdown_s["dp_comm_s"]
    slow0 = _estimate(0, SLOW_GATHER)
    plain0 = _estimate(0, Calibration(networks={"testnet": {"nic_efficiency": 0.7}}))
    assert slow0.iteration_time_s == pytest.approx(plain0.iteration_time_s)  # all-reduce only


def test_the_step_inputs_carry_the_op_values_and_validate_agrees_with_estimate():
    model, job = pm.load_model("llama3-8b"), pm.JobSpec(global_batch=128, seq_len=4096)
    cluster = pm.ClusterSpec.build(pm.load_gpu("h100-sxm5-80gb"), 64, 8, 400.0, network="testnet")
    x = build_inputs(model, cluster, pm.ParallelSpec(dp=64, zero_stage=3), job, SLOW_GATHER)
    assert x["all_gather.nic_bytes_per_s_per_gpu"] == pytest.approx(x["nic_bytes_per_s_per_gpu"] / 7.0)
    assert not any(k.startswith("all_reduce.") for k in x)  # all-reduce is the op-less fit
    row = dict(run_id="t-001", n_layers=32, hidden_size=4096, ffn_hidden_size=14336, n_heads=32, n_kv_heads=8,
               vocab_size=128256, seq_len=4096, mlp="swiglu", tied_embeddings=0, gpu="h100-sxm5-80gb", n_gpus=64,
               gpus_per_node=8, scale_out_gbit_per_s_per_node=400.0, network="testnet", tp=1, pp=1, dp=64, cp=1,
               zero_stage=3, micro_batch=1, global_batch=128, recompute="none", precision="bf16", framework="generic")
    other = dict(row, run_id="t-002", network="")  # a fabric without op values in the same batch
    pred = predict_runs(pd.DataFrame([row, other]), SLOW_GATHER)
    est = pm.estimate(model, cluster, pm.ParallelSpec(dp=64, zero_stage=3, recompute="none"),
                      pm.JobSpec(global_batch=128, seq_len=4096, framework="generic"), SLOW_GATHER)
    assert pred.pred_iteration_time_s[0] == pytest.approx(est.iteration_time_s, rel=1e-9)
    assert pred.pred_iteration_time_s[1] < pred.pred_iteration_time_s[0]


def test_shipped_slingshot_all_gather_matches_comm():
    """The shipped Polaris fit has per-op values: a ZeRO-3 step's all-gather over a whole 4-GPU-node job is
    the collective ``perfmodel comm`` prices."""
    cal = load_calibration(None)
    gpu = pm.load_gpu("a100-sxm4-40gb")
    x = build_inputs(pm.load_model("llama3-8b"), pm.ClusterSpec.build(gpu, 64, 4, 800.0, network="slingshot"),
                     pm.ParallelSpec(dp=64, zero_stage=3), pm.JobSpec(global_batch=128, seq_len=4096), cal)
    ref = collective_inputs(gpu, 64, 4, 800.0, "slingshot", "all_gather", cal)
    for key in ("nic_bytes_per_s_per_gpu", "inter_latency_s", "ring_inter_node"):
        assert x.get(f"all_gather.{key}", x[key]) == pytest.approx(ref[key]), key
    assert float(collective_time("all_gather", 2**30, 64, ref)) > 0
