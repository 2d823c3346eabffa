"""An audit of --emit over 65 jobs: Nemotron's squared ReLU was emitted as Megatron's default GeLU, the
normalization note gave Megatron-DeepSpeed a choice it refuses (RMSNorm for rmsnorm), Megatron-DeepSpeed's full
recompute did not go through DeepSpeed's checkpointing (whose block the JSON tunes), and a torchtitan TOML put
replicated data parallelism beside tp / pp, which torchtitan refuses at start-up."""
from __future__ import annotations

import tomllib

import perfmodel as pm
from perfmodel.search.emit import emit_notes, megatron_flags, torchtitan_toml


def _row(**kw):
    row = dict(tp=8, pp=1, dp=8, cp=1, vpp=1, micro_batch=1, sp=True, zero_stage=1, zeropp="", recompute="none")
    return {**row, **kw}


def test_squared_relu_is_emitted_for_megatron_lm():
    model = pm.load_model("nemotron4-15b")
    assert model.mlp == "relu2"
    flags = megatron_flags(model, pm.JobSpec(global_batch=256, seq_len=4096, framework="megatron-lm"), _row())
    assert "--squared-relu" in flags and "--swiglu" not in flags
    llama = megatron_flags(pm.load_model("llama3-8b"), pm.JobSpec(global_batch=256, seq_len=4096), _row())
    assert "--squared-relu" not in llama
    mds = pm.JobSpec(global_batch=256, seq_len=4096, framework="megatron-deepspeed")
    assert "--squared-relu" not in megatron_flags(model, mds, _row())
    assert any("--squared-relu" in n for n in emit_notes("megatron", model, mds, _row()))


def test_the_normalization_note_uses_each_stacks_spelling():
    model = pm.load_model("llama3-8b")
    for framework, spelled in (("megatron-lm", "--normalization RMSNorm"), ("megatron-deepspeed", "--normalization rmsnorm")):
        said = emit_notes("megatron", model, pm.JobSpec(global_batch=64, seq_len=8192, framework=framework), _row())
        assert any(spelled in n for n in said), framework


def test_megatron_deepspeed_full_recompute_goes_through_deepspeeds_checkpointing():
    model, job = pm.load_model("llama3-70b"), pm.JobSpec(global_batch=512, seq_len=8192, framework="megatron-deepspeed")
    full = megatron_flags(model, job, _row(tp=4, dp=16, recompute="full", sp=False))
    assert "--deepspeed-activation-checkpointing" in full
    selective = megatron_flags(model, job, _row(tp=4, dp=16, recompute="selective", sp=False))
    assert "--deepspeed-activation-checkpointing" not in selective


def test_torchtitan_gets_no_ddp_beside_other_parallelism():
    model, job = pm.load_model("llama3-70b"), pm.JobSpec(global_batch=256, seq_len=4096, framework="torchtitan")
    beside = tomllib.loads(torchtitan_toml(model, job, _row(zero_stage=0, pp=2, dp=4)))["parallelism"]
    assert beside["data_parallel_replicate_degree"] == 1 and beside["data_parallel_shard_degree"] == 4
    assert beside["fsdp_reshard_after_forward"] == "never"
    assert any("DDP" in n for n in emit_notes("torchtitan", model, job, _row(zero_stage=0, pp=2, dp=4)))
    alone = tomllib.loads(torchtitan_toml(model, job, _row(zero_stage=0, tp=1, dp=64)))["parallelism"]
    assert alone["data_parallel_replicate_degree"] == 64 and alone["data_parallel_shard_degree"] == 1
    assert not any("DDP" in n for n in emit_notes("torchtitan", model, job, _row(zero_stage=0, tp=1, dp=64)))
