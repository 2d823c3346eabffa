"""Print a chosen configuration in the words of the framework that will run it.

Flag and key names are the projects' own (checked against their sources):

* Megatron-LM ``megatron/training/arguments.py``: --attention-dropout, --hidden-dropout,
  --no-create-attention-mask-in-dataloader, --tensor-model-parallel-size,
  --pipeline-model-parallel-size, --context-parallel-size, --num-layers-per-virtual-pipeline-stage,
  --account-for-embedding-in-pipeline-split, --account-for-loss-in-pipeline-split,
  --sequence-parallel, --micro-batch-size, --global-batch-size, --seq-length,
  --recompute-granularity {full,selective}, --recompute-method {uniform,block},
  --recompute-num-layers, --use-distributed-optimizer, --use-megatron-fsdp,
  --data-parallel-sharding-strategy {no_shard,optim,optim_grads,optim_grads_params},
  --ckpt-format fsdp_dtensor, --fp8-format {e4m3,hybrid}, --fp8-recipe, --fp4-format e2m1. Pipeline
  send/recv overlap is on by default there (only --no-overlap-p2p-communication exists, store_false), which
  validate_args needs for an interleaved schedule on 2 stages, so nothing is emitted for it.
* Megatron-DeepSpeed (microsoft/Megatron-DeepSpeed ``megatron/arguments.py``): --num-key-value-heads,
  --use-rotary-position-embeddings, --no-position-embedding (store_false of add_position_embedding),
  --ds-sequence-parallel-size (DeepSpeed-Ulysses; "Cannot be combined
  with --sequence-parallel"), --zero-stage, --no-pipeline-parallel (DeepSpeed's PipelineModule is used
  unless it is given), and DeepSpeed's own --deepspeed --deepspeed_config FILE
  (``deepspeed.add_config_arguments``).
* DeepSpeed ``deepspeed/runtime/constants.py`` (train_batch_size, train_micro_batch_size_per_gpu,
  gradient_accumulation_steps, bf16/fp16.enabled, gradient_clipping, steps_per_print) and
  ``deepspeed/runtime/zero/config.py`` (zero_optimization: stage, overlap_comm, reduce_scatter,
  contiguous_gradients, zero_quantized_weights, zero_hpz_partition_size, zero_quantized_gradients),
  ``deepspeed/runtime/activation_checkpointing/config.py`` (partition_activations,
  contiguous_memory_optimization, cpu_checkpointing).
* torchtitan 0.2.0 (the PyPI release; its TOML job config changes between releases: ``TORCHTITAN_VERSION``),
  ``torchtitan/config/job_config.py``: [training] local_batch_size, global_batch_size, seq_len;
  [parallelism] data_parallel_replicate_degree, data_parallel_shard_degree, fsdp_reshard_after_forward,
  tensor_parallel_degree, pipeline_parallel_degree, pipeline_parallel_schedule,
  pipeline_parallel_microbatch_size, pipeline_parallel_layers_per_stage, context_parallel_degree,
  context_parallel_rotate_method;
  [activation_checkpoint] mode, selective_ac_option; [compile] enable; [model] converters
  (``components/quantization/float8.py`` registers "quantize.linear.float8"; mid-2025 sources named it
  "float8").
"""
from __future__ import annotations

import json
from typing import Mapping

from perfmodel.frameworks import PROFILES, framework_profile
from perfmodel.rules import AUTOTP, ZEROPP_STACKS, torchtitan_layers_per_stage, torchtitan_split_ok
from perfmodel.specs import JobSpec, ModelSpec
from perfmodel.zeropp import default_hpz_members

EMIT_TARGETS = ("megatron", "deepspeed", "torchtitan")
#: the torchtitan whose TOML keys are emitted (the first line of the emitted text says it)
TORCHTITAN_VERSION = ("torchtitan 0.2.0 job config (pip install torchtitan==0.2.0: torchtitan/config/job_config.py); "
                      "its keys change between releases")

_FSDP_STRATEGY = {2: "optim_grads", 3: "optim_grads_params"}


def _cfg(row: Mapping) -> dict:
    return {
        "tp": int(row["tp"]), "pp": int(row["pp"]), "dp": int(row["dp"]), "cp": int(row["cp"]),
        "vpp": int(row["vpp"]), "mb": int(row["micro_batch"]), "sp": bool(row["sp"]),
        "zero": int(row["zero_stage"]), "recompute": str(row["recompute"]),
        "zeropp": set(p for p in str(row.get("zeropp", "") or "").split(",") if p),
        "cp_kind": str(row.get("cp_kind", "ring") or "ring"),
        "offload": float(row.get("offload_fraction", 0.0) or 0.0),
    }


#: stacks whose launcher takes Megatron-DeepSpeed's flags (DeepSpeed engine underneath)
MEGATRON_DEEPSPEED = frozenset({"megatron-deepspeed"})
#: the stacks whose runs each target's text configures: a configuration costed for a named stack outside
#: the target's is said so (its overlaps and kernels were costed, not the target's)
TARGET_STACKS = {
    "megatron": frozenset({"megatron-lm", "nemo", "megatron-bridge", "megatron-kwai", "megascale", "meta-internal",
                           "megatron-deepspeed"}),
    "torchtitan": frozenset({"torchtitan"}),
    "deepspeed": ZEROPP_STACKS,
}
#: what each target's own stack is called for --framework
TARGET_FRAMEWORK = {"megatron": "megatron-lm", "torchtitan": "torchtitan", "deepspeed": "deepspeed"}


def megatron_deepspeed(job: JobSpec) -> bool:
    """The job runs on Megatron-DeepSpeed, whose flags differ from Megatron-LM's where DeepSpeed takes over."""
    return (job.framework or "").strip().lower() in MEGATRON_DEEPSPEED


def megatron_flags(model: ModelSpec, job: JobSpec, row: Mapping) -> list[str]:
    """Megatron-LM arguments (one token per list item) for the configuration ``row``, as it was
    costed: the communication-overlap flags only where the job's framework profile overlaps that
    communication (``megatron-lm`` is Megatron-LM as its arguments default, without them; ``nemo`` /
    ``megatron-bridge`` are Megatron-Core with its performance recipes' overlaps). Under
    Megatron-DeepSpeed, its own flags: Ulysses instead of Megatron-Core CP, ZeRO through DeepSpeed."""
    c = _cfg(row)
    if megatron_deepspeed(job):
        return _megatron_deepspeed_flags(model, job, c)
    profile = framework_profile(job.framework)
    L = model.n_layers
    f = _model_flags(model)
    if model.mlp == "relu2":  # Nemotron's squared ReLU (_add_network_size_args; Megatron's default is GeLU)
        f += ["--squared-relu"]
    if model.n_kv_heads != model.n_heads:
        f += ["--group-query-attention", "--num-query-groups", str(model.n_kv_heads)]
    if not model.learned_pos_emb:  # no position table was costed: rotary embeddings, or ALiBi (see the notes)
        f += ["--position-embedding-type", "none" if model.alibi else "rope"]
    f += [
        "--seq-length", str(job.seq_len), "--max-position-embeddings", str(job.seq_len),
        # causal masking is the attention kernel's: by default Megatron's data loader also builds a
        # micro-batch x s x s boolean mask per step (16 GiB at 131,072 tokens), which is not costed
        "--no-create-attention-mask-in-dataloader",
        "--tensor-model-parallel-size", str(c["tp"]),
        "--pipeline-model-parallel-size", str(c["pp"]),
        "--context-parallel-size", str(c["cp"]),
    ]
    if c["cp"] > 1 and c["cp_kind"] == "ulysses":  # Megatron-Core all-to-all context parallelism
        f += ["--cp-comm-type", "a2a"]
    # embedding and loss count as layers when L does not split into pp stages (of vpp chunks) but L + 2
    # does (validate_args: num_layers += 1 per --account-for-*; num_layers % pp == 0; layers per stage %
    # layers per virtual stage == 0)
    account = megatron_accounts_embedding_loss(L, c["pp"], c["vpp"])
    if account:
        f += ["--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split"]
    if c["vpp"] > 1:
        per_stage = (L + 2 if account else L) // c["pp"]
        f += ["--num-layers-per-virtual-pipeline-stage", str(per_stage // c["vpp"])]
    if c["sp"] and c["tp"] > 1:
        f += ["--sequence-parallel"]
    f += _batch_recompute_flags(job, c)
    if c["recompute"] == "balanced":  # Megatron-Kwai (examples/atc24/pretrain_llama.sh, CKPT=ours)
        f += ["--kaimm-recompute-norm", "--kaimm-recompute-mlp-activation-func"]
    if c["offload"] > 0:  # Megatron-Kwai pipeline-aware activation offloading
        f += ["--kaimm-offload-activation-ratio", f"{c['offload']:g}"]
    if c["zero"] == 1:
        f += ["--use-distributed-optimizer"]
    elif c["zero"] >= 2:
        f += ["--use-megatron-fsdp", "--data-parallel-sharding-strategy", _FSDP_STRATEGY[c["zero"]],
              "--use-distributed-optimizer", "--ckpt-format", "fsdp_dtensor", "--no-gradient-accumulation-fusion"]
    # gradients are reduced over dp x cp; ZeRO-3 (Megatron-FSDP) overlaps under the same two switches
    overlapped = (profile.zero3_overlap, profile.zero3_overlap) if c["zero"] >= 3 else (
        profile.dp_overlap, profile.param_gather_overlap)
    if c["dp"] * c.get("cp", 1) > 1 and overlapped[0] > 0:
        f += ["--overlap-grad-reduce"]
        if c["zero"] >= 1 and overlapped[1] > 0:
            f += ["--overlap-param-gather"]
    if c["tp"] > 1 and c["sp"] and profile.tp_overlap > 0:  # TransformerEngine userbuffers (needs SP)
        f += ["--tp-comm-overlap"]
    prec = job.precision
    f += ["--fp16"] if prec == "fp16" else ["--bf16"]
    if prec != "fp16":
        if prec == "fp8":
            f += ["--fp8-format", "hybrid"]
        elif prec == "mxfp8":
            f += ["--fp8-format", "e4m3", "--fp8-recipe", "mxfp8"]
        elif prec == "nvfp4":
            f += ["--fp4-format", "e2m1", "--fp4-recipe", "nvfp4"]
    return f


def _model_flags(model: ModelSpec) -> list[str]:
    """The shape flags Megatron-LM and Megatron-DeepSpeed share (GQA and positions differ: callers add them)."""
    f = [
        "--num-layers", str(model.n_layers), "--hidden-size", str(model.hidden_size),
        "--ffn-hidden-size", str(model.ffn_hidden_size), "--num-attention-heads", str(model.n_heads),
    ]
    if model.mlp_matrices == 3:
        f += ["--swiglu"]
    if not model.tied_embeddings:
        f += ["--untie-embeddings-and-output-weights"]
    if model.mlp != "gelu":  # the costed block has no linear biases (ModelSpec.n_params)
        f += ["--disable-bias-linear"]
        if model.qkv_bias:  # but the model's attention projections have theirs (Qwen2)
            f += ["--add-qkv-bias"]
        # nor dropout (estimate.model_arrays: the Llama family trains without; no masks in its activation
        # memory), where Megatron's default is 0.1 for both
        f += ["--attention-dropout", "0.0", "--hidden-dropout", "0.0"]
    return f


def _batch_recompute_flags(job: JobSpec, c: Mapping) -> list[str]:
    f = ["--micro-batch-size", str(c["mb"]), "--global-batch-size", str(job.global_batch)]
    if c["recompute"] == "selective":
        f += ["--recompute-granularity", "selective"]
    elif c["recompute"] == "full":
        f += ["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"]
    return f


def _megatron_deepspeed_flags(model: ModelSpec, job: JobSpec, c: Mapping) -> list[str]:
    """Megatron-DeepSpeed's flags for ``c``: its GQA and rotary switches, DeepSpeed-Ulysses for cp
    (``rules.RING_CP_STACK``: no ring CP), DeepSpeed's pipeline engine (no interleaving, its own layer
    partition) and ZeRO from the DeepSpeed config (``--emit deepspeed``) with the matching --zero-stage;
    no overlap switches (the profile costs none)."""
    f = _model_flags(model)
    if model.n_kv_heads != model.n_heads:
        f += ["--num-key-value-heads", str(model.n_kv_heads)]
    if not model.learned_pos_emb and not model.alibi:
        f += ["--use-rotary-position-embeddings"]
    if not model.learned_pos_emb:
        # no learned position table was costed: Megatron-DeepSpeed builds one unless told not to (its Embedding
        # adds it while args.add_position_embedding, on by default; its Llama scripts pass both switches)
        f += ["--no-position-embedding"]
    f += [
        "--seq-length", str(job.seq_len), "--max-position-embeddings", str(job.seq_len),
        "--tensor-model-parallel-size", str(c["tp"]),
        "--pipeline-model-parallel-size", str(c["pp"]),
    ]
    if c["pp"] == 1:
        f += ["--no-pipeline-parallel"]
    if c["cp"] > 1:
        f += ["--ds-sequence-parallel-size", str(c["cp"])]
    if c["sp"] and c["tp"] > 1:
        f += ["--sequence-parallel"]
    if job.flash_attention:  # costed with flash attention (--flash-attention): its FlashAttention-2 switch
        f += ["--use-flash-attn-v2"]
    f += _batch_recompute_flags(job, c)
    if c["recompute"] == "full":
        # full recompute through deepspeed.checkpointing, which the JSON's activation_checkpointing block tunes
        # (Megatron-DeepSpeed _add_activation_checkpoint_args: "uses activation checkpointing from deepspeed")
        f += ["--deepspeed-activation-checkpointing"]
    f += ["--fp16"] if job.precision == "fp16" else ["--bf16"]
    f += ["--deepspeed", "--deepspeed_config", "ds_config.json", "--zero-stage", str(c["zero"])]
    return f


def megatron_accounts_embedding_loss(n_layers: int, pp: int, vpp: int) -> bool:
    """Whether Megatron needs --account-for-embedding/loss-in-pipeline-split for this split: the layers
    do not divide into pp stages of vpp chunks, n_layers + 2 do (perfmodel.rules.VPP_LAYERS allows both)."""
    if pp <= 1:
        return False
    even = n_layers % pp == 0 and (n_layers // pp) % vpp == 0
    return not even and (n_layers + 2) % pp == 0 and ((n_layers + 2) // pp) % vpp == 0


def megatron_overlap_hint(job: JobSpec, row: Mapping) -> str | None:
    """What a Megatron-LM user could add beyond what was costed: the overlap flags the profile leaves off."""
    c, profile = _cfg(row), framework_profile(job.framework)
    if megatron_deepspeed(job):  # its gradient reduction is DeepSpeed's: no such switches
        return None
    extra = []
    overlapped = profile.zero3_overlap if c["zero"] >= 3 else profile.dp_overlap
    if c["dp"] * c["cp"] > 1 and overlapped == 0:
        extra.append("--overlap-grad-reduce" + (" --overlap-param-gather" if c["zero"] >= 1 else ""))
    if c["tp"] > 1 and c["sp"] and profile.tp_overlap == 0:
        extra.append("--tp-comm-overlap")
    if not extra:
        return None
    return (f"# costed as {job.framework} runs by default (no overlap of this communication); "
            f"{' '.join(extra)} should make it faster (--framework nemo costs those overlaps)")


def format_megatron(flags: list[str]) -> str:
    """One flag (with its value) per line, shell-continued."""
    lines, cur = [], []
    for tok in flags:
        if tok.startswith("--") and cur:
            lines.append(" ".join(cur))
            cur = []
        cur.append(tok)
    if cur:
        lines.append(" ".join(cur))
    return " \\\n".join(f"    {ln}" for ln in lines)


def deepspeed_alone(job: JobSpec) -> bool:
    """DeepSpeed without Megatron (``rules.AUTOTP``): its tensor parallelism is AutoTP, its layout user code."""
    return (job.framework or "").strip().lower() in AUTOTP


def autotp(job: JobSpec, c: Mapping) -> bool:
    """The configuration's tensor parallelism is DeepSpeed's AutoTP: tp > 1 under DeepSpeed alone."""
    return deepspeed_alone(job) and c["tp"] > 1


def hpz_partition_ranks(row: Mapping, c: dict) -> int:
    """zero_hpz_partition_size of the costed default group (``perfmodel.zeropp.default_hpz_members``):
    the row's NVLink domain (``nvlink_domain_gpus``; else its node, ``gpus_per_node``; else 8 GPUs)."""
    domain = row.get("nvlink_domain_gpus", row.get("gpus_per_node", 8))
    return int(c["tp"] * default_hpz_members(domain, c["dp"] * c["cp"], c["tp"]))


def deepspeed_config(model: ModelSpec, job: JobSpec, row: Mapping) -> dict:
    """A DeepSpeed JSON config (dict) for ``row``. PP/CP (and TP under Megatron-DeepSpeed) are not
    DeepSpeed config keys: the launcher takes them as flags, see ``megatron_flags``; under DeepSpeed
    alone TP is AutoTP's ``tensor_parallel.autotp_size``."""
    c = _cfg(row)
    gas = job.global_batch // (c["mb"] * c["dp"])
    cfg: dict = {
        "train_batch_size": job.global_batch,
        "train_micro_batch_size_per_gpu": c["mb"],
        "gradient_accumulation_steps": gas,
        "steps_per_print": 10,
        "gradient_clipping": 1.0,
    }
    if job.precision == "fp16":
        cfg["fp16"] = {"enabled": True}
    else:
        cfg["bf16"] = {"enabled": True}
    zero: dict = {
        "stage": c["zero"],
        "overlap_comm": c["zero"] >= 1,
        "contiguous_gradients": True,
        "reduce_scatter": True,
        # ZeRO++ (Wang et al. 2023, arXiv 2306.10209): quantized weights (qwZ), hierarchical
        # partitioning (hpZ: the secondary group the search costed, one NVLink domain's ranks that divide
        # the data-parallel group), quantized gradients (qgZ); ZeRO-3 only
        "zero_quantized_weights": "qwz" in c["zeropp"],
        "zero_hpz_partition_size": hpz_partition_ranks(row, c) if "hpz" in c["zeropp"] else 1,
        "zero_quantized_gradients": "qgz" in c["zeropp"],
    }
    cfg["zero_optimization"] = zero
    if deepspeed_alone(job) and c["cp"] > 1 and c["cp_kind"] == "ulysses":
        # without an mpu DeepSpeed divides the world by this key for its data-parallel size (runtime/config.py
        # DeepSpeedConfig: world_size = get_world_size() / config["sequence_parallel_size"]), which the batch
        # check then uses; Ulysses' sequence ranks hold the same weights and are ZeRO ranks too
        cfg["sequence_parallel_size"] = c["cp"]
        # ... but only where the config reaches it as a dict: given a file path, DeepSpeedConfig's
        # '"sequence_parallel_size" in config' tests the path string (runtime/config.py; DeepSpeed 0.17-0.18,
        # whose initialize() passes --deepspeed_config on as a path), so the batch check counts every rank.
        # Left out, train_batch_size is derived (micro x accumulation x the ranks it counts) and no check fails
        cfg.pop("train_batch_size", None)
    if autotp(job, c):
        # DeepSpeed alone shards the linear layers with AutoTP (deepspeed.ai/tutorials/autotp-training); its
        # batch check counts every rank when no mpu is given, so the batch is stated per data-parallel rank only
        cfg["tensor_parallel"] = {"autotp_size": c["tp"]}
        cfg.pop("train_batch_size", None)
    if c["recompute"] != "none":
        cfg["activation_checkpointing"] = {
            # partitioning the checkpoints over the TP ranks needs Megatron's mpu (deepspeed.checkpointing
            # .configure(mpu_=...)), which AutoTP does not hand it; the costed memory does not assume it either
            "partition_activations": c["tp"] > 1 and not autotp(job, c),
            "contiguous_memory_optimization": False,
            "cpu_checkpointing": False,
        }
    return cfg


def torchtitan_toml(model: ModelSpec, job: JobSpec, row: Mapping) -> str:
    """[training], [parallelism] and [activation_checkpoint] sections for ``row``.

    Data parallelism maps to FSDP2: ZeRO-3 = full sharding, ZeRO-1/2 = sharding with
    ``fsdp_reshard_after_forward = "never"`` (parameters stay gathered between forward and
    backward, like ZeRO-2; torchtitan has no optimizer-only sharding), ZeRO-0 = replication (DDP).
    torchtitan's TP always shards the norm/dropout region (sequence parallel)."""
    c = _cfg(row)
    dp = c["dp"]
    # replicated data parallelism (DDP) runs only alone: torchtitan's parallelize refuses DDP beside tp, pp or
    # cp ("DDP has not supported > 1D parallelism"); ZeRO-0 there is emitted as FSDP without resharding (notes)
    replicate, shard = (dp, 1) if c["zero"] == 0 and not torchtitan_ddp_beside_others(c) else (1, dp)
    reshard = "default" if c["zero"] >= 3 else "never"
    local = job.global_batch // dp if c["pp"] > 1 else c["mb"]
    lines = [
        f"# {TORCHTITAN_VERSION}",
        "[training]",
        f"local_batch_size = {local}",
        f"global_batch_size = {job.global_batch}",
        f"seq_len = {job.seq_len}",
        "",
        "[parallelism]",
        f"data_parallel_replicate_degree = {replicate}",
        f"data_parallel_shard_degree = {shard}",
        f'fsdp_reshard_after_forward = "{reshard}"',
        f"tensor_parallel_degree = {c['tp']}",
        f"context_parallel_degree = {c['cp']}",
        f"pipeline_parallel_degree = {c['pp']}",
    ]
    if c["cp"] > 1:
        # torchtitan 0.2.0 defaults to "allgather" (torch's _AllGatherRotater: all K/V shards gathered at once);
        # "alltoall" passes each K/V shard on to the next rank step by step behind the attention of the last,
        # the ring the model costs (torch.distributed.tensor.experimental._attention set_rotate_method)
        lines.append('context_parallel_rotate_method = "alltoall"')
    if c["pp"] > 1:
        schedule = "Interleaved1F1B" if c["vpp"] > 1 else "1F1B"
        lines += [
            f'pipeline_parallel_schedule = "{schedule}"',
            f"pipeline_parallel_microbatch_size = {c['mb']}",
        ]
        # left unset, torchtitan splits into pp stages (1F1B) or 2 pp (looped schedules); more chunks need
        # the layer count per stage that makes ceil((L + 2) / layers_per_stage) = pp x vpp stages
        lps = int(torchtitan_layers_per_stage(model.n_layers, c["pp"], c["vpp"])) if c["vpp"] > 2 else 0
        if lps:
            lines.append(f"pipeline_parallel_layers_per_stage = {lps}")
    # torchtitan's modes are none / selective / full: Megatron-Kwai's balanced recompute (norms and the MLP
    # activation) is closest to its selective one (see the notes)
    mode = "selective" if c["recompute"] == "balanced" else c["recompute"]
    lines += ["", "[activation_checkpoint]", f'mode = "{mode}"']
    if mode == "selective":
        lines.append('selective_ac_option = "op"')
    # the torchtitan rates perfmodel costs with are measured runs of compiled models
    lines += ["", "[compile]", "enable = true"]
    if job.precision == "fp8":  # torchao Float8Linear through the model converter
        lines += ["", "[model]", 'converters = ["quantize.linear.float8"]']
    return "\n".join(lines) + "\n"


def torchtitan_ddp_beside_others(c: Mapping) -> bool:
    """Replicated data parallelism over more than one rank beside tp, pp or cp: torchtitan does not run it
    (models/llama3/infra/parallelize.py: 'DDP has not supported > 1D parallelism')."""
    return c["dp"] > 1 and max(c["tp"], c["pp"], c["cp"]) > 1


def emit_notes(target: str, model: ModelSpec, job: JobSpec, row: Mapping, cluster=None) -> list[str]:
    """What the text for ``target`` does not carry of the costed configuration ``row``, one line each
    (printed after it): parts the target's format cannot express or that the launcher must add. With the
    ``cluster``, a configuration costed for another stack is also checked against what the target's own stack
    can run (``rules.CAPABILITY_RULES``)."""
    c, notes = _cfg(row), []
    stack = (job.framework or "").strip().lower()
    other_stack = stack in PROFILES and stack != "generic" and stack not in TARGET_STACKS[target]
    if other_stack and target != "deepspeed":  # (deepspeed: below, where its layout note does not say it already)
        notes.append(f"costed as {stack} runs it (its communication overlap and kernels), not as {target}'s own "
                     f"stack would: search with --framework {TARGET_FRAMEWORK[target]} to cost it there")
    if other_stack and cluster is not None:
        # e.g. torchtitan's FSDP with a pipeline, which Megatron-LM's and DeepSpeed's engines refuse
        from perfmodel.rules import CAPABILITY_RULES
        from perfmodel.search.space import structural_violations

        own = TARGET_FRAMEWORK[target]
        capability = {r.reason for r in CAPABILITY_RULES}
        broken = [r for r in structural_violations(model, cluster, job.model_copy(update={"framework": own}), dict(row))
                  if r in capability]
        if broken:
            notes.append(f"{own} cannot run this configuration as it stands ({'; '.join(broken)}): search with "
                         f"--framework {own} for one it runs")
    if target == "megatron":
        if model.mlp == "swiglu":
            # Megatron-DeepSpeed spells the choices in lower case (its examples_deepspeed Llama scripts)
            rms = "rmsnorm" if megatron_deepspeed(job) else "RMSNorm"
            notes.append("the normalization is not part of the costed shape: add your model's (Llama-style "
                         f"SwiGLU models: --normalization {rms}; Megatron's default is LayerNorm)")
        if model.mlp == "relu2" and megatron_deepspeed(job):
            notes.append(f"{model.name}'s squared-ReLU MLP was costed (two matrices, as GeLU's): no Megatron-DeepSpeed "
                         "flag is emitted for it (Megatron-LM's is --squared-relu); set the activation in its model code")
        if model.alibi:
            said = ("which Megatron-LM's --position-embedding-type does not offer: 'none' trains it without positions"
                    if not megatron_deepspeed(job) else "so only --no-position-embedding is emitted (no learned table)")
            notes.append(f"{model.name} uses ALiBi attention biases, {said}; BigScience's Megatron-DeepSpeed fork, which "
                         "trained BLOOM, takes --position-embedding-type alibi (bigscience train/tr11-176B-ml)")
        elif not model.learned_pos_emb:
            how = ("set your model's" if megatron_deepspeed(job)
                   else "add your model's --rotary-base")
            notes.append(f"the rotary base is not part of the costed shape: {how} (Llama 3: 500000; "
                         "Megatron's default is 10000)")
        if c["zero"] >= 2 and not megatron_deepspeed(job):
            notes.append("do not export CUDA_DEVICE_MAX_CONNECTIONS=1: Megatron-FSDP (--use-megatron-fsdp) needs it "
                         "unset or above 1 (validate_args), also with tp or cp > 1")
        elif (c["tp"] > 1 or c["cp"] > 1) and not megatron_deepspeed(job) and not row.get("blackwell_or_later"):
            # (Megatron-LM validate_args asks for it only below compute capability 10, Blackwell: a row that
            # does not say its GPU's generation gets the note)
            notes.append("export CUDA_DEVICE_MAX_CONNECTIONS=1 before launching: Megatron expects it with tp or "
                         "cp > 1 on GPUs before Blackwell (kernel order that its communication overlap relies on)")
        if megatron_deepspeed(job):
            notes.append("ds_config.json is the DeepSpeed config of this configuration: write it with --emit deepspeed")
            if job.precision not in ("bf16", "fp16"):
                notes.append(f"{job.precision} was costed: Megatron-DeepSpeed has no Transformer Engine "
                             "low-precision switch; --bf16 is emitted")
        elif c["vpp"] > 1 and c["pp"] == 2:
            notes.append("keep Megatron's default pipeline send/recv overlap (do not add "
                         "--no-overlap-p2p-communication): validate_args refuses interleaving on 2 pipeline "
                         "stages without it")
        if not megatron_deepspeed(job) and model.n_layers % c["pp"] and (model.n_layers + 2) % c["pp"]:
            notes.append(f"pp={c['pp']} splits {model.n_layers} layers unevenly, as {job.framework or 'the stack'} "
                         "does: Megatron-LM needs pp to divide them, or --decoder-first-pipeline-num-layers / "
                         "--decoder-last-pipeline-num-layers for the uneven first and last stages")
        if c["recompute"] == "balanced" or c["offload"] > 0:
            notes.append("the --kaimm-* flags are Megatron-Kwai's (kwai/Megatron-Kwai, its ATC'24 examples): "
                         "upstream Megatron-LM refuses them, and without them runs no balanced recompute or "
                         "activation offloading")
        if c["zeropp"] and not megatron_deepspeed(job):  # Megatron-DeepSpeed: in ds_config.json
            notes.append(f"ZeRO++ ({','.join(sorted(c['zeropp']))}) was costed: Megatron-LM has no quantized "
                         "weight/gradient collectives; use DeepSpeed (--emit deepspeed)")
    if target == "deepspeed":
        # what the JSON states (AutoTP's tp, Ulysses' sequence_parallel_size) is not "layout" to build in code
        stated = {"tp": autotp(job, c), "cp": deepspeed_alone(job) and c["cp_kind"] == "ulysses"}
        layout = [f"{k}={c[k]}" for k in ("tp", "pp", "cp", "vpp") if c[k] > 1 and not stated.get(k)]
        if layout and deepspeed_alone(job):
            builds = [text for k, text in (("pp", "PipelineModule(num_stages=pp)"), ("cp", "DeepSpeed-Ulysses "
                      "DistributedAttention over cp ranks"), ("tp", "the tensor-parallel layers"),
                      ("vpp", "the interleaved stages")) if any(x.startswith(f"{k}=") for x in layout)]
            notes.append(f"the layout {' '.join(layout)} is not a DeepSpeed config setting: your code builds it "
                         f"({', '.join(builds)}); its batch keys assume a data-parallel size of dp={c['dp']}")
        elif layout and megatron_deepspeed(job):
            notes.append(f"the layout {' '.join(layout)} is not a DeepSpeed config setting: the launcher takes it "
                         "(Megatron-DeepSpeed flags, see --emit megatron); train_batch_size assumes its "
                         f"data-parallel size is dp={c['dp']}")
        elif layout:
            notes.append(f"the layout {' '.join(layout)} is not a DeepSpeed config setting, and it was costed for "
                         f"{job.framework or 'a generic stack'}: search with --framework megatron-deepspeed (or "
                         f"deepspeed) for a layout DeepSpeed runs; train_batch_size assumes dp={c['dp']}")
        if deepspeed_alone(job) and stated["cp"] and c["cp"] > 1:
            notes.append(f"sequence_parallel_size={c['cp']} tells DeepSpeed the Ulysses group; the model code wraps its "
                         "attention in DeepSpeed-Ulysses' DistributedAttention")
            notes.append(f"train_batch_size is left out: DeepSpeed reads sequence_parallel_size for its batch check "
                         f"only from a config passed as a dict (from a file path its check counts every rank); the "
                         f"costed global batch is {job.global_batch} sequences = micro-batch {c['mb']} x "
                         f"{job.global_batch // (c['mb'] * c['dp'])} accumulation steps x dp={c['dp']}")
        if c["cp"] > 1 and c["cp_kind"] != "ulysses":
            notes.append("ring context parallelism was costed: DeepSpeed has none (its sequence parallelism is "
                         "Ulysses' all-to-all)")
        if autotp(job, c):
            notes.append(f"train_batch_size is left out: without an mpu DeepSpeed's batch check counts every rank "
                         f"(tp x dp); the costed global batch is {job.global_batch} sequences = micro-batch "
                         f"{c['mb']} x {job.global_batch // (c['mb'] * c['dp'])} accumulation steps x dp={c['dp']}")
        if job.precision not in ("bf16", "fp16"):
            notes.append(f"{job.precision} GEMMs come from Transformer Engine in the model code: the JSON has no "
                         "switch for them and enables bf16")
        if job.flash_attention and deepspeed_alone(job):
            notes.append("flash attention was costed: it is the model code's (e.g. Hugging Face "
                         "attn_implementation='flash_attention_2'), not a DeepSpeed config setting")
        if c["recompute"] in ("selective", "balanced"):
            notes.append(f"{c['recompute']} recompute is chosen in the model code (Megatron-DeepSpeed "
                         "--recompute-granularity selective), not in this JSON; estimate --deepspeed-config reads "
                         f"it back with --recompute {'selective' if c['recompute'] == 'balanced' else c['recompute']}")
        elif c["recompute"] == "full":
            notes.append("full recompute is the model code's (each layer wrapped in deepspeed.checkpointing.checkpoint;"
                         " Megatron-DeepSpeed --checkpoint-activations): the activation_checkpointing block only "
                         "tunes it; estimate --deepspeed-config reads it back with --recompute full")
    if target == "deepspeed" and other_stack and not any("costed for" in n for n in notes):
        notes.append(f"costed as {stack} runs it (its communication overlap and kernels), not as deepspeed's own "
                     "engine would: search with --framework deepspeed to cost it there")
    if target == "torchtitan":
        if c["zero"] == 0 and torchtitan_ddp_beside_others(c):
            notes.append("ZeRO-0 (replicated) data parallelism was costed, which torchtitan runs only alone (DDP "
                         "beside tp, pp or cp: 'DDP has not supported > 1D parallelism'): emitted as FSDP with "
                         "fsdp_reshard_after_forward = \"never\", which adds a gradient reduce-scatter and a "
                         "parameter all-gather per step")
        if c["zero"] in (1, 2):
            notes.append(f"torchtitan has no ZeRO-{c['zero']} (optimizer-only sharding): emitted as FSDP with "
                         "fsdp_reshard_after_forward = \"never\", which shards the parameters too")
        if c["cp"] > 1 and c["cp_kind"] == "ulysses":
            notes.append("torchtitan's context parallelism is ring attention: the costed Ulysses all-to-all "
                         "is not available")
        if c["recompute"] == "balanced":
            notes.append("balanced recompute is Megatron-Kwai's: emitted as torchtitan's selective mode, "
                         "which recomputes more")
        if c["pp"] > 1 and not bool(torchtitan_split_ok(model.n_layers, c["pp"], c["vpp"])):
            notes.append(f"torchtitan cannot split {model.n_layers} layers (+ embedding and output) into "
                         f"pp x vpp = {c['pp'] * c['vpp']} stages: no pipeline_parallel_layers_per_stage "
                         "gives that many; its default split (2 stages per rank) is emitted")
        if job.precision in ("mxfp8", "nvfp4"):
            notes.append(f"{job.precision} is not emitted: enable torchtitan's MX converter for it "
                         "(converters = [\"quantize.linear.mx\"])")
        if job.precision == "fp8":
            notes.append("the fp8 converter is named quantize.linear.float8 from torchtitan 0.2.0 on; mid-2025 "
                         "sources (before its PR #1701) named it float8")
        if job.precision == "fp16":
            notes.append("fp16 was costed, but torchtitan's mixed precision takes bfloat16 or float32 only "
                         "([training] mixed_precision_param): on a GPU without bf16 tensor cores (V100) "
                         "torchtitan is not an option at this speed")
    if c["offload"] > 0 and target != "megatron":
        notes.append(f"activation offloading ({c['offload']:g} of a micro-batch) is Megatron-Kwai's: "
                     f"{target} cannot express it")
    if target == "torchtitan" and c["zeropp"]:
        notes.append(f"ZeRO++ ({','.join(sorted(c['zeropp']))}) is DeepSpeed's: {target} cannot express it")
    return notes


def emit(target: str, model: ModelSpec, job: JobSpec, row: Mapping) -> str:
    """The configuration ``row`` as text for ``target`` (one of ``EMIT_TARGETS``)."""
    if target == "megatron":
        return format_megatron(megatron_flags(model, job, row))
    if target == "deepspeed":
        return json.dumps(deepspeed_config(model, job, row), indent=2)
    if target == "torchtitan":
        return torchtitan_toml(model, job, row)
    raise ValueError(f"emit: must be one of {', '.join(EMIT_TARGETS)} (got {target!r})")
