"""Long context (issue 7): balanced recompute, activation offloading, Ulysses vs ring CP."""
import numpy as np
import pytest

import perfmodel as pm
from perfmodel.costs.memory import (
    RECOMPUTE_BALANCED, RECOMPUTE_NONE, activation_bytes_per_layer, in_flight_layers, offloaded_layers,
)

S, B, H, FFN, A = 8192, 1, 8192, 28672, 64


def act(rc, tp=8, sp=1, kv=8):
    return float(activation_bytes_per_layer(S, B, H, FFN, A, kv, 3, tp, sp, rc, 1, 0))


@pytest.mark.parametrize("tp,sp", [(1, 0), (4, 0), (8, 1)])
def test_balanced_drops_norm_outputs_and_mlp_activation(tp, sp):
    """ATC'24 'ours': the two norm outputs (4 s b h, /t with SP) and the activation output
    (2 s b ffn / t) are recomputed, nothing else changes."""
    sp_div = tp if sp else 1
    expected = 4.0 * S * B * H / sp_div + 2.0 * S * B * FFN / tp
    assert act(RECOMPUTE_NONE, tp, sp) - act(RECOMPUTE_BALANCED, tp, sp) == pytest.approx(expected, rel=1e-12)


def test_offload_moves_share_of_warmup_activations():
    L, p, m = 80, 8, 64
    assert float(offloaded_layers(L, p, 1, m, 0.0)) == 0.0
    full = float(offloaded_layers(L, p, 1, m, 1.0))
    assert full == pytest.approx(float(in_flight_layers(L, p, 1, m)) - L / p)
    assert float(offloaded_layers(L, p, 1, m, 0.5)) == pytest.approx(full / 2)


def _llama70b(n=64):
    model = pm.load_model("llama3-70b")
    cluster = pm.ClusterSpec.build(pm.load_gpu("h100-sxm5-80gb"), n)
    return model, cluster


def test_offload_lowers_memory_and_costs_time_only_when_copies_outrun_compute():
    model, cluster = _llama70b()
    job = pm.JobSpec(global_batch=64, seq_len=8192, framework="megatron-kwai")
    base = pm.ParallelSpec(tp=8, pp=8, dp=1, vpp=1, recompute="balanced")
    mems, offs = [], []
    for alpha in (0.0, 0.25, 0.5):  # first stage still the peak (at alpha=1 the last stage, with logits, is)
        est = pm.estimate(model, cluster, base.model_copy(update={"offload_fraction": alpha}), job)
        mems.append(est.memory_breakdown_gib["activations_gib"])
        offs.append(est.time_breakdown_s["offload_s"])
    assert mems[0] > mems[1] > mems[2]
    assert mems[0] - mems[1] == pytest.approx(mems[1] - mems[2], rel=1e-9)  # linear in alpha (README Fig. 7)
    assert offs[0] == 0.0 and offs[2] >= offs[1] >= 0.0


def test_ulysses_needs_heads_divisible_and_costs_all_to_all():
    model, cluster = _llama70b(64)
    job = pm.JobSpec(global_batch=8, seq_len=65536, framework="megatron-lm")
    # 64 query / 8 key-value heads: tp 2 leaves 4 K/V heads per rank for the all-to-all over cp 4
    ring = pm.estimate(model, cluster, pm.ParallelSpec(tp=2, cp=4, dp=8, recompute="full"), job)
    uly = pm.estimate(model, cluster, pm.ParallelSpec(tp=2, cp=4, dp=8, recompute="full", cp_kind="ulysses"), job)
    assert uly.time_breakdown_s["cp_comm_s"] > 0
    assert ring.memory_gib == pytest.approx(uly.memory_gib)
    with pytest.raises(pm.InputError) as exc:  # 64 heads / tp 8 = 8 per rank: cp 16 does not divide
        pm.estimate(pm.load_model("llama3-70b"), pm.ClusterSpec.build(pm.load_gpu("h100-sxm5-80gb"), 128),
                    pm.ParallelSpec(tp=8, cp=16, dp=1, cp_kind="ulysses"), job)
    assert exc.value.field == "cp"
    with pytest.raises(pm.InputError) as exc:  # 8 query heads per rank, but 1 K/V head: cp 8 cannot split it
        pm.estimate(model, cluster, pm.ParallelSpec(tp=8, cp=8, dp=1, cp_kind="ulysses"), job)
    assert exc.value.field == "cp" and "key/value" in exc.value.rule


def test_offload_needs_three_stages():
    model, cluster = _llama70b()
    job = pm.JobSpec(global_batch=64, seq_len=8192, framework="megatron-kwai")
    with pytest.raises(pm.InputError) as exc:
        pm.estimate(model, cluster, pm.ParallelSpec(tp=8, pp=2, dp=4, offload_fraction=0.5), job)
    assert exc.value.field == "offload_fraction"


def test_long_sequence_recommendation_uses_context_parallelism():
    """Issue 7: llama3-70b on 256 H100s, 32 x 131072 tokens: a configuration that fits, with cp >= 2."""
    model, cluster = _llama70b(256)
    job = pm.JobSpec(global_batch=32, seq_len=131072, framework="megatron-lm")
    df = pm.search(model, cluster, job, top=5)
    assert len(df) > 0
    assert int(df.iloc[0]["cp"]) >= 2
    assert df.iloc[0]["memory_gib"] <= cluster.gpu.hbm_capacity_gib
    assert np.all(df["memory_gib"] <= cluster.gpu.hbm_capacity_gib)


def test_gradients_and_zero_shards_span_dp_times_cp():
    """CP ranks hold the same weights and see different tokens: gradients are reduced, and ZeRO
    shards, over dp x cp ranks (Megatron-Core get_data_parallel_group(with_context_parallel=True),
    torchtitan FSDP over dp_shard_cp). dp = 2, cp = 4 shards the optimizer like dp = 8; dp = 1 with
    cp = 8 still reduces gradients and can shard (torchtitan's 262K-token Llama 3.1 8B run)."""
    model = pm.load_model("llama3-8b")
    cluster = pm.ClusterSpec.build(pm.load_gpu("h100-sxm5-80gb"), 8, 8)
    job = pm.JobSpec(global_batch=8, seq_len=32768, framework="torchtitan")

    def est(**par):
        return pm.estimate(model, cluster, pm.ParallelSpec(recompute="full", **par), job)

    cp_dp = est(dp=2, cp=4, zero_stage=1)
    dp_only = est(dp=8, zero_stage=1)
    assert cp_dp.memory_breakdown_gib["optimizer_gib"] == pytest.approx(dp_only.memory_breakdown_gib["optimizer_gib"])
    ds = job.model_copy(update={"framework": "deepspeed"})  # ZeRO-3 gathers not overlapped
    ds_z3 = pm.estimate(model, cluster, pm.ParallelSpec(dp=1, cp=8, zero_stage=3, recompute="full"), ds)
    assert ds_z3.time_breakdown_s["dp_comm_s"] > 0
    z0, z3 = est(dp=1, cp=8, zero_stage=0), est(dp=1, cp=8, zero_stage=3)
    assert z3.memory_breakdown_gib["optimizer_gib"] == pytest.approx(z0.memory_breakdown_gib["optimizer_gib"] / 8)
    assert z3.memory_gib < z0.memory_gib
