"""What an emitted configuration means to the project that runs it, beyond its flag and key names
(a review against the projects' sources):

* Megatron-LM has no ``--overlap-p2p-communication`` (only ``--no-overlap-p2p-communication``,
  store_false, in megatron/training/arguments.py): the overlap is its default, nothing is emitted;
* Megatron-FSDP asserts ``CUDA_DEVICE_MAX_CONNECTIONS`` is not 1 (validate_args), where plain TP/CP wants 1;
* DeepSpeed builds hpZ groups of consecutive global ranks (deepspeed/utils/groups.py
  ``_create_zero_param_parallel_group``), which under tensor parallelism hold different tensor shards:
  hpZ with tp > 1 is something no stack runs (``rules.HPZ_TP``);
* DeepSpeed alone divides its world by ``sequence_parallel_size`` for the data-parallel size of its
  batch check (runtime/config.py), so a Ulysses configuration states it.
"""
from __future__ import annotations

import perfmodel as pm
from perfmodel import rules
from perfmodel.search import run_search
from perfmodel.search.emit import deepspeed_config, emit_notes

ROW = dict(tp=8, pp=1, dp=64, cp=1, vpp=1, micro_batch=1, sp=True, zero_stage=2, zeropp="", recompute="none",
           gpus_per_node=8)


def test_megatron_fsdp_is_told_not_to_limit_device_connections():
    model, job = pm.load_model("llama3-70b"), pm.JobSpec(global_batch=512, seq_len=8192, framework="nemo")
    fsdp = emit_notes("megatron", model, job, ROW)
    assert any("do not export CUDA_DEVICE_MAX_CONNECTIONS=1" in n for n in fsdp)
    assert not any(n.startswith("export CUDA_DEVICE_MAX_CONNECTIONS=1") for n in fsdp)
    dist_opt = emit_notes("megatron", model, job, dict(ROW, zero_stage=1))
    assert any(n.startswith("export CUDA_DEVICE_MAX_CONNECTIONS=1") for n in dist_opt)


def test_hpz_with_tensor_parallelism_is_never_recommended_and_is_a_what_if_in_estimate():
    model = pm.load_model("llama3-70b")
    cluster = pm.ClusterSpec.build(pm.load_gpu("h100-sxm5-80gb"), 256, 8)
    job = pm.JobSpec(global_batch=256, seq_len=32768, framework="megatron-deepspeed")
    res = run_search(model, cluster, job, top=None)
    df = res.candidates
    hpz = df["zeropp"].str.contains("hpz")
    assert hpz.any()  # hpZ is searched ...
    assert (df.loc[hpz, "tp"] == 1).all()  # ... only where its node-wide groups are data-parallel ranks
    assert res.rejected.get(rules.HPZ_TP.reason, 0) > 0
    est = pm.estimate(model, cluster, pm.ParallelSpec(tp=4, dp=64, zero_stage=3, zeropp="hpz,qgz", recompute="full"),
                      job)
    assert any(rules.HPZ_TP.reason in n and "what-if" in n for n in est.notes)


def test_deepspeed_alone_states_the_ulysses_degree_its_batch_check_divides_by():
    model = pm.load_model("llama3-8b")
    job = pm.JobSpec(global_batch=64, seq_len=65536, framework="deepspeed", flash_attention=True)
    row = dict(ROW, tp=1, dp=8, cp=8, sp=False, zero_stage=3, cp_kind="ulysses")
    cfg = deepspeed_config(model, job, row)
    assert cfg["sequence_parallel_size"] == 8
    # DeepSpeed completes train_batch = micro * accumulation * the ranks it counts: world / sequence_parallel_size
    # for a config passed as a dict, the whole world for one passed as a file path (its '"sequence_parallel_size"
    # in config' tests the path string: the real DeepSpeed 0.18.2 refused the JSON with train_batch_size in it,
    # reviewer's run). Left out, no check can fail, and the dict route gives the costed batch.
    world = row["dp"] * row["cp"]
    assert "train_batch_size" not in cfg
    per_rank = cfg["train_micro_batch_size_per_gpu"] * cfg["gradient_accumulation_steps"]
    assert per_rank * world // cfg["sequence_parallel_size"] == job.global_batch
    note = next(n for n in emit_notes("deepspeed", model, job, row) if "train_batch_size is left out" in n)
    assert "64 sequences = micro-batch 1 x 8 accumulation steps x dp=8" in note
    assert "sequence_parallel_size" not in deepspeed_config(model, job, dict(row, cp=1, dp=64))
    # Megatron-DeepSpeed hands DeepSpeed its mpu, whose data-parallel size the check uses instead
    md = deepspeed_config(model, pm.JobSpec(global_batch=64, seq_len=65536, framework="megatron-deepspeed"), row)
    assert "sequence_parallel_size" not in md


def test_autotp_note_states_the_batch_it_was_costed_with():
    model = pm.load_model("gpt3-13b")
    job = pm.JobSpec(global_batch=512, seq_len=2048, framework="deepspeed")
    row = dict(ROW, tp=4, dp=16, sp=False, zero_stage=1, micro_batch=2)
    note = next(n for n in emit_notes("deepspeed", model, job, row) if "train_batch_size is left out" in n)
    assert "512 sequences = micro-batch 2 x 16 accumulation steps x dp=16" in note


def test_default_hpz_group_is_one_nvlink_domain_that_divides_the_data_parallel_group():
    """DeepSpeed asserts the hpZ group divides the world and builds it from consecutive ranks: the default
    is the NVLink domain's ranks cut to their gcd with dp x cp, so no group straddles two domains."""
    from perfmodel.zeropp import default_hpz_members

    for domain, dpc, expected in ((8, 64, 8), (16, 384, 16), (72, 144, 72), (72, 96, 24), (72, 64, 64), (8, 4, 4)):
        assert default_hpz_members(domain, dpc, 1) == expected, (domain, dpc)


def test_emitted_hpz_group_is_the_costed_one(monkeypatch, capsys, tmp_path):
    """An audit: on GB200 (4 GPUs a tray, 72 an NVLink domain) the search costed hpZ over 72 ranks
    (98.7 GiB, fits) but --emit deepspeed wrote zero_hpz_partition_size 4, which re-imported costs 277 GiB
    and does not fit; on H100s with 16 GPUs a node (two 8-GPU boards) it wrote 16 for a group costed at 8
    (30% slower re-imported). The emitted JSON now reads back to the search's time and memory."""
    import json

    from cli_helpers import run_cli

    for job, recompute, group in (
        (["--model", "llama3.1-405b", "--gpu", "gb200", "--gpus", "144", "--scale-out-gbit-per-s", "100",
          "--seq-len", "4096", "--global-batch", "288", "--framework", "deepspeed", "--flash-attention"], "full", 72),
        (["--model", "llama2-7b", "--gpu", "h100-sxm5-80gb", "--gpus", "64", "--gpus-per-node", "16",
          "--scale-out-gbit-per-s", "100", "--seq-len", "2048", "--global-batch", "512", "--framework", "deepspeed"],
         "selective", 8),
    ):
        code, out, err = run_cli(monkeypatch, capsys, "recommend", *job, "--top", "1", "--emit", "deepspeed", "--json")
        assert code == 0, err
        res = json.loads(out)
        best = res["top"][0]
        cfg = json.loads(res["emit"]["text"])
        assert "hpz" in best["zeropp"].split(",")
        assert cfg["zero_optimization"]["zero_hpz_partition_size"] == group
        path = tmp_path / "ds.json"
        path.write_text(res["emit"]["text"])
        code, out, err = run_cli(monkeypatch, capsys, "estimate", *job, "--deepspeed-config", str(path),
                                 "--recompute", recompute, "--json")
        assert code == 0, err
        est = json.loads(out)
        assert est["iteration_time_s"] == best["iteration_time_s"]
        assert est["memory_gib"] == best["memory_gib"] and est["fits"]
