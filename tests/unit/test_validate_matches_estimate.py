"""One configuration costs the same through `validate` (a runs-CSV row) and `estimate` (specs):
before, estimate kept the catalog GPU's scale-out latency (20 us) while validate used the
calibrated one (e.g. 134 us on H100), so a multi-node job's two predictions differed."""
from __future__ import annotations

import pandas as pd
import pytest

import perfmodel
from perfmodel.validate import predict_runs

# fully stated rows: nothing is left to a runs default
ROWS = [
    dict(n_layers=32, hidden_size=4096, ffn_hidden_size=14336, n_heads=32, n_kv_heads=8, vocab_size=128256,
         seq_len=8192, mlp="swiglu", tied_embeddings=0, gpu="h100-sxm5-80gb", n_gpus=32, gpus_per_node=8,
         scale_out_gbit_per_s_per_node=3200, tp=2, pp=2, dp=8, cp=1, vpp=2, sp=1, zero_stage=1, micro_batch=1,
         global_batch=64, recompute="selective", precision="bf16", framework="megatron-lm"),
    dict(n_layers=24, hidden_size=2048, ffn_hidden_size=8192, n_heads=16, n_kv_heads=16, vocab_size=50304,
         seq_len=2048, mlp="gelu", tied_embeddings=1, gpu="a100-sxm4-80gb", n_gpus=64, gpus_per_node=8,
         scale_out_gbit_per_s_per_node=1600, tp=1, pp=1, dp=64, cp=1, vpp=1, sp=0, zero_stage=3, micro_batch=4,
         global_batch=512, recompute="none", precision="bf16", framework="torchtitan"),
    dict(n_layers=80, hidden_size=8192, ffn_hidden_size=28672, n_heads=64, n_kv_heads=8, vocab_size=128256,
         seq_len=4096, mlp="swiglu", tied_embeddings=0, gpu="h100-sxm5-80gb", n_gpus=128, gpus_per_node=8,
         scale_out_gbit_per_s_per_node=400, network="EFA", tp=8, pp=4, dp=4, cp=1, vpp=5, sp=1, zero_stage=1,
         micro_batch=1, global_batch=256, recompute="none", precision="bf16", framework="nanotron"),
]


def _estimate(r: dict) -> perfmodel.Estimate:
    model = perfmodel.ModelSpec(name="m", n_layers=r["n_layers"], hidden_size=r["hidden_size"],
                                ffn_hidden_size=r["ffn_hidden_size"], n_heads=r["n_heads"], n_kv_heads=r["n_kv_heads"],
                                vocab_size=r["vocab_size"], mlp=r["mlp"], tied_embeddings=bool(r["tied_embeddings"]))
    cluster = perfmodel.ClusterSpec.build(perfmodel.load_gpu(r["gpu"]), r["n_gpus"], r["gpus_per_node"],
                                          r["scale_out_gbit_per_s_per_node"], network=r.get("network"))
    par = perfmodel.ParallelSpec(tp=r["tp"], pp=r["pp"], dp=r["dp"], cp=r["cp"], vpp=r["vpp"], sp=bool(r["sp"]),
                                 zero_stage=r["zero_stage"], micro_batch=r["micro_batch"], recompute=r["recompute"])
    job = perfmodel.JobSpec(global_batch=r["global_batch"], seq_len=r["seq_len"], precision=r["precision"],
                            framework=r["framework"])
    return perfmodel.estimate(model, cluster, par, job)


@pytest.mark.parametrize("row", ROWS, ids=lambda r: f"{r['framework']}-{r['n_gpus']}")
def test_validate_costs_a_stated_row_as_estimate_costs_its_specs(row):
    df = pd.DataFrame([{"run_id": "x-001", **row}])
    pred = predict_runs(df)
    assert pred["status"][0] == "ok", pred["reason"][0]
    est = _estimate(row)
    assert pred["pred_iteration_time_s"][0] == pytest.approx(est.iteration_time_s, rel=1e-9)
    assert pred["pred_memory_gib"][0] == pytest.approx(est.memory_gib, rel=1e-9)


def test_a_stated_scale_out_latency_is_kept_and_the_default_is_the_calibrated_one():
    """ClusterSpec.build records whether the latency was given: a given 20 us is the user's (even when
    it equals the catalog value), a missing one is the calibrated GPU's or fabric's."""
    from perfmodel.calibration_profile import load_calibration
    from perfmodel.estimate import build_inputs

    row = ROWS[0]
    gpu = perfmodel.load_gpu(row["gpu"])
    model = perfmodel.load_model("llama3-8b")
    par = perfmodel.ParallelSpec(tp=2, pp=2, dp=8, micro_batch=1)
    job = perfmodel.JobSpec(global_batch=64, seq_len=8192)
    default = perfmodel.ClusterSpec.build(gpu, 32, 8, 3200)
    stated = perfmodel.ClusterSpec.build(gpu, 32, 8, 3200, scale_out_latency_us=gpu.scale_out_latency_us)
    shipped = load_calibration(None)
    # a calibration with a per-GPU latency of its own (a user's nccl-tests fit without --network; the shipped
    # profile keeps its fabrics' latencies with the fabrics)
    cal = shipped.model_copy(update={"gpus": {**shipped.gpus, gpu.name: {**shipped.gpus.get(gpu.name, {}),
                                                                          "scale_out_latency_us": 77.0}}})
    calibrated_us = cal.for_network(gpu, None)[1].scale_out_latency_us
    assert not default.scale_out_latency_stated and stated.scale_out_latency_stated
    assert build_inputs(model, default, par, job, cal)["inter_latency_s"] == pytest.approx(calibrated_us * 1e-6)
    assert build_inputs(model, stated, par, job, cal)["inter_latency_s"] == pytest.approx(
        gpu.scale_out_latency_us * 1e-6)
    assert calibrated_us == 77.0 != gpu.scale_out_latency_us
