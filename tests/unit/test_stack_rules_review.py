"""What the named stacks can run, as the search, estimate and ``--emit`` state it (a review of the
search against the stacks' own checks):

* Megatron-Core's interleaved schedule runs micro-batches in groups of pp per virtual stage and
  raises unless their number is a multiple of the group (``microbatch_group_size_per_vp_stage``,
  default pp); torch pipelining (torchtitan) needs equal rounds; Megatron asserts pp > 2 for an
  interleaved schedule without Megatron's default send/recv overlap.
* torchtitan's DDP is data-parallel only ("DDP has not supported > 1D parallelism").
* Megatron-Core, nanotron and torchtitan keep whole key/value heads on a TP rank.
* Megatron-DeepSpeed's ``--ds-sequence-parallel-size`` (Ulysses) "cannot be combined with
  --sequence-parallel"; its flags are its own (``megatron/arguments.py``).
* ZeRO++ is DeepSpeed's.
"""
from __future__ import annotations

import numpy as np
import pytest
from typer.testing import CliRunner

import perfmodel as pm
from perfmodel import rules
from perfmodel.cli import app
from perfmodel.costs.memory import in_flight_layers, last_stage_in_flight_layers
from perfmodel.estimate import config_arrays
from perfmodel.search import run_search
from perfmodel.search.emit import emit_notes, megatron_flags

runner = CliRunner()
GPU = pm.load_gpu("h100-sxm5-80gb")


def _x(framework, **kw):
    base = dict(tp=1, pp=1, dp=1, cp=1, vpp=1, micro_batch=1, global_batch=64, sp=0, zero_stage=1, cp_ulysses=0,
                n_kv_heads=8, seq_len=4096, framework=framework)
    return {**base, **kw}


@pytest.mark.parametrize("framework, micro, broken", [
    ("megatron-lm", 64, True),    # 64 % 6 = 4: Megatron-Core raises
    ("megatron-lm", 60, False),
    ("nemo", 66, False),
    ("torchtitan", 64, True),     # rounds = 64 // 6 = 10; 64 % 10 = 4
    ("torchtitan", 60, False),
    ("torchtitan", 7, False),     # one round of 7 >= 6
    ("megatron-lm", 5, True),     # fewer than pp
])
def test_interleaved_micro_batch_count(framework, micro, broken):
    x = _x(framework, pp=6, vpp=2, dp=1, micro_batch=1, global_batch=micro)
    assert bool(rules.INTERLEAVED_MICRO.broken(x)) is broken
    assert not rules.INTERLEAVED_MICRO.broken({**x, "vpp": 1})


def test_search_winners_have_runnable_interleaving():
    """The reviewer's job: 384 A100s with 1,536 sequences; every interleaved candidate has a multiple of pp
    micro-batches, and an interleaved 2-stage pipeline keeps Megatron's default send/recv overlap."""
    model = pm.load_model("gpt3-175b")
    cluster = pm.ClusterSpec.build(pm.load_gpu("a100-sxm4-80gb"), 384, 8)
    df = run_search(model, cluster, pm.JobSpec(global_batch=1536, seq_len=2048), top=50).candidates
    inter = df[df.vpp > 1]
    assert len(inter) and np.all((1536 // (inter.micro_batch * inter.dp)) % inter.pp == 0)

    row = dict(tp=8, pp=2, dp=1, cp=1, vpp=5, micro_batch=1, sp=True, zero_stage=0, zeropp="", recompute="full")
    job = pm.JobSpec(global_batch=32, seq_len=8192)
    # Megatron-LM has only --no-overlap-p2p-communication (store_false): the overlap an interleaved two-stage
    # pipeline needs is its default, and a --overlap-p2p-communication flag would be refused by its parser
    for variant in (row, {**row, "pp": 4}, {**row, "vpp": 1}):
        flags = megatron_flags(pm.load_model("llama3-70b"), job, variant)
        assert not any("overlap-p2p-communication" in f for f in flags)
    notes = emit_notes("megatron", pm.load_model("llama3-70b"), job, row)
    assert any("do not add --no-overlap-p2p-communication" in n for n in notes)


def test_torchtitan_ddp_is_data_parallel_only():
    assert rules.TT_DDP.broken(_x("torchtitan", tp=2, dp=2, zero_stage=0))
    assert rules.TT_DDP.broken(_x("torchtitan", pp=2, dp=2, zero_stage=0))
    assert rules.TT_DDP.broken(_x("torchtitan", cp=2, zero_stage=0))
    # pure TP / PP (dp = cp = 1): no data parallelism is applied at all, which is zero_stage 0
    assert not rules.TT_DDP.broken(_x("torchtitan", tp=2, dp=1, zero_stage=0))
    assert not rules.TT_DDP.broken(_x("torchtitan", tp=2, pp=2, dp=1, zero_stage=0))
    assert not rules.TT_DDP.broken(_x("torchtitan", tp=2, zero_stage=3))
    assert not rules.TT_DDP.broken(_x("torchtitan", zero_stage=0))
    assert not rules.TT_DDP.broken(_x("megatron-lm", tp=2, zero_stage=0))
    model = pm.load_model("gpt3-1.3b")
    cluster = pm.ClusterSpec.build(pm.load_gpu("a100-sxm4-80gb"), 128, 8)
    df = run_search(model, cluster, pm.JobSpec(global_batch=256, seq_len=2048, framework="torchtitan"),
                    top=200).candidates
    ddp = df[df.zero_stage == 0]
    assert len(ddp) and np.all((ddp.tp == 1) & (ddp.pp == 1) & (ddp.cp == 1))


def test_whole_kv_heads_per_tp_rank():
    for fw in ("megatron-lm", "nemo", "nanotron", "torchtitan", "megatron-deepspeed"):
        assert rules.TP_KV_STACK.broken(_x(fw, tp=16, n_kv_heads=8)), fw
        assert not rules.TP_KV_STACK.broken(_x(fw, tp=8, n_kv_heads=8)), fw
    assert not rules.TP_KV_STACK.broken(_x("generic", tp=16, n_kv_heads=8))
    # a StarCoder2-15B-like shape (48 heads, 4 key/value heads): the search never gives tp 8
    model = pm.ModelSpec(name="sc2", n_layers=40, hidden_size=6144, ffn_hidden_size=24576, n_heads=48,
                         n_kv_heads=4, vocab_size=49152, mlp="gelu")
    cluster = pm.ClusterSpec.build(pm.load_gpu("a100-sxm4-40gb"), 16, 8)
    res = run_search(model, cluster, pm.JobSpec(global_batch=16, seq_len=32768), top=100)
    assert set(res.candidates.tp) <= {1, 2, 4}


def test_a_tp_above_the_kv_heads_is_costed_with_replicated_heads():
    """Where a stack allows it (generic), a rank holds one whole key/value head, not half of one: the costs
    of 8 key/value heads at tp 16 equal those of 16 (the model FLOPs, and so MFU, keep the real 8)."""
    base = pm.load_model("llama3-70b")
    cluster = pm.ClusterSpec.build(GPU, 64, 8)
    job = pm.JobSpec(global_batch=64, seq_len=8192, framework="generic")
    par = pm.ParallelSpec(tp=16, pp=4, dp=1, recompute="selective")
    est8 = pm.estimate(base, cluster, par, job)
    est16 = pm.estimate(base.model_copy(update={"n_kv_heads": 16}), cluster, par, job)
    assert est8.iteration_time_s == pytest.approx(est16.iteration_time_s, rel=1e-12)
    assert est8.memory_gib == pytest.approx(est16.memory_gib, rel=1e-12)
    assert est8.mfu < est16.mfu


def test_megatron_deepspeed_ulysses_excludes_megatron_sp():
    assert rules.ULYSSES_SP.broken(_x("megatron-deepspeed", tp=2, cp=4, sp=1, cp_ulysses=1))
    assert not rules.ULYSSES_SP.broken(_x("megatron-deepspeed", tp=2, cp=4, sp=0, cp_ulysses=1))
    assert not rules.ULYSSES_SP.broken(_x("nemo", tp=2, cp=4, sp=1, cp_ulysses=1))


def test_megatron_deepspeed_flags_are_its_own():
    """Megatron-DeepSpeed (microsoft/Megatron-DeepSpeed megatron/arguments.py): Ulysses through
    --ds-sequence-parallel-size, GQA through --num-key-value-heads, ZeRO through DeepSpeed's config and
    --zero-stage; none of Megatron-Core's CP, FSDP or overlap switches."""
    row = dict(tp=2, pp=1, dp=4, cp=4, vpp=1, micro_batch=1, sp=False, zero_stage=3, zeropp="", recompute="full",
               cp_kind="ulysses")
    job = pm.JobSpec(global_batch=64, seq_len=8192, framework="megatron-deepspeed")
    flags = megatron_flags(pm.load_model("llama3-8b"), job, row)
    assert flags[flags.index("--ds-sequence-parallel-size") + 1] == "4"
    assert flags[flags.index("--num-key-value-heads") + 1] == "8"
    assert flags[flags.index("--zero-stage") + 1] == "3"
    assert {"--deepspeed", "--deepspeed_config", "--no-pipeline-parallel", "--use-rotary-position-embeddings"} <= set(flags)
    for absent in ("--context-parallel-size", "--cp-comm-type", "--use-megatron-fsdp", "--overlap-grad-reduce",
                   "--use-distributed-optimizer", "--group-query-attention", "--sequence-parallel"):
        assert absent not in flags, absent
    assert any("--emit deepspeed" in n for n in emit_notes("megatron", pm.load_model("llama3-8b"), job, row))


def test_zeropp_is_deepspeeds():
    x = config_arrays(pm.load_model("llama2-13b"), pm.ClusterSpec.build(pm.load_gpu("a100-sxm4-80gb"), 64, 8),
                      pm.ParallelSpec(tp=1, pp=1, dp=64, zero_stage=3, zeropp=frozenset({"qwz", "hpz", "qgz"})),
                      pm.JobSpec(global_batch=256, seq_len=2048, framework="megatron-lm"))
    assert rules.ZEROPP_STACK.broken(x)
    assert not rules.ZEROPP_STACK.broken({**x, "framework": "deepspeed"})
    assert not rules.ZEROPP_STACK.broken({**x, "qwz": 0, "hpz": 0, "qgz": 0})
    args = ["estimate", "--model", "llama2-13b", "--gpu", "a100-sxm4-80gb", "--gpus", "64", "--global-batch", "256",
            "--zero-stage", "3", "--zeropp", "qwz,hpz,qgz"]
    assert "cannot run this configuration" in runner.invoke(app, args + ["--framework", "megatron-lm"]).output
    assert "cannot run this configuration" not in runner.invoke(app, args + ["--framework", "deepspeed"]).output
    for part in ("qwz", "qgz"):  # each part alone is ZeRO++ too (not only hpZ)
        alone = [a if a != "qwz,hpz,qgz" else part for a in args]
        assert "cannot run this configuration" in runner.invoke(app, alone + ["--framework", "megatron-lm"]).output


def test_megatron_core_cp_splits_the_sequence_in_2cp_chunks_for_a2a_too():
    args = ["estimate", "--model", "llama3-8b", "--gpu", "h100-sxm5-80gb", "--gpus", "8", "--global-batch", "8", "--seq-len", "4098",
            "--tp", "1", "--cp", "2", "--cp-kind", "ulysses"]
    res = runner.invoke(app, args + ["--framework", "nemo"])
    assert res.exit_code == 2 and "2*cp" in res.output
    res = runner.invoke(app, args + ["--framework", "deepspeed", "--zero-stage", "0"])
    assert res.exit_code == 0, res.output


def test_deepspeed_common_default_has_no_sp():
    """AutoTP has no sequence parallelism: the common default compared against is TP 8 without SP, which fits
    (not 'does not fit in memory')."""
    res = runner.invoke(app, ["recommend", "--model", "llama2-7b", "--gpu", "a100-sxm4-80gb", "--gpus", "8",
                              "--seq-len", "4096", "--global-batch", "64", "--framework", "deepspeed"])
    assert res.exit_code == 0
    assert "does not fit" not in res.output
    assert "common default tp=8" in res.output and "sp=off" in res.output
    assert "tp above 1 needs pp = 1" in res.output  # the rule's field is named in the rejection table


def test_torchtitan_fp16_is_noted():
    row = dict(tp=1, pp=1, dp=32, cp=1, vpp=1, micro_batch=4, sp=False, zero_stage=3, zeropp="", recompute="none")
    job = pm.JobSpec(global_batch=128, seq_len=2048, precision="fp16", framework="torchtitan")
    assert any("bfloat16 or float32" in n for n in emit_notes("torchtitan", pm.load_model("llama2-7b"), job, row))


def test_last_stage_holds_its_interleaved_warm_up():
    """Megatron's interleaved schedule warms the last rank up with (v - 1) p chunks: at its peak it holds
    (v - 1) p + 1 chunks of l / (p v) layers; 1F1B's last stage holds one micro-batch."""
    assert last_stage_in_flight_layers(10.0, 4, 1, 64) == 10.0
    assert last_stage_in_flight_layers(10.0, 4, 5, 64) == pytest.approx(10.0 * 17 / 5)
    assert last_stage_in_flight_layers(10.0, 4, 5, 2) == 20.0  # never more than all micro-batches
    for p, v in ((2, 2), (4, 5), (8, 12)):
        assert last_stage_in_flight_layers(40.0 / p, p, v, 1000) < in_flight_layers(40.0, p, v, 1000)


def test_recompute_reruns_the_context_parallel_exchange():
    """Full recompute re-runs attention and so its CP exchange: Ulysses' forward all-to-alls once more
    (1.5x the all-to-all time); torchtitan's op-level selective recompute keeps the attention output."""
    model = pm.load_model("llama3-8b")
    cluster = pm.ClusterSpec.build(GPU, 64, 8)
    job = pm.JobSpec(global_batch=16, seq_len=32768, framework="nemo")

    def cp_s(recompute, kind="ulysses", j=job):
        par = pm.ParallelSpec(tp=1, pp=1, dp=8, cp=8, cp_kind=kind, recompute=recompute)
        return pm.estimate(model, cluster, par, j).time_breakdown_s["cp_comm_s"]

    assert cp_s("full") == pytest.approx(1.5 * cp_s("none"), rel=1e-9)
    assert cp_s("selective") == pytest.approx(1.5 * cp_s("none"), rel=1e-9)  # core attention re-run
    slow = pm.ClusterSpec.build(GPU, 64, 8, scale_out_gbit_per_s_per_node=25)
    tt = pm.JobSpec(global_batch=16, seq_len=32768, framework="torchtitan")

    def ring_s(recompute):
        par = pm.ParallelSpec(tp=1, pp=1, dp=1, cp=64, cp_kind="ring", recompute=recompute, zero_stage=3)
        return pm.estimate(model, slow, par, tt).time_breakdown_s["cp_comm_s"]

    assert ring_s("full") > ring_s("none") > 0
    assert ring_s("selective") == pytest.approx(ring_s("none"), rel=1e-12)


def test_ulysses_pays_one_all_to_all_per_tensor():
    """DeepSpeed-Ulysses' DistributedAttention runs one all-to-all each for Q, K, V and the output, and the
    same four in backward: with multi-head attention (K and V as wide as Q) a layer's exchange is eight
    all-to-alls of one Q's size, as `perfmodel comm` costs one."""
    import json

    model = pm.load_model("llama2-7b")  # 32 heads, 32 key/value heads
    cluster = pm.ClusterSpec.build(GPU, 8, 8)
    par = pm.ParallelSpec(tp=1, pp=1, dp=1, cp=8, cp_kind="ulysses", recompute="none", zero_stage=0)
    job = pm.JobSpec(global_batch=1, seq_len=4096, framework="deepspeed")
    cp_s = pm.estimate(model, cluster, par, job).time_breakdown_s["cp_comm_s"]
    q_bytes = 2 * (4096 // 8) * model.hidden_size
    res = runner.invoke(app, ["comm", "--op", "all_to_all", "--bytes", str(q_bytes), "--gpus", "8",
                              "--gpus-per-node", "8", "--gpu", "h100-sxm5-80gb", "--json"])
    one = json.loads(res.output)["time_s"]
    assert cp_s == pytest.approx(model.n_layers * 8 * one, rel=1e-6)


def test_deepspeed_pipeline_reduces_gradients_after_the_last_backward(monkeypatch):
    """DeepSpeed's PipelineEngine ends its TrainSchedule with ReduceGrads: with pp > 1 none of the gradient
    reduction hides behind the backward (the stack's dp_overlap holds without pipelining only)."""
    from perfmodel import frameworks

    model = pm.load_model("llama2-7b")
    cluster = pm.ClusterSpec.build(pm.load_gpu("v100-sxm2-16gb"), 64, 8, 100)
    job = pm.JobSpec(global_batch=256, seq_len=2048, precision="fp16", framework="deepspeed")

    def dp_s(pp):
        par = pm.ParallelSpec(tp=1, pp=pp, dp=64 // pp, zero_stage=1, recompute="full")
        return pm.estimate(model, cluster, par, job).time_breakdown_s["dp_comm_s"]

    with_overlap = {pp: dp_s(pp) for pp in (1, 4)}
    no_overlap = frameworks.PROFILES["deepspeed"].model_copy(update={"dp_overlap": 0.0})
    monkeypatch.setitem(frameworks.PROFILES, "deepspeed", no_overlap)
    assert dp_s(4) == pytest.approx(with_overlap[4], rel=1e-12)
    assert dp_s(1) > with_overlap[1]


def test_megascale_builds_parallel_blocks():
    """MegaScale's models use the parallel transformer block (Jiang et al. NSDI'24 Sec. 3.1): its TP
    communication is 3/4 of the same Megatron-Core stack's with sequential blocks (NeMo's overlaps)."""
    model = pm.load_model("gpt3-175b")
    cluster = pm.ClusterSpec.build(pm.load_gpu("a100-sxm4-80gb"), 512, 8)
    par = pm.ParallelSpec(tp=8, pp=8, dp=8, vpp=6)

    def tp_s(framework):
        job = pm.JobSpec(global_batch=512, seq_len=2048, framework=framework)
        return pm.estimate(model, cluster, par, job).time_breakdown_s["tp_comm_s"]

    assert tp_s("megascale") == pytest.approx(0.75 * tp_s("nemo"), rel=1e-9)


def test_a_zeropp_what_if_of_a_stack_without_it_is_invalid():
    """whatif's best mode is recommend's search: ZeRO++ on under megatron-lm finds nothing (rule 34)."""
    res = runner.invoke(app, ["whatif", "--model", "llama2-7b", "--gpu", "a100-sxm4-80gb", "--gpus", "64",
                              "--global-batch", "512", "--vary", "zeropp_on=on,off", "--framework", "megatron-lm",
                              "--json"])
    import json

    points = json.loads(res.stdout)["points"]
    on = [p for p in points if p.get("zeropp_on") in (True, "on")]
    assert on and all(p["status"] == "invalid" and "ZeRO++" in p["reason"] for p in on)


def test_the_api_estimate_runs_the_stacks_default_zero_stage():
    model = pm.load_model("llama2-7b")
    cluster = pm.ClusterSpec.build(GPU, 16, 8)
    job = pm.JobSpec(global_batch=64, seq_len=4096, framework="torchtitan")
    est = pm.estimate(model, cluster, pm.ParallelSpec(tp=2, dp=8), job)
    assert est.config["zero_stage"] == 3 and not est.notes
    assert pm.estimate(model, cluster, pm.ParallelSpec(tp=2, dp=8, zero_stage=1), job).notes  # stated: kept, noted
    nemo = job.model_copy(update={"framework": "nemo"})
    assert pm.estimate(model, cluster, pm.ParallelSpec(tp=2, dp=8), nemo).config["zero_stage"] == 1


def test_report_prints_the_models_notes(tmp_path):
    import json

    cfg = {"model_type": "mistral", "hidden_act": "silu", "hidden_size": 1024, "intermediate_size": 3584,
           "num_attention_heads": 8, "num_hidden_layers": 4, "num_key_value_heads": 8, "sliding_window": 1024,
           "tie_word_embeddings": False, "vocab_size": 32000}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    res = runner.invoke(app, ["report", "--model", str(path), "--gpu", "h100-sxm5-80gb", "--gpus", "8",
                              "--global-batch", "8", "--seq-len", "4096", "--out", str(tmp_path / "r")])
    assert res.exit_code == 0, res.output
    assert "sliding_window" in res.output
    assert "sliding_window" in next((tmp_path / "r").glob("*.html")).read_text()


def test_torchtitan_search_offers_tensor_parallelism_only_with_fsdp_or_cp():
    """A torchtitan search on one node tries tp 8 only with CP beside it: tp 8 with dp 1 and cp 1 (no DDP,
    no FSDP) trains in float32 there (maybe_enable_amp turns mixed precision off without FSDP or CP: rule
    TT_AMP), and DDP does not compose with TP (rule TT_DDP); tp 1, 2 and 4 keep FSDP (reviewer's Llama-3 8B
    job)."""
    model = pm.load_model("llama3-8b")
    cluster = pm.ClusterSpec.build(pm.load_gpu("h100-sxm5-80gb"), 8, 8)
    res = run_search(model, cluster, pm.JobSpec(global_batch=128, seq_len=8192, framework="torchtitan"),
                     top=100000)
    df = res.candidates
    assert not len(df[(df.tp == 8) & (df.dp == 1) & (df.cp == 1)])
    assert res.rejected.get(rules.TT_AMP.reason, 0) > 0
    assert set(df[df.tp > 1].zero_stage) == {3} and {1, 2, 4} <= set(df.tp)
    assert not len(df[(df.zero_stage == 0) & (df.dp > 1) & ((df.tp > 1) | (df.pp > 1))])


@pytest.mark.parametrize("framework", ["deepspeed", "megatron-deepspeed", "gpt-neox"])
def test_deepspeed_ulysses_runs_without_a_pipeline(framework):
    """DeepSpeed's pipeline engine has pipe, data and model axes only: Ulysses (cp > 1) needs pp = 1. The
    reviewer's 20B DeepSpeed search recommended tp 1, pp 4, cp 8 Ulysses, which DeepSpeed cannot launch."""
    x = _x(framework, pp=4, cp=8, cp_ulysses=1, dp=1, global_batch=64)
    assert rules.ULYSSES_PP.broken(x)
    assert not rules.ULYSSES_PP.broken({**x, "pp": 1})
    assert not rules.ULYSSES_PP.broken({**x, "framework": "megatron-lm"})  # Megatron-Core a2a CP pipelines
    model = pm.ModelSpec(name="gpt-20b", n_layers=44, hidden_size=6144, ffn_hidden_size=24576, n_heads=64,
                         n_kv_heads=64, vocab_size=50432)
    cluster = pm.ClusterSpec.build(pm.load_gpu("v100-sxm3-32gb"), 256, 16, 100.0)
    df = run_search(model, cluster, pm.JobSpec(global_batch=256, seq_len=8192, framework=framework),
                    top=100000).candidates
    assert len(df) and not len(df[(df.cp > 1) & (df.pp > 1)])


@pytest.mark.parametrize("framework, uneven_ok", [
    ("deepspeed", True), ("megatron-deepspeed", True), ("gpt-neox", True), ("nanotron", True), ("torchtitan", True),
    ("megatron-lm", False), ("nemo", False), ("generic", False), ("", False),
])
def test_stacks_that_split_layers_unevenly_take_any_pp_up_to_the_layer_count(framework, uneven_ok):
    """DeepSpeed's PipelineModule (partition_balanced), nanotron's cost-balanced split and torchtitan's
    rounded-up layers per stage run 44 layers on 8 stages (busiest stage ceil(44 / 8) = 6 layers, as
    costed); Megatron-Core needs an even split. The reviewer's 20B DeepSpeed job was refused with a
    Megatron-Core rule, and MT-NLG's 105 layers had no pipeline on 1,024 GPUs under any stack."""
    x = {"n_layers": 44, "pp": 8, "framework": framework}
    assert bool(rules.PP_LAYERS.broken(x)) is not uneven_ok
    assert rules.PP_LAYERS.broken({**x, "pp": 45})  # more stages than layers: never
    assert not rules.PP_LAYERS.broken({**x, "pp": 4})
    args = ["estimate", "--model", "llama2-13b", "--gpu", "a100-sxm4-80gb", "--gpus", "64", "--global-batch", "128",
            "--pp", "16", "--tp", "2", "--zero-stage", "1", "--framework", framework or "generic"]
    r = runner.invoke(app, args)  # llama2-13b: 40 layers, 16 stages
    assert (r.exit_code == 0) is uneven_ok, r.output
    if not uneven_ok:
        assert r.exit_code == 2 and "error: pp: must divide n_layers" in r.output


def test_an_uneven_pipeline_is_costed_at_its_busiest_stage():
    model = pm.load_model("llama2-13b")  # 40 layers
    cluster = pm.ClusterSpec.build(pm.load_gpu("a100-sxm4-80gb"), 64, 8)
    job = pm.JobSpec(global_batch=128, seq_len=4096, framework="deepspeed")
    par = pm.ParallelSpec(tp=2, pp=16, dp=2, zero_stage=1)
    uneven = pm.estimate(model, cluster, par, job)  # 40 layers: stages of 3, the last 2 + the head
    even = pm.estimate(model.model_copy(update={"n_layers": 48}), cluster, par, job)  # 3 each, the last + head
    # the busiest stage holds 3 layers either way: the same activation memory; the head's stage is lighter
    assert uneven.memory_breakdown_gib["activations_gib"] == pytest.approx(even.memory_breakdown_gib["activations_gib"])
    assert uneven.time_breakdown_s["compute_s"] < even.time_breakdown_s["compute_s"]
    df = run_search(pm.load_model("mt-nlg-530b"), pm.ClusterSpec.build(pm.load_gpu("a100-sxm4-80gb"), 1024, 8),
                    pm.JobSpec(global_batch=1024, seq_len=2048, framework="megatron-deepspeed"), top=20).candidates
    # MT-NLG's 105 layers: the winner pipelines, over stages that 105 does not divide into
    assert df.iloc[0].pp > 1 and (105 % df.pp != 0).any() and (df.tp <= 16).all()
