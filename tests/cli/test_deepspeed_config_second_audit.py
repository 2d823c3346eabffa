"""A second audit of ``estimate --deepspeed-config`` against DeepSpeed 0.18's own config code: --tp beside a
config without AutoTP was costed as tensor parallelism DeepSpeed would not run, an enabled elasticity block
(which replaces the batch keys) was skipped, a Trainer "auto" micro-batch was guessed as 1, real ZeRO keys
were refused as unknown, hpZ size 0 (DeepSpeed: off) was refused, and two errors named the wrong cause."""
from __future__ import annotations

import pytest
from test_deepspeed_config_audit import BASE, error, estimate, notes


def test_tp_without_autotp_is_a_contradiction(tmp_path):
    """DeepSpeed alone shards layers only through tensor_parallel.autotp_size (default 0: off)."""
    line = error(estimate(tmp_path, BASE, "--tp", "2"))
    assert "--tp 2" in line and "autotp_size" in line
    notes(estimate(tmp_path, {**BASE, "tensor_parallel": {"autotp_size": 2}}, "--tp", "2", batch=16))
    # Megatron-DeepSpeed's model code splits the layers: --tp is its own
    notes(estimate(tmp_path, BASE, "--tp", "2", "--framework", "megatron-deepspeed", batch=16))


@pytest.mark.parametrize("key, block", [
    ("elasticity", {"enabled": True, "max_train_batch_size": 2000, "micro_batch_sizes": [2, 4, 6]}),
    ("progressive_layer_drop", {"enabled": True, "theta": 0.5, "gamma": 0.001}),
    ("sparse_attention", {"mode": "fixed", "block": 16}),
    ("torch_autocast", {"enabled": True}),
])
def test_blocks_that_change_the_step_are_refused_where_on(tmp_path, key, block):
    assert f"deepspeed_config.{key}: is not modelled" in error(estimate(tmp_path, {**BASE, key: block}))
    if "enabled" in block:
        notes(estimate(tmp_path, {**BASE, key: {**block, "enabled": False}}))


def test_an_auto_micro_batch_needs_the_command_lines(tmp_path):
    """The Trainer fills it from per_device_train_batch_size: was costed as 1 (accumulation 16 at dp 16 for a
    global batch of 32... which DeepSpeed, given only the micro-batch, never runs)."""
    cfg = {**BASE, "train_micro_batch_size_per_gpu": "auto"}
    assert "give --micro-batch" in error(estimate(tmp_path, cfg))
    notes(estimate(tmp_path, cfg, "--micro-batch", "2"))
    only_ga = {"zero_optimization": {"stage": 1}, "bf16": {"enabled": True}, "gradient_accumulation_steps": "auto"}
    assert "needs train_batch_size or train_micro_batch_size_per_gpu" in error(estimate(tmp_path, only_ga))


@pytest.mark.parametrize("zero_key, value", [
    ("use_multi_rank_bucket_allreduce", True), ("stage3_module_granularity_threshold", 0),
    ("stage3_model_persistence_threshold", 1e9), ("zero_quantized_nontrainable_weights", False),
    ("prefetch_bucket_size", 5e7), ("max_live_parameters", 1e9), ("log_trace_cache_warnings", False),
])
def test_real_zero_keys_are_read(tmp_path, zero_key, value):
    cfg = {**BASE, "zero_optimization": {"stage": 3, zero_key: value}}
    notes(estimate(tmp_path, cfg, "--micro-batch", "2"))


@pytest.mark.parametrize("top_key, value", [
    ("zero_force_ds_cpu_optimizer", False), ("dataloader_drop_last", True), ("compile", {"enabled": False}),
    ("pipeline", {"pipe_partitioned": True}), ("timers", {"throughput": {"enabled": True}}),
])
def test_real_top_level_keys_are_read(tmp_path, top_key, value):
    notes(estimate(tmp_path, {**BASE, top_key: value}))


def test_zero_variants_the_model_does_not_cost_are_refused_by_name(tmp_path):
    mics = {**BASE, "zero_optimization": {"stage": 3, "mics_shard_size": 8}}
    assert "MiCS" in error(estimate(tmp_path, mics, "--micro-batch", "2"))
    loco = {**BASE, "zero_optimization": {"stage": 3, "zero_quantized_gradients": True,
                                          "zeropp_loco_param": {"err_beta": 0.8, "reset_T": 1024}}}
    assert "LoCo" in error(estimate(tmp_path, loco, "--micro-batch", "2"))


def test_hpz_size_zero_is_off(tmp_path):
    """DeepSpeed: zero_hpz_partition_size Field(1, ge=0), hpZ on above 1."""
    zero = {"stage": 3, "zero_hpz_partition_size": 0}
    notes(estimate(tmp_path, {**BASE, "zero_optimization": zero}, "--micro-batch", "2"))
    assert "whole number >= 0" in error(estimate(tmp_path, {**BASE, "zero_optimization": {**zero,
                                                                                          "zero_hpz_partition_size": -1}}))


def test_errors_say_the_cause(tmp_path):
    assert "the file is empty" in error(estimate(tmp_path, "  \n"))
    bad = {**BASE, "zero_optimization": {"stage": 3, "offload_param": {"device": "gpu"}}}
    assert "must be none, cpu or nvme" in error(estimate(tmp_path, bad, "--micro-batch", "2"))


def test_autotp_batch_keys_are_completed_over_every_rank(tmp_path):
    """DeepSpeed without an mpu completes the batch keys over the whole world, tensor-parallel ranks included,
    which see the same sequences: train_batch_size 64 with micro-batch 2 on 16 GPUs at autotp 2 is 2
    accumulation steps of 8 data-parallel ranks, 32 sequences (was read as 4 steps, 64)."""
    import json

    cfg = {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 2, "bf16": {"enabled": True},
           "zero_optimization": {"stage": 1}, "tensor_parallel": {"autotp_size": 2}}
    assert "counts the tensor-parallel ranks too" in error(estimate(tmp_path, cfg, batch=64))
    config = json.loads(estimate(tmp_path, cfg, "--json", batch=32).stdout)["config"]
    assert (config["tp"], config["dp"], config["micro_batch"]) == (2, 8, 2)
    alone = {k: v for k, v in cfg.items() if k != "train_micro_batch_size_per_gpu"}
    assert json.loads(estimate(tmp_path, alone, "--json", batch=32).stdout)["config"]["micro_batch"] == 4
    # all three keys per data-parallel rank are read as such too
    per_dp = {**cfg, "train_batch_size": 32, "gradient_accumulation_steps": 2}
    assert json.loads(estimate(tmp_path, per_dp, "--json", batch=32).stdout)["config"]["micro_batch"] == 2


@pytest.mark.parametrize("zero_key, value, rule", [
    ("reduce_bucket_size", -1, "must be a number >= 0"),
    ("sub_group_size", "1e9", "must be a number >= 0"),
    ("stage3_max_live_parameters", True, "must be a number >= 0"),
    ("overlap_comm", "true", "must be true or false"),
    ("contiguous_gradients", 1, "must be true or false"),
])
def test_skipped_zero_keys_hold_values_deepspeed_accepts(tmp_path, zero_key, value, rule):
    """A key the model skips is still DeepSpeed's: a value its config model refuses (Field(ge=0) sizes, booleans)
    is not a run (was accepted and skipped)."""
    cfg = {**BASE, "zero_optimization": {"stage": 3, zero_key: value}}
    assert rule in error(estimate(tmp_path, cfg, "--micro-batch", "2"))


def test_the_trainers_auto_bucket_sizes_are_read(tmp_path):
    zero = {"stage": 3, "reduce_bucket_size": "auto", "stage3_prefetch_bucket_size": "auto",
            "stage3_param_persistence_threshold": "auto", "sub_group_size": 1e9, "overlap_comm": True}
    notes(estimate(tmp_path, {**BASE, "zero_optimization": zero}, "--micro-batch", "2"))
    assert "must be a number >= 0" in error(estimate(tmp_path, {**BASE, "zero_optimization": {
        "stage": 3, "sub_group_size": "auto"}}, "--micro-batch", "2"))
