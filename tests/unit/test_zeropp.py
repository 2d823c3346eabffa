"""ZeRO-3 / ZeRO++ formulas (Wang et al. 2023, arXiv 2306.10209; DeepSpeed's implementation)."""
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

import perfmodel as pm
from perfmodel.cli import app
from perfmodel.costs.comm import members_per_domain, op_factor
from perfmodel.deepspeed_config import parse_deepspeed_config
from perfmodel.errors import InputError
from perfmodel.estimate import build_inputs
from perfmodel.search.engine import run_search
from perfmodel.search.space import HPZ_MEMORY_REASON
from perfmodel.step import step_costs
from perfmodel.units import GIB_BYTES
from perfmodel.zeropp import (
    cross_node_volume_bytes, hpz_secondary_bytes, layer_weight_numels, qgz_active, zero3_microbatch,
)

GPN = 16.0  # DGX-2: 16 GPUs per NVLink domain


def cross_node_bytes(op, size, n, stride):
    """Bytes one GPU sends over its NIC in the two-tier model (no time, no latency)."""
    n = np.asarray(n, dtype=float)
    k = members_per_domain(n, stride, GPN)
    n_dom = np.maximum(n / k, 1.0)
    if op == "all_to_all":
        return (n - k) / n * size
    return op_factor(op, n_dom) * size / k


def step_volume(qwz, hpz, qgz, dp=384, h=6144):
    tensors = layer_weight_numels(h, 4 * h, 32, 32, 2, 1)
    out = zero3_microbatch(
        cross_node_bytes, lambda b: 0.0, tensors=tensors, layers=40.0, embed_numel=0.0, dp=dp, dp_stride=1.0,
        dp_per_node=GPN, hpz_group=GPN, qwz=qwz, hpz=hpz, qgz=qgz, grad_bytes=2.0, step_latency_s=0.0,
    )
    params = 40 * sum(e * c for e, c in tensors)
    per_node = GPN * (out["fwd_global_s"] + out["bwd_s"])
    return per_node / (2.0 * params)  # in units of M = 2 Psi bytes


def latency_per_microbatch(qwz, hpz, qgz, dp, dp_per_node, lat=1e-4):
    """The latency part alone of one micro-batch's ZeRO-3 / ZeRO++ collectives (the collectives cost nothing
    else), as (forward gather, backward gather + reduction) per fetched tensor: one weight matrix a layer
    over 40 layers, and the embedding once."""
    tensors = [(768.0 * 2 * dp, 1.0)]  # one weight matrix, divisible by 2 dp (qgZ stays on)
    out = zero3_microbatch(
        lambda op, size, n, stride: np.zeros_like(np.asarray(n, dtype=float)), lambda b: 0.0, tensors=tensors,
        layers=40.0, embed_numel=768.0 * 2 * dp, dp=dp, dp_stride=1.0, dp_per_node=dp_per_node,
        hpz_group=dp_per_node, qwz=qwz, hpz=hpz, qgz=qgz, grad_bytes=2.0, step_latency_s=lat,
    )
    return float(out["fwd_global_s"]) / lat / 41.0, float(out["bwd_s"]) / lat / 41.0


def test_zero3_latency_is_paid_per_inter_node_hop():
    """NCCL's cost model (src/graph/tuning.cc): a ring all-gather / reduce-scatter over n ranks on N nodes
    has N - 1 inter-node steps, where its latency lies; an all-to-all is one round. So 384 ranks on 24
    16-GPU nodes pay 23 hops a collective (not 383), one node pays none, hpZ's in-node gathers none, and
    qgZ's two inter-node all-to-alls (data and scales) one each."""
    assert latency_per_microbatch(0, 0, 0, dp=384, dp_per_node=16) == pytest.approx((23.0, 46.0))
    assert latency_per_microbatch(0, 0, 0, dp=384, dp_per_node=8) == pytest.approx((47.0, 94.0))
    assert latency_per_microbatch(0, 0, 0, dp=16, dp_per_node=16) == pytest.approx((0.0, 0.0))
    # qwZ: data and scales, two ring gathers; hpZ: the backward gather inside the node; qgZ: two all-to-alls
    assert latency_per_microbatch(1, 0, 0, dp=384, dp_per_node=16) == pytest.approx((46.0, 69.0))
    assert latency_per_microbatch(0, 1, 0, dp=384, dp_per_node=16) == pytest.approx((23.0, 23.0))
    assert latency_per_microbatch(1, 1, 1, dp=384, dp_per_node=16) == pytest.approx((46.0, 2.0))


def test_volume_table_3m_to_075m():
    """ZeRO++ table: ZeRO-3 3M cross-node per step; qwZ 0.5M + hpZ 0 + qgZ 0.25M = 0.75M (4x less)."""
    n_nodes = 384 / GPN
    ring = (n_nodes - 1) / n_nodes  # (N-1)/N of a ring over N nodes
    assert step_volume(0, 0, 0) == pytest.approx(3.0 * ring, rel=1e-9)
    assert step_volume(1, 1, 1) == pytest.approx(0.75 * ring, rel=2e-3)  # + fp32 scales, 1 per 8000
    assert step_volume(0, 0, 0) / step_volume(1, 1, 1) == pytest.approx(4.0, rel=2e-3)
    # each part alone
    assert step_volume(1, 0, 0) == pytest.approx(2 * 0.5 * ring + ring, rel=2e-3)
    assert step_volume(0, 1, 0) == pytest.approx(2.0 * ring, rel=1e-9)
    assert step_volume(0, 0, 1) == pytest.approx(2.25 * ring, rel=1e-9)
    vol = cross_node_volume_bytes(1.0, qwz=True, hpz=True, qgz=True)
    assert vol["total"] / cross_node_volume_bytes(1.0)["total"] == pytest.approx(0.25, rel=1e-3)


def test_hpz_memory_term():
    assert hpz_secondary_bytes(70e9, 8) == pytest.approx(17.5e9)  # 2 Psi / alpha
    model = pm.load_model("llama3-8b")
    cluster = pm.ClusterSpec.build(pm.load_gpu("v100-sxm3-32gb"), 64, 16, 400)
    job = pm.JobSpec(global_batch=64, seq_len=2048, precision="fp16", framework="deepspeed")
    base = pm.ParallelSpec(dp=64, zero_stage=3, sp=False, recompute="full")
    with_hpz = base.model_copy(update={"zeropp": frozenset({"hpz"})})
    for alpha in (None, 8):
        x = {k: np.atleast_1d(v) for k, v in build_inputs(model, cluster, with_hpz, job, None, alpha).items()}
        out = step_costs(x)
        expect = 2.0 * out["params_per_gpu"][0] / (alpha or 16) / GIB_BYTES
        assert out["hpz_secondary_gib"][0] == pytest.approx(expect)
        e0, e1 = pm.estimate(model, cluster, base, job), pm.estimate(model, cluster, with_hpz, job, None, alpha)
        assert e1.memory_breakdown_gib["weights_gib"] - e0.memory_breakdown_gib["weights_gib"] == pytest.approx(expect)


def _dp_comm(zeropp, n_gpus, hidden=6144, gpn=16):
    model = pm.ModelSpec(name="t", n_layers=8, hidden_size=hidden, ffn_hidden_size=4 * hidden, n_heads=32,
                         n_kv_heads=32, vocab_size=50304, tied_embeddings=True)
    cluster = pm.ClusterSpec.build(pm.load_gpu("v100-sxm3-32gb"), n_gpus, gpn, 100)
    job = pm.JobSpec(global_batch=n_gpus, seq_len=512, precision="fp16", framework="deepspeed")
    par = pm.ParallelSpec(dp=n_gpus, zero_stage=3, sp=False, zeropp=zeropp, recompute="full")
    x = {k: np.atleast_1d(v) for k, v in build_inputs(model, cluster, par, job).items()}
    return step_costs(x)


def test_qgz_falls_back_on_one_node():
    one, one_q = _dp_comm("", 16), _dp_comm("qgz", 16)
    assert one_q["dp_comm_s"][0] == pytest.approx(one["dp_comm_s"][0])
    assert one_q["qgz_fallback_numel"][0] > 0
    multi, multi_q = _dp_comm("", 64), _dp_comm("qgz", 64)
    assert multi_q["dp_comm_s"][0] < multi["dp_comm_s"][0]
    assert multi_q["qgz_fallback_numel"][0] == 0  # 6144^2 is divisible by 2 x 64


def test_qgz_falls_back_when_numel_not_divisible_by_twice_world():
    assert bool(qgz_active(6144.0 * 6144.0, 384, True, 1.0))          # 6144 = 8 x 768
    assert not bool(qgz_active(8192.0 * 8192.0, 384, True, 1.0))      # 2^26 % 768 != 0
    ok, odd = _dp_comm("qgz", 384, hidden=6144), _dp_comm("qgz", 384, hidden=8192)
    assert ok["qgz_fallback_numel"][0] == 0
    assert odd["qgz_fallback_numel"][0] > 0
    # the h x h and h x 4h matrices (8 layers x 9 h^2) take the reduce-scatter path; the embedding
    # (50304 x 8192, divisible by 768) stays on qgZ
    assert odd["qgz_fallback_numel"][0] == pytest.approx(8 * 9 * 8192.0**2)  # QKV (3 h^2) is divisible
    assert odd["dp_comm_s"][0] < _dp_comm("", 384, hidden=8192)["dp_comm_s"][0]


def test_zeropp_is_faster_on_slow_networks_and_monotone_in_bandwidth():
    slow, fast = _dp_comm("qwz,hpz,qgz", 128), _dp_comm("", 128)
    assert slow["iteration_time_s"][0] < fast["iteration_time_s"][0]


def test_zeropp_stops_paying_on_one_node_and_pays_more_on_more_nodes():
    """The what-if's 'where ZeRO++ stops paying off' (benchmarks/zeropp_whatif.py): on one node qgZ falls
    back and hpZ's group is the whole data-parallel group, so only qwZ's halved NVLink volume against its
    kernels is left (no gain beyond a few %); across nodes the gain grows with the node count and shrinks
    as the scale-out bandwidth grows. At 100 Gbit/s it levels off from about 8 nodes (18B: 2.26x / 1.91x
    on 8 nodes, 2.21x / 1.92x on 24; until 2026-12-02, when DeepSpeed's per-collective latency was costed
    on every ring step, not on the inter-node ones, it peaked at 8 and fell to 2.04x / 1.84x)."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from zeropp_whatif import whatif_nodes

    t = whatif_nodes(nodes=(1, 2, 8, 24), bandwidths=(100, 400), tokens=("1K", "2K"))
    assert t.zeropp_fits.all()
    sp = t.set_index(["tokens_per_gpu", "gbit_per_s", "nodes"]).speedup_pred
    for tok in ("1K", "2K"):
        for bw in (100, 400):
            assert abs(sp[tok, bw, 1] - 1.0) < 0.03
            assert sp[tok, bw, 1] < sp[tok, bw, 2] < sp[tok, bw, 8]
        assert sp[tok, 400, 8] < sp[tok, 400, 24]  # at 400 Gbit/s still growing at the pairs' 24 nodes
        assert abs(sp[tok, 100, 24] / sp[tok, 100, 8] - 1.0) < 0.03  # at 100 Gbit/s level from ~8 nodes (README)
        assert sp[tok, 100, 24] > sp[tok, 400, 24] > 1.0


def test_search_rejects_configs_that_no_longer_fit_with_hpz():
    model = pm.load_model("llama3-70b")
    cluster = pm.ClusterSpec.build(pm.load_gpu("v100-sxm3-32gb"), 64, 16, 400)
    job = pm.JobSpec(global_batch=64, seq_len=2048, precision="fp16", framework="deepspeed")
    res = run_search(model, cluster, job, zeropp=True, top=20)
    assert res.rejected.get(HPZ_MEMORY_REASON, 0) > 0
    ev = res.evaluated[0]
    hpz = ev.configs["hpz"] > 0
    assert set(np.unique(ev.configs["qwz"][ev.configs["zero_stage"] < 3])) <= {0}
    unfit_hpz = hpz & ~ev.metrics["fits"]
    assert unfit_hpz.any()
    for rec in res.candidates.to_dict("records"):
        assert rec["zeropp"] == "" or rec["zero_stage"] == 3
    # the default search varies ZeRO++ for the stacks on DeepSpeed's engine (ZEROPP_FRAMEWORKS), not for others
    other = job.model_copy(update={"framework": "megatron-lm"})
    assert (run_search(model, cluster, other, top=None).candidates["zeropp"] == "").all()
    assert (run_search(model, cluster, job, top=None).candidates["zeropp"] != "").any()
    mds = job.model_copy(update={"framework": "megatron-deepspeed"})
    assert (run_search(model, cluster, mds, top=None).candidates["zeropp"] != "").any()


# ---- DeepSpeed config --------------------------------------------------------------------------
TUTORIAL = {
    "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1, "fp16": {"enabled": True},
    "zero_optimization": {"stage": 3, "reduce_bucket_size": 10000000, "reduce_scatter": False,
                          "zero_quantized_weights": True, "zero_hpz_partition_size": 16,
                          "zero_quantized_gradients": True, "contiguous_gradients": True, "overlap_comm": True},
}


def test_deepspeed_config_reads_zeropp_keys():
    ds = parse_deepspeed_config(TUTORIAL)
    assert ds.zero_stage == 3 and ds.zeropp == {"qwz", "hpz", "qgz"} and ds.hpz_partition_size == 16
    assert ds.micro_batch == 2 and ds.precision == "fp16" and ds.global_batch(64) == 128


@pytest.mark.parametrize("bad, field", [
    ({"zero_optimization": {"stage": 3, "zero_quantised_weights": True}}, "zero_quantised_weights"),
    ({"bogus": 1}, "deepspeed_config.bogus"),
    ({"bf16": {"enabled": True}, "fp16": {"enabled": True}}, "bf16.enabled"),
    ({"zero_optimization": {"stage": 2, "zero_quantized_gradients": True}}, "zero_optimization.stage"),
    ({"zero_optimization": {"stage": 3, "zero_hpz_partition_size": -1}}, "zero_hpz_partition_size"),  # 0 is off (DeepSpeed: ge=0)
    # AutoTP composes with ZeRO 0-2 (deepspeed.ai/tutorials/autotp-training); its section takes autotp_size
    ({"zero_optimization": {"stage": 3}, "tensor_parallel": {"autotp_size": 4}}, "zero_optimization.stage"),
    ({"tensor_parallel": {"autotp": 4}}, "tensor_parallel.autotp"),
    ({"tensor_parallel": {"autotp_size": -1}}, "tensor_parallel.autotp_size"),
    ({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2, "train_batch_size": 10}, None),
    # keys that change the step and are not modelled are refused, not skipped (input audit 2026-11-30)
    ({"bf16": {"enabled": True}, "communication_data_type": "fp32", "zero_optimization": {"stage": 2}},
     "communication_data_type"),
    ({"fp16": {"enabled": True}, "communication_data_type": "bf16"}, "communication_data_type"),
    ({"zero_optimization": {"stage": 2, "reduce_scatter": False}}, "zero_optimization.reduce_scatter"),
    # an optimizer without Adam's two moments changes the optimizer memory (CLI audit 2026-12-01)
    ({"optimizer": {"type": "SGD", "params": {"lr": 0.1}}}, "optimizer.type"),
    ({"optimizer": {"type": "Adagrad"}}, "optimizer.type"),
    ({"optimizer": {"type": "Lion"}}, "optimizer.type"),
    ({"optimizer": {"params": {"lr": 0.1}}}, "optimizer.type"),
    ({"optimizer": "adam"}, "deepspeed_config.optimizer"),
])
def test_deepspeed_config_errors_name_the_key(bad, field):
    with pytest.raises(InputError) as exc:
        parse_deepspeed_config(bad).global_batch(64)
    if field:
        assert field in exc.value.field


def test_deepspeed_config_keys_that_say_the_modelled_step_are_accepted():
    ds = parse_deepspeed_config({"bf16": {"enabled": True}, "communication_data_type": "bf16",
                                 "zero_optimization": {"stage": 3, "reduce_scatter": True}})
    assert ds.zero_stage == 3 and ds.precision == "bf16"
    assert parse_deepspeed_config({"zero_optimization": {"stage": 0, "reduce_scatter": False}}).zero_stage == 0
    assert parse_deepspeed_config(TUTORIAL).zeropp == {"qwz", "hpz", "qgz"}  # stage 3 ignores reduce_scatter


def test_cli_deepspeed_config(tmp_path):
    good = tmp_path / "ds.json"
    good.write_text(json.dumps(TUTORIAL))
    base = ["estimate", "--model", "llama3-8b", "--gpu", "v100-sxm3-32gb", "--gpus", "64", "--global-batch", "128",
            "--seq-len", "512", "--framework", "deepspeed", "--recompute", "full", "--json"]
    r = CliRunner().invoke(app, base + ["--deepspeed-config", str(good)])
    assert r.exit_code == 0, r.output
    cfg = json.loads(r.stdout)["config"]
    assert cfg["zero_stage"] == 3 and cfg["zeropp"] == "qwz,hpz,qgz" and cfg["micro_batch"] == 2
    assert cfg["precision"] == "fp16"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**TUTORIAL, "zero_optimization": {**TUTORIAL["zero_optimization"], "stage": 1}}))
    r = CliRunner().invoke(app, base + ["--deepspeed-config", str(bad)])
    assert r.exit_code == 2
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: deepspeed_config.zero_optimization.stage:")
    wrong_batch = ["--global-batch" if a == "--global-batch" else a for a in base]
    wrong_batch[wrong_batch.index("--global-batch") + 1] = "256"
    r = CliRunner().invoke(app, wrong_batch + ["--deepspeed-config", str(good)])
    assert r.exit_code == 2 and "gradient_accumulation_steps" in r.stderr
    # without a bf16 / fp16 block the training type is --precision's: the reduction type must be it
    comm = tmp_path / "comm.json"
    comm.write_text(json.dumps({"zero_optimization": {"stage": 2}, "communication_data_type": "bf16"}))
    h100 = ["estimate", "--model", "llama3-8b", "--gpu", "h100-sxm5-80gb", "--gpus", "8", "--global-batch", "64",
            "--seq-len", "4096", "--framework", "deepspeed", "--deepspeed-config", str(comm)]
    r = CliRunner().invoke(app, h100 + ["--precision", "fp16"])
    assert r.exit_code == 2 and "communication_data_type" in r.stderr
    assert CliRunner().invoke(app, h100 + ["--precision", "bf16"]).exit_code == 0


def test_runs_path_reads_the_zeropp_column():
    from perfmodel.runs import runs_to_inputs

    row = dict(run_id="z-001", n_layers=40, hidden_size=6144, ffn_hidden_size=24576, n_heads=32, seq_len=512,
               gpu="v100-sxm3-32gb", n_gpus=64, gpus_per_node=16, tp=1, pp=1, dp=64, cp=1, global_batch=128,
               micro_batch=2, zero_stage=3, framework="deepspeed", recompute="full")
    df = pd.DataFrame([dict(row, zeropp="qwz,hpz,qgz"), dict(row, zeropp=""), dict(row, zeropp="qwz,foo"),
                       dict(row, zeropp="qgz", zero_stage=1)])
    inputs, status, reason, _ = runs_to_inputs(df)
    assert list(status) == ["ok", "ok", "invalid", "invalid"]
    assert inputs["qwz"][0] == inputs["hpz"][0] == inputs["qgz"][0] == 1.0
    assert inputs["qwz"][1] == 0.0


@pytest.mark.parametrize("keys, dp, expect", [
    # DeepSpeed runtime/config.py _set_batch_related_parameters: the missing one from the others
    ({"train_batch_size": 512, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 16}, 8, (512, 4, 16)),
    ({"train_batch_size": 512, "train_micro_batch_size_per_gpu": 4}, 8, (512, 4, 16)),
    ({"train_batch_size": 512, "gradient_accumulation_steps": 16}, 8, (512, 4, 16)),
    ({"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 16}, 8, (512, 4, 16)),
    ({"train_batch_size": 256}, 8, (256, 32, 1)),
    ({"train_micro_batch_size_per_gpu": 2}, 8, (16, 2, 1)),
    ({}, 8, None),
])
def test_deepspeed_batch_is_completed_as_deepspeed_does(keys, dp, expect):
    assert parse_deepspeed_config(keys).batch(dp) == expect


@pytest.mark.parametrize("keys, field", [
    ({"train_batch_size": 512, "gradient_accumulation_steps": 3}, "train_batch_size"),  # micro 21: 21*3*8 != 512
    ({"train_batch_size": 512, "train_micro_batch_size_per_gpu": 3}, "train_batch_size"),
    ({"gradient_accumulation_steps": 3}, "gradient_accumulation_steps"),  # neither batch nor micro-batch
    ({"train_batch_size": 4}, "train_batch_size"),  # fewer sequences than data-parallel ranks
])
def test_deepspeed_batch_contradictions_are_errors(keys, field):
    with pytest.raises(InputError) as exc:
        parse_deepspeed_config(keys).batch(8)
    assert exc.value.field == f"deepspeed_config.{field}"


def test_hpz_partition_size_is_counted_in_global_ranks():
    """zero_hpz_partition_size is a number of consecutive global ranks (DeepSpeed
    _create_zero_param_parallel_group): with tp 8, 16 ranks are 2 data-parallel members."""
    from perfmodel.deepspeed_config import check_hpz_partition

    check_hpz_partition(16, 64, dp=8, tp=8)
    check_hpz_partition(64, 64, dp=8, tp=8)
    for bad in (12, 128):  # not whole TP groups / beyond the data-parallel group
        with pytest.raises(InputError):
            check_hpz_partition(bad, 64, dp=8, tp=8)
    with pytest.raises(InputError):
        check_hpz_partition(16, 64, dp=8, tp=1)  # 16 members of an 8-member group


def test_hpz_partition_rules_that_only_the_rank_count_catches():
    """Cases the world-size divisibility alone lets through: 4 ranks are half a TP-8 group; 64 ranks with
    tp 4 are 16 data-parallel members of an 8-member group."""
    from perfmodel.deepspeed_config import check_hpz_partition

    for hpz, tp, dp in ((4, 8, 8), (64, 4, 8)):
        assert 64 % hpz == 0
        with pytest.raises(InputError):
            check_hpz_partition(hpz, 64, dp=dp, tp=tp)
    check_hpz_partition(32, 64, dp=16, tp=4)  # 8 members of 16


def test_deepspeed_autotp_keys_as_deepspeed_reads_them():
    """autotp_size 0 (DeepSpeed's default) or 1 is AutoTP off; the other TPTrainingConfig keys (preset_model,
    tp_overlap_comm, partition_config, ...) shape the sharding, not the rank count, and are skipped; a
    train_batch_size that counts the tensor-parallel ranks too (DeepSpeed's check without an mpu) is read
    over them."""
    assert parse_deepspeed_config({"tensor_parallel": {"autotp_size": 0}}).autotp_size is None
    assert parse_deepspeed_config({"tensor_parallel": {"autotp_size": 1}}).autotp_size is None
    ds = parse_deepspeed_config({"tensor_parallel": {"autotp_size": 4, "preset_model": "llama", "tp_overlap_comm": True,
                                                     "partition_config": {}}})
    assert ds.autotp_size == 4
    world = parse_deepspeed_config({"train_batch_size": 1024, "train_micro_batch_size_per_gpu": 1,
                                    "gradient_accumulation_steps": 16, "tensor_parallel": {"autotp_size": 4}})
    assert world.batch(16) == (256, 1, 16)
    per_dp = parse_deepspeed_config({"train_batch_size": 256, "train_micro_batch_size_per_gpu": 1,
                                     "gradient_accumulation_steps": 16, "tensor_parallel": {"autotp_size": 4}})
    assert per_dp.batch(16) == (256, 1, 16)


@pytest.mark.parametrize("kind", ["Adam", "AdamW", "adamw", "Lamb", "OneBitAdam", "ZeroOneAdam", "FusedAdam"])
def test_adam_state_optimizers_are_costed(kind):
    ds = parse_deepspeed_config({**TUTORIAL, "optimizer": {"type": kind, "params": {"lr": 1e-4}}})
    assert ds.zero_stage == 3
