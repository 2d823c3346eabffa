"""Read the parts of a DeepSpeed config JSON that the model uses (``perfmodel estimate --deepspeed-config``).

Keys and defaults follow DeepSpeed's ``deepspeed/runtime/zero/config.py`` and ``runtime/config.py``
and the ZeRO++ tutorial (docs/_tutorials/zeropp.md; Wang et al. 2023, arXiv 2306.10209):

- ``zero_optimization.stage`` (0..3);
- ``zero_optimization.zero_quantized_weights`` (qwZ), ``zero_hpz_partition_size`` (hpZ; 1 = off),
  ``zero_quantized_gradients`` (qgZ) -- all three need stage 3;
- ``train_micro_batch_size_per_gpu``, ``gradient_accumulation_steps``, ``train_batch_size``;
- ``bf16.enabled`` / ``fp16.enabled``;
- ``tensor_parallel.autotp_size`` (AutoTP training: the tensor-parallel size; ZeRO 0-2 only);
- ``sequence_parallel_size`` (DeepSpeed-Ulysses without an mpu: the context-parallel size, by which
  DeepSpeed divides the world for the data-parallel size of its batch check, runtime/config.py).

Keys DeepSpeed accepts that do not change the modelled step (scheduler, logging ...) are
listed in ``IGNORED_*`` and skipped (an ``optimizer`` only once its ``type`` keeps Adam's state, as costed); those that would change it but are not modelled (prefetch and bucket
sizes, gradient-accumulation dtypes, curriculum learning ...) are skipped with a note naming them
(``NOT_MODELLED``). Anything else is an error, as is a contradiction (bf16 and fp16 both on; ZeRO++ without
stage 3; a batch that does not add up) and what the model does not cost (CPU/NVMe offload, Apex AMP, an
fp32 run). The Hugging Face Trainer's ``"auto"`` batch keys are filled as it fills them, from the command
line (``DeepSpeedSettings.filled``), its ``"auto"`` bf16/fp16 from ``--precision``, said in a note; ``"auto"``
anywhere else is not a value.
Every error is an ``InputError`` naming the key, so the CLI prints one ``error: field: rule`` line.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from perfmodel.errors import InputError, read_text_file
from perfmodel.specs.parallel import zeropp_text
from perfmodel.structured_text import load_json

PREFIX = "deepspeed_config"

USED_TOP = {"zero_optimization", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
            "train_batch_size", "bf16", "fp16", "tensor_parallel", "sequence_parallel_size",
            "bfloat16",  # bf16's older name, which DeepSpeed still reads (runtime/config.py get_bfloat16_config)
            "amp"}  # Apex AMP: refused when enabled
#: AutoTP training (DeepSpeed >= 0.16.4, deepspeed.ai/tutorials/autotp-training): "tensor_parallel":
#: {"autotp_size": N} shards the linear layers over N ranks; it composes with ZeRO stage 0, 1 or 2
USED_TP = {"autotp_size"}
#: the rest of DeepSpeed's TPTrainingConfig (runtime/tensor_parallel/config.py): how the layers are sharded
#: and kept, not how many ranks: skipped
IGNORED_TP = {"tp_overlap_comm", "partition_config", "preset_model", "dtype", "keep_module_on_host", "tp",
              "tensor_parallel", "tp_size", "tp_grain_size", "injection_policy_tuple", "kernel_inject"}
IGNORED_TOP = {"optimizer", "scheduler", "gradient_clipping", "steps_per_print", "wall_clock_breakdown",
               "prescale_gradients", "gradient_predivide_factor", "zero_allow_untested_optimizer",
               "activation_checkpointing", "flops_profiler", "tensorboard", "wandb", "csv_monitor",
               "comms_logger", "dump_state", "communication_data_type", "seed", "memory_breakdown",
               "aio", "data_types", "curriculum_learning", "seq_parallel_communication_data_type",
               "data_efficiency", "compression_training", "autotuning", "elasticity", "checkpoint",
               # read by DeepSpeed's runtime/config.py, none of them changes the modelled step
               "zero_force_ds_cpu_optimizer", "sparse_gradients", "dataloader_drop_last", "disable_allgather",
               "graph_harvesting", "use_data_before_expert_parallelism", "pipeline", "comet", "hybrid_engine",
               "compile", "timers", "nebula", "eigenvalue", "weight_quantization",
               # refused where they are on (ENABLED_NOT_MODELLED)
               "progressive_layer_drop", "sparse_attention", "quantize_training", "torch_autocast"}
#: skipped ZeRO keys checked as DeepSpeed's config model checks them (runtime/zero/config.py: Field(ge=0) sizes and
#: thresholds; booleans): a skipped key is not costed, but a value DeepSpeed refuses is not a run. The Hugging Face
#: Trainer fills three of the sizes from the model's hidden size when they say "auto" (integrations/deepspeed.py)
ZERO_SIZE_KEYS = {"reduce_bucket_size", "allgather_bucket_size", "stage3_prefetch_bucket_size", "prefetch_bucket_size",
                  "stage3_param_persistence_threshold", "param_persistence_threshold", "stage3_max_live_parameters",
                  "max_live_parameters", "stage3_max_reuse_distance", "max_reuse_distance", "sub_group_size",
                  "stage3_model_persistence_threshold", "model_persistence_threshold",
                  "stage3_module_granularity_threshold", "module_granularity_threshold"}
ZERO_AUTO_SIZE_KEYS = {"reduce_bucket_size", "stage3_prefetch_bucket_size", "stage3_param_persistence_threshold"}
ZERO_SWITCH_KEYS = {"reduce_scatter", "contiguous_gradients", "overlap_comm", "allgather_partitions",
                    "round_robin_gradients", "load_from_fp32_weights", "ignore_unused_parameters", "elastic_checkpoint",
                    "stage3_gather_16bit_weights_on_model_save", "stage3_gather_fp16_weights_on_model_save",
                    "gather_16bit_weights_on_model_save", "memory_efficient_linear", "use_multi_rank_bucket_allreduce",
                    "stage3_use_all_reduce_for_fetch_params", "use_all_reduce_for_fetch_params",
                    "zero_quantized_nontrainable_weights", "legacy_stage1", "log_trace_cache_warnings"}
#: blocks that change what a step computes, its batch or its precision: refused where on ({"enabled": true};
#: sparse_attention has no switch: given is on)
ENABLED_NOT_MODELLED = {
    "elasticity": "elastic training picks its own train_batch_size and micro-batch from the GPU count "
                  "(elasticity/elasticity.py compute_elastic_config), replacing the config's batch keys",
    "progressive_layer_drop": "progressive layer dropping skips layers as training goes",
    "sparse_attention": "block-sparse attention changes the attention's work and memory",
    "quantize_training": "quantize-aware training adds quantization kernels to every step",
    "torch_autocast": "torch.autocast mixed precision is not the bf16/fp16 engine the model costs",
}
USED_ZERO = {"stage", "zero_quantized_weights", "zero_hpz_partition_size", "zero_quantized_gradients"}
IGNORED_ZERO = {"reduce_bucket_size", "reduce_scatter", "contiguous_gradients", "overlap_comm",
                "allgather_bucket_size", "allgather_partitions", "round_robin_gradients",
                "stage3_prefetch_bucket_size", "stage3_param_persistence_threshold", "stage3_max_live_parameters",
                "stage3_max_reuse_distance", "stage3_gather_16bit_weights_on_model_save",
                "stage3_gather_fp16_weights_on_model_save", "sub_group_size", "load_from_fp32_weights",
                "ignore_unused_parameters", "memory_efficient_linear", "elastic_checkpoint",
                "use_multi_rank_bucket_allreduce", "stage3_module_granularity_threshold",
                "stage3_model_persistence_threshold", "stage3_use_all_reduce_for_fetch_params",
                "zero_quantized_nontrainable_weights", "legacy_stage1", "pipeline_loading_checkpoint",
                "override_module_apply", "log_trace_cache_warnings",
                # names DeepSpeed's ZeRO config also accepts without the stage3_ prefix (populate_by_name)
                "prefetch_bucket_size", "param_persistence_threshold", "model_persistence_threshold",
                "max_live_parameters", "max_reuse_distance", "gather_16bit_weights_on_model_save",
                "module_granularity_threshold", "use_all_reduce_for_fetch_params",
                # refused where set (a variant of ZeRO the model does not cost): LoCo-ZeRO++, MiCS
                "zeropp_loco_param", "mics_shard_size", "mics_hierarchical_params_gather"}
PRECISION_KEYS = {"enabled", "loss_scale", "initial_scale_power", "loss_scale_window", "hysteresis",
                  "consecutive_hysteresis", "min_loss_scale", "auto_cast", "immediate_grad_update",
                  "fp16_master_weights_and_grads", "bf16_master_weights_and_grads", "bf16_optimizer_states",
                  "check_grad_overflow"}
#: keys that would change the step or its memory but are not modelled: skipped, and named in a note
#: (activation_checkpointing is said by the recompute note instead: it tunes the model code's checkpointing)
NOT_MODELLED = {"data_types", "curriculum_learning", "data_efficiency", "compile",
                "seq_parallel_communication_data_type", "compression_training", "stage3_prefetch_bucket_size",
                "stage3_param_persistence_threshold", "stage3_max_live_parameters", "stage3_max_reuse_distance",
                "reduce_bucket_size", "allgather_bucket_size", "sub_group_size",
                "prefetch_bucket_size", "param_persistence_threshold", "max_live_parameters", "max_reuse_distance",
                "stage3_module_granularity_threshold", "stage3_model_persistence_threshold",
                "model_persistence_threshold", "module_granularity_threshold",
                "memory_efficient_linear", "fp16_master_weights_and_grads", "bf16_master_weights_and_grads",
                "bf16_optimizer_states"}
#: DeepSpeed's optimizer names (runtime/config.py, compared lower-cased) whose state is Adam's -- two fp32
#: moments per parameter besides the fp32 master copy -- as the model costs it; others (SGD, Adagrad, Lion,
#: Muon: one moment or none) would change the optimizer memory and are refused
ADAM_STATE_OPTIMIZERS = ("adam", "adamw", "lamb", "onebitadam", "zerooneadam", "onebitlamb", "muadam", "muadamw",
                         "fusedadam", "fusedlamb", "deepspeedcpuadam")
#: the optimizer / parameter offload of ZeRO (and ZeRO-Offload's older keys): not modelled unless off
OFFLOAD_ZERO = {"offload_optimizer", "offload_param", "cpu_offload", "cpu_offload_params", "cpu_offload_use_pin_memory"}
#: the Hugging Face Trainer's placeholder, filled from its own arguments before DeepSpeed reads the config
AUTO = "auto"


@dataclass(frozen=True)
class DeepSpeedSettings:
    """What the config says about the modelled step (None: not given in the file)."""

    zero_stage: int
    zeropp: frozenset[str]
    hpz_partition_size: int
    micro_batch: int | None
    gradient_accumulation_steps: int | None
    train_batch_size: int | None
    precision: str | None
    autotp_size: int | None = None
    #: communication_data_type when given (a 16-bit type: another is refused when the config is read)
    communication_data_type: str | None = None
    #: sequence_parallel_size above 1: DeepSpeed-Ulysses over that many ranks (None: not given, or 1)
    sequence_parallel_size: int | None = None
    #: the config turns both 16-bit modes off, or states neither: DeepSpeed would train in fp32
    fp32: bool = False
    #: the 16-bit types the config turns off explicitly ("enabled": false)
    disabled: frozenset[str] = frozenset()
    #: bf16 / fp16 "enabled": "auto" (the Hugging Face Trainer's) and no type enabled: the 16-bit type comes
    #: from --precision; the key that says "auto" (for the message)
    precision_auto: str | None = None
    #: the batch keys that say "auto" (filled from the command line by ``filled``)
    batch_auto: frozenset[str] = frozenset()
    #: what the config states that the model skips or fills in, one line each (printed as notes)
    notes: tuple[str, ...] = ()
    #: an activation_checkpointing block is given (it tunes the checkpointing the model code does)
    activation_checkpointing: bool = False

    def filled(self, global_batch: int, micro_batch: int | None) -> "DeepSpeedSettings":
        """The batch keys that say "auto" filled as the Hugging Face Trainer fills them from its own arguments
        (here the command line's): train_batch_size = the global batch, train_micro_batch_size_per_gpu = the
        micro-batch where one is given; an "auto" accumulation is left to DeepSpeed's completion."""
        from dataclasses import replace

        if "train_micro_batch_size_per_gpu" in self.batch_auto and micro_batch is None:
            raise InputError(f"{PREFIX}.train_micro_batch_size_per_gpu", "\"auto\" is filled by the Hugging Face "
                             "Trainer from its per_device_train_batch_size: give --micro-batch")
        # the Trainer fills only the keys the file has: an "auto" accumulation without train_batch_size or the
        # micro-batch beside it leaves DeepSpeed neither, which it refuses (as the accumulation alone, _batch)
        alone = self.train_batch_size is None and self.micro_batch is None and not (
            {"train_batch_size", "train_micro_batch_size_per_gpu"} & self.batch_auto)
        if "gradient_accumulation_steps" in self.batch_auto and alone:
            raise InputError(f"{PREFIX}.gradient_accumulation_steps",
                             "needs train_batch_size or train_micro_batch_size_per_gpu beside it (DeepSpeed: "
                             "'Either train_batch_size or train_micro_batch_size_per_gpu needs to be provided')")
        # an "auto" accumulation is the global batch over micro-batch x dp: the batch is the global batch
        tb_from_command_line = "train_batch_size" in self.batch_auto or (
            "gradient_accumulation_steps" in self.batch_auto and self.train_batch_size is None)
        return replace(
            self,
            train_batch_size=global_batch if tb_from_command_line else self.train_batch_size,
            micro_batch=(micro_batch if "train_micro_batch_size_per_gpu" in self.batch_auto else self.micro_batch),
        )

    def batch(self, dp: int) -> tuple[int, int, int] | None:
        """As ``_batch(dp)``. With AutoTP DeepSpeed completes and checks the batch keys over the whole world
        (no mpu is passed: runtime/config.py world_size = dist.get_world_size()), tensor-parallel ranks
        included, which see the same sequences: the keys are completed over dp x autotp_size ranks and the
        global batch is train_batch_size over autotp_size (64 with micro-batch 2 on 16 GPUs at autotp 2: 2
        accumulation steps, 32 sequences). All three keys given per data-parallel rank are read as such too."""
        tb, mb, ga, tp = self.train_batch_size, self.micro_batch, self.gradient_accumulation_steps, self.autotp_size
        if not tp or (None not in (tb, mb, ga) and tb == mb * ga * dp):
            return self._batch(dp)
        world = self._batch(dp * tp, "ranks (dp x autotp_size)")
        return None if world is None else (world[0] // tp, world[1], world[2])

    def _batch(self, dp: int, label: str = "dp") -> tuple[int, int, int] | None:
        """(train_batch_size, micro-batch, accumulation steps) as DeepSpeed completes them from the keys
        given over ``dp`` data-parallel ranks (runtime/config.py ``_set_batch_related_parameters``: a missing
        one from the other two, integer division; accumulation 1 when only one is given), checked as its
        ``_batch_assertion`` does. None when the file gives no batch key."""
        tb, mb, ga = self.train_batch_size, self.micro_batch, self.gradient_accumulation_steps
        ranks = f"{label} {dp}"  # (in the messages)
        if tb is None and mb is None and ga is None:
            return None
        if tb is None and mb is None:
            raise InputError(f"{PREFIX}.gradient_accumulation_steps",
                             "needs train_batch_size or train_micro_batch_size_per_gpu beside it (DeepSpeed: "
                             "'Either train_batch_size or train_micro_batch_size_per_gpu needs to be provided')")
        # a key DeepSpeed derives by integer division must come out whole: else the batch cannot add up
        if tb is not None and mb is not None and ga is None:
            if tb % (mb * dp):
                raise InputError(f"{PREFIX}.train_batch_size", f"{tb} is not a multiple of "
                                 f"train_micro_batch_size_per_gpu {mb} x {ranks}")
            ga = tb // mb // dp
        elif tb is not None and ga is not None and mb is None:
            if tb % (ga * dp):
                raise InputError(f"{PREFIX}.train_batch_size", f"{tb} is not a multiple of "
                                 f"gradient_accumulation_steps {ga} x {ranks}")
            mb = tb // dp // ga
        elif tb is None:
            ga = ga or 1
            tb = mb * ga * dp
        elif mb is None:  # train_batch_size alone
            if tb % dp:
                raise InputError(f"{PREFIX}.train_batch_size", f"{tb} is not a multiple of {ranks}")
            ga, mb = 1, tb // dp
        if mb <= 0 or ga <= 0 or tb != mb * ga * dp:
            key = "train_batch_size" if self.train_batch_size is not None else "gradient_accumulation_steps"
            raise InputError(
                f"{PREFIX}.{key}",
                f"must equal train_micro_batch_size_per_gpu * gradient_accumulation_steps * {label} "
                f"({tb} != {mb}*{ga}*{dp})",
            )
        return tb, mb, ga

    def global_batch(self, dp: int) -> int | None:
        """train_batch_size = micro x accumulation x dp (DeepSpeed runtime/config.py); None when not given."""
        resolved = self.batch(dp)
        return None if resolved is None else resolved[0]


def _flag(zero: dict, key: str) -> bool:
    v = zero.get(key, False)
    if not isinstance(v, bool):
        raise InputError(f"{PREFIX}.zero_optimization.{key}", f"must be true or false (got {v!r})")
    return v


#: the batch keys the Hugging Face Trainer fills when they say "auto" (integrations/deepspeed.py trainer_config_process)
AUTO_BATCH = ("train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "train_batch_size")


def _pos_int(d: dict, key: str, path: str) -> int | None:
    if key not in d or (d[key] == AUTO and key in AUTO_BATCH):  # filled from the command line (filled())
        return None
    v = d[key]
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise InputError(f"{path}.{key}", f"must be a positive integer (got {v!r})")
    return v


def _unknown(d: dict, allowed: set[str], path: str) -> None:
    bad = sorted(set(d) - allowed)
    if bad:
        raise InputError(f"{path}.{bad[0]}", "unknown key (not a DeepSpeed setting perfmodel reads or skips)")


def _enabled(d: dict, key: str) -> bool | None:
    """True / False as the block says (False where it is absent); None for "auto"."""
    sub = d.get(key)
    if sub is None:
        return False
    if not isinstance(sub, dict):
        raise InputError(f"{PREFIX}.{key}", f"must be an object like {{\"enabled\": true}} (got {sub!r})")
    _unknown(sub, PRECISION_KEYS, f"{PREFIX}.{key}")
    v = sub.get("enabled", False)
    if v == AUTO:
        return None
    if not isinstance(v, bool):
        raise InputError(f"{PREFIX}.{key}.enabled", f"must be true, false or \"auto\" (got {v!r})")
    return v


def _check_optimizer(optimizer) -> None:
    """The config's optimizer (DeepSpeed builds it from ``optimizer.type``) must keep Adam's state, which the
    memory and the optimizer step are costed with; without one, the training code's own is used."""
    if optimizer is None:
        return
    if not isinstance(optimizer, dict):
        raise InputError(f"{PREFIX}.optimizer", f"must be an object with a \"type\" (got {optimizer!r:.60})")
    kind = optimizer.get("type")
    if not isinstance(kind, str) or not kind.strip():
        raise InputError(f"{PREFIX}.optimizer.type", f"must name the optimizer (got {kind!r:.60})")
    if kind.strip().lower() not in ADAM_STATE_OPTIMIZERS:
        raise InputError(f"{PREFIX}.optimizer.type", f"{kind!r} is not modelled: the optimizer memory and step are "
                         "Adam's (two fp32 moments per parameter): one of " + ", ".join(ADAM_STATE_OPTIMIZERS[:8]))


def parse_deepspeed_config(data: dict) -> DeepSpeedSettings:
    """Validate a loaded DeepSpeed config and return the settings the model uses."""
    if not isinstance(data, dict):
        raise InputError(PREFIX, "must be a JSON object")
    _unknown(data, USED_TOP | IGNORED_TOP, PREFIX)
    zero = data.get("zero_optimization", {})
    if not isinstance(zero, dict):
        raise InputError(f"{PREFIX}.zero_optimization", "must be an object")
    _unknown(zero, USED_ZERO | IGNORED_ZERO | OFFLOAD_ZERO, f"{PREFIX}.zero_optimization")
    for key in sorted(ZERO_SIZE_KEYS & set(zero)):
        v = zero[key]
        if v == AUTO and key in ZERO_AUTO_SIZE_KEYS:
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise InputError(f"{PREFIX}.zero_optimization.{key}", f"must be a number >= 0 (got {v!r})")
    for key in sorted(ZERO_SWITCH_KEYS & set(zero)):
        if not isinstance(zero[key], bool):
            raise InputError(f"{PREFIX}.zero_optimization.{key}", f"must be true or false (got {zero[key]!r})")
    for key in sorted(OFFLOAD_ZERO & set(zero)):
        v = zero[key]
        device = v.get("device", "none") if isinstance(v, dict) else None
        if device is not None and str(device).lower() not in ("none", "", "cpu", "nvme"):
            raise InputError(f"{PREFIX}.zero_optimization.{key}.device", f"must be none, cpu or nvme, DeepSpeed's "
                             f"values (got {device!r})")
        off = v in (False, None) or (isinstance(v, dict) and str(v.get("device", "none")).lower() in ("none", ""))
        if key == "cpu_offload_use_pin_memory" or off:
            continue
        raise InputError(f"{PREFIX}.zero_optimization.{key}", "offloading the optimizer or the parameters to CPU "
                         "or NVMe is not modelled (only activation offloading is); leave it out or set its device "
                         "to \"none\"")
    for key, why in ENABLED_NOT_MODELLED.items():
        block = data.get(key)
        on = block not in (None, False) and not (isinstance(block, dict) and block.get("enabled", key == "sparse_attention")
                                               in (False, None))
        if on:
            raise InputError(f"{PREFIX}.{key}", f"is not modelled: {why}; leave it out or disable it")
    loco = zero.get("zeropp_loco_param")
    if loco not in (None, False, {}):
        raise InputError(f"{PREFIX}.zero_optimization.zeropp_loco_param", "LoCo-ZeRO++ (error-compensated qgZ) is not "
                         "modelled; leave it out to cost qgZ")
    mics = zero.get("mics_shard_size", -1)
    if isinstance(mics, bool) or not isinstance(mics, int):
        raise InputError(f"{PREFIX}.zero_optimization.mics_shard_size", f"must be a whole number (got {mics!r})")
    if mics > 0 or zero.get("mics_hierarchical_params_gather", False) not in (False, None):
        raise InputError(f"{PREFIX}.zero_optimization.mics_shard_size" if mics > 0 else
                         f"{PREFIX}.zero_optimization.mics_hierarchical_params_gather",
                         "MiCS (ZeRO-3 sharded within groups of that size) is not modelled; leave it out")
    _check_optimizer(data.get("optimizer"))
    amp = data.get("amp")
    if amp is not None and (not isinstance(amp, dict) or amp.get("enabled", False) is not False):
        raise InputError(f"{PREFIX}.amp", "Apex AMP is not modelled: enable bf16 or fp16 instead")
    notes = []
    skipped = sorted((NOT_MODELLED & set(data)) | (NOT_MODELLED & set(zero))
                     | {k for b in ("fp16", "bf16", "bfloat16") if isinstance(data.get(b), dict)
                        for k in NOT_MODELLED & set(data[b]) if data[b][k] not in (False, None)})
    if skipped:
        notes.append(f"{PREFIX}: read but not costed (the model has no term for them): {', '.join(skipped)}")
    autos = sorted(k for k in AUTO_BATCH if data.get(k) == AUTO)
    stage = zero.get("stage", 0)
    if isinstance(stage, bool) or not isinstance(stage, int) or stage not in (0, 1, 2, 3):
        raise InputError(f"{PREFIX}.zero_optimization.stage", f"must be 0, 1, 2 or 3 (got {stage!r})")
    # DeepSpeed: Field(1, ge=0); hpZ is on above 1 (0 and 1 are off)
    hpz = zero.get("zero_hpz_partition_size", 1)
    if isinstance(hpz, bool) or not isinstance(hpz, int) or hpz < 0:
        raise InputError(f"{PREFIX}.zero_optimization.zero_hpz_partition_size",
                         f"must be a whole number >= 0 (got {hpz!r})")
    hpz = max(hpz, 1)
    parts = set()
    if _flag(zero, "zero_quantized_weights"):
        parts.add("qwz")
    if hpz > 1:
        parts.add("hpz")
    if _flag(zero, "zero_quantized_gradients"):
        parts.add("qgz")
    if parts and stage != 3:
        raise InputError(
            f"{PREFIX}.zero_optimization.stage",
            f"ZeRO++ ({zeropp_text(parts)}) requires stage 3 (got {stage})",
        )
    tp_section = data.get("tensor_parallel", {})
    if not isinstance(tp_section, dict):
        raise InputError(f"{PREFIX}.tensor_parallel", "must be an object like {\"autotp_size\": 4}")
    _unknown(tp_section, USED_TP | IGNORED_TP, f"{PREFIX}.tensor_parallel")
    autotp = tp_section.get("autotp_size", 0)
    if isinstance(autotp, bool) or not isinstance(autotp, int) or autotp < 0:
        raise InputError(f"{PREFIX}.tensor_parallel.autotp_size", f"must be a whole number >= 0 (got {autotp!r})")
    autotp = autotp if autotp > 1 else None  # DeepSpeed: 0 (its default) or 1 is AutoTP off
    if autotp is not None and stage == 3:
        raise InputError(f"{PREFIX}.zero_optimization.stage", f"AutoTP (tensor_parallel.autotp_size {autotp}) "
                         "composes with ZeRO stage 0, 1 or 2, not 3")
    if "bf16" in data and "bfloat16" in data:
        raise InputError(f"{PREFIX}.bfloat16", "is bf16's older name: give one of bf16 and bfloat16")
    bf16 = _enabled(data, "bf16" if "bf16" in data else "bfloat16")
    fp16 = _enabled(data, "fp16")
    if bf16 and fp16:
        raise InputError(f"{PREFIX}.bf16.enabled", "bf16 and fp16 cannot both be enabled")
    # "auto" matters only where no type is enabled outright (bf16 true beside fp16 "auto" is bf16)
    precision_auto = (None if bf16 or fp16 else
                      f"{'bf16' if 'bf16' in data else 'bfloat16'}.enabled" if bf16 is None else
                      "fp16.enabled" if fp16 is None else None)
    # the types whose block the config states (an absent block is off too, but says nothing)
    stated = {t for t, k in (("bf16", "bf16" if "bf16" in data else "bfloat16"), ("fp16", "fp16"))
              if isinstance(data.get(k), dict) and "enabled" in data[k]}
    if precision_auto:
        autos.append(precision_auto)
    if autos:
        notes.append(f"{PREFIX}: \"auto\" ({', '.join(autos)}) is the Hugging Face Trainer's, filled from its own "
                     "arguments: train_batch_size from --global-batch, train_micro_batch_size_per_gpu from "
                     "--micro-batch where given, the accumulation steps completed as DeepSpeed does, the 16-bit type "
                     "from --precision")
    precision = "bf16" if bf16 else "fp16" if fp16 else None
    fp32 = precision is None and precision_auto is None
    # keys that change the step but are not modelled are refused, not skipped: the gradients are reduced in
    # the 16-bit training type (DeepSpeed's default communication_data_type) and, under ZeRO-1/2, by
    # reduce-scatter (DeepSpeed's reduce_scatter: true; the engine hands the key to the stage 1/2 optimizer
    # only, so stage 3 -- whose ZeRO++ tutorial config sets it false -- reduce-scatters either way)
    comm = data.get("communication_data_type")
    comm = comm.lower() if isinstance(comm, str) else comm  # (DeepSpeed lower-cases it too)
    if comm is not None and comm not in ("fp16", "bf16", "fp32"):
        raise InputError(f"{PREFIX}.communication_data_type", f"must be fp16, bf16 or fp32, DeepSpeed's values "
                         f"(got {comm!r})")
    if comm == "fp32":
        raise InputError(f"{PREFIX}.communication_data_type", f"{comm!r} gradient reduction is not modelled "
                         "(gradients are reduced in the 16-bit training type); leave the key out or give it "
                         "that type")
    if comm is not None and precision is not None and comm != precision:
        raise InputError(f"{PREFIX}.communication_data_type", f"{comm!r} is not the training type {precision!r}: "
                         "a reduction in another 16-bit type is not modelled")
    reduce_scatter = zero.get("reduce_scatter", True)
    if not isinstance(reduce_scatter, bool):
        raise InputError(f"{PREFIX}.zero_optimization.reduce_scatter", f"must be true or false (got {reduce_scatter!r})")
    if not reduce_scatter and stage in (1, 2):
        raise InputError(f"{PREFIX}.zero_optimization.reduce_scatter", f"false (an all-reduce of the gradients under "
                         f"ZeRO-{stage}) is not modelled; ZeRO-1/2 are costed with DeepSpeed's default reduce-scatter")
    ulysses = _pos_int(data, "sequence_parallel_size", PREFIX)
    if ulysses is not None and ulysses > 1 and autotp is not None:
        raise InputError(f"{PREFIX}.sequence_parallel_size", f"Ulysses ({ulysses} ranks) beside AutoTP "
                         f"(tensor_parallel.autotp_size {autotp}) is not modelled: AutoTP composes with data "
                         "parallelism and ZeRO only")
    return DeepSpeedSettings(
        zero_stage=int(stage),
        zeropp=frozenset(parts),
        hpz_partition_size=hpz,
        micro_batch=_pos_int(data, "train_micro_batch_size_per_gpu", PREFIX),
        gradient_accumulation_steps=_pos_int(data, "gradient_accumulation_steps", PREFIX),
        train_batch_size=_pos_int(data, "train_batch_size", PREFIX),
        precision=precision,
        autotp_size=autotp,
        communication_data_type=comm,
        sequence_parallel_size=ulysses if ulysses is not None and ulysses > 1 else None,
        fp32=fp32,
        disabled=frozenset(t for t, v in (("bf16", bf16), ("fp16", fp16)) if v is False and t in stated),
        precision_auto=precision_auto,
        batch_auto=frozenset(k for k in AUTO_BATCH if data.get(k) == AUTO),
        notes=tuple(notes),
        activation_checkpointing="activation_checkpointing" in data,
    )


def check_options_agree(ds: DeepSpeedSettings, *, zero_stage: int | None, zeropp: str | None,
                        precision: str | None) -> None:
    """Options given on the command line beside the config must say what the config says: the config
    sets them, and a differing explicit value would otherwise be dropped without a word (the
    micro-batch is compared with the one the config's batch keys resolve to, by the caller)."""
    if zero_stage is not None and zero_stage != ds.zero_stage:
        raise InputError("zero_stage", f"--zero-stage {zero_stage} contradicts {PREFIX}.zero_optimization.stage "
                         f"({ds.zero_stage}); give one or the other")
    # the config's bf16 / fp16 block is DeepSpeed's 16-bit mixed precision; fp8 / fp4 matmuls (Transformer
    # Engine) run on top of it, so only the other 16-bit type contradicts it
    if precision in ("bf16", "fp16") and ds.precision is not None and precision != ds.precision:
        raise InputError("precision", f"--precision {precision} contradicts {PREFIX}.{ds.precision}.enabled; "
                         "give one or the other")
    if precision not in (None, "bf16", "fp16") and ds.precision == "fp16":
        raise InputError("precision", f"--precision {precision} on top of {PREFIX}.fp16 is not modelled (fp8 and fp4 "
                         "runs are costed on bf16 mixed precision: enable bf16 in the config)")
    # a config without a bf16 / fp16 block trains in the --precision given (its 16-bit part)
    comm = ds.communication_data_type
    if comm is not None and ds.precision is None and precision in ("bf16", "fp16") and comm != precision:
        raise InputError(f"{PREFIX}.communication_data_type", f"{comm!r} is not the training type {precision!r} "
                         "(--precision): a reduction in another 16-bit type is not modelled")
    if zeropp is not None and {p.strip().lower() for p in zeropp.split(",") if p.strip()} != set(ds.zeropp):
        raise InputError("zeropp", f"--zeropp {zeropp!r} contradicts the config's ZeRO++ keys "
                         f"({zeropp_text(ds.zeropp) or 'none'}); give one or the other")


def precision_notes(ds: DeepSpeedSettings, precision: str | None) -> list[str]:
    """The 16-bit type against ``--precision`` (None: not given): a type the config turns off is not the run's,
    a Trainer "auto" needs ``--precision``, a config that turns a type off and enables none trains in fp32
    (DeepSpeed's default), which is not costed unless ``--precision`` names the other 16-bit type; a config
    that states neither is costed in ``--precision``'s or the GPU's default type, said in the note returned."""
    if precision in ds.disabled:
        raise InputError("precision", f"--precision {precision} contradicts {PREFIX}.{precision}.enabled (false); "
                         "give one or the other")
    if precision is None and ds.precision_auto:
        raise InputError(f"{PREFIX}.{ds.precision_auto}", "\"auto\" is filled by the Hugging Face Trainer from its "
                         "own arguments: give --precision")
    other = {"bf16", "fp16"} - ds.disabled
    if ds.fp32 and ds.disabled and precision not in other:
        off = " and ".join(sorted(ds.disabled))
        raise InputError(f"{PREFIX}.{sorted(ds.disabled)[0]}.enabled", f"the config turns {off} off and enables no "
                         "16-bit type, so DeepSpeed trains in fp32, which is not costed"
                         + (f" (give --precision {other.pop()} if the run uses it)" if other else ""))
    if not ds.fp32:
        return []
    # no block enables a 16-bit type (a snippet, like the ZeRO++ tutorial's): said, not hidden
    return [f"{PREFIX} enables neither bf16 nor fp16 (DeepSpeed alone would train in fp32): costed in "
            + (f"{precision}, as --precision says" if precision else "the GPU's default 16-bit type (bf16; fp16 on "
               "a V100); give --precision or enable one in the config")]


#: a DeepSpeed config has no recompute key, the model code checkpoints: estimate's note without --recompute
RECOMPUTE_NOTE = ("the recompute mode is the model code's (deepspeed.checkpointing.checkpoint around its layers), "
                  "not a DeepSpeed config setting: costed without recompute; give --recompute full or selective as "
                  "the code checkpoints")


def load_deepspeed_config(path: str | Path) -> DeepSpeedSettings:
    """Read and validate a DeepSpeed config JSON file."""
    p = Path(path)
    text = read_text_file(p, PREFIX)
    try:
        data = load_json(text, PREFIX, str(p))
    except InputError as exc:
        if not text.strip():
            raise InputError(PREFIX, "the file is empty: a DeepSpeed config is a JSON object", str(p)) from None
        if exc.rule.startswith("not valid JSON"):  # DeepSpeed itself reads hjson (runtime/config.py hjson.load)
            raise InputError(PREFIX, f"{exc.rule}; DeepSpeed also reads hjson (comments, trailing commas), "
                             "which perfmodel does not: remove them", exc.where) from None
        raise
    return parse_deepspeed_config(data)


def check_hpz_partition(hpz_partition_size: int, n_gpus: int, dp: int, tp: int = 1,
                        field: str = f"{PREFIX}.zero_optimization.zero_hpz_partition_size") -> None:
    """DeepSpeed ``_ensure_divisibility``: the secondary group (``zero_hpz_partition_size`` consecutive
    global ranks, groups._create_zero_param_parallel_group) must divide the world size; the model keeps
    it inside one TP rank's data-parallel group (``dp``: its size, dp x cp), so it holds a whole number
    of TP groups and at most dp x cp of them. ``field``: the name the caller was given it under (the config
    key; the Python API's ``hpz_partition_size``)."""
    if hpz_partition_size > 1 and (n_gpus % hpz_partition_size or hpz_partition_size % tp
                                   or hpz_partition_size // tp > dp):
        name = field.rsplit(".", 1)[-1]
        raise InputError(
            field,
            f"must divide the GPU count and be tp times at most dp x cp ranks ({name}="
            f"{hpz_partition_size}, gpus={n_gpus}, tp={tp}, dp x cp={dp})",
        )
