"""Structural rules of a parallel configuration, written once as numpy predicates.

Each rule says which input it is about (``field``), what must hold (``rule``) and when it is
broken, as a predicate over a mapping of arrays (or scalars) named like ``STEP_INPUTS`` plus
``n_gpus``, ``gpus_per_node``, ``framework`` and ``nvlink_domain_gpus``. Three callers apply them:

* ``estimate.check_config`` raises the first broken rule of one configuration as an
  ``InputError`` naming the field, the rule and the values (``CONFIG_RULES``: the layout is well
  formed; a what-if the named stack cannot run is still costed);
* ``search.space`` masks whole grids with a reason code per rule (``CONFIG_RULES``, what the stack
  can run, ``CAPABILITY_RULES``, and the search's own pruning, ``SEARCH_ONLY_RULES``);
* ``runs.runs_to_inputs`` marks measured runs that break a rule ``invalid`` (``RUN_RULES``: a run
  happened, so only the rules without which it cannot be costed).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

import numpy as np

from perfmodel.costs.compute import FLASH_MAX_HEAD_DIM, HEAD_DIM_ALIGN
from perfmodel.costs.memory import RECOMPUTE_BALANCED, RECOMPUTE_FULL
from perfmodel.frameworks import PROFILES, gpu_runs_fused_attention

#: frameworks whose ZeRO-2/3 (or FSDP) does not compose with pipeline parallelism:
#: DeepSpeed's PipelineEngine asserts "ZeRO-2 and ZeRO-3 are incompatible with pipeline
#: parallelism" (deepspeed/runtime/pipe/engine.py); Megatron-LM's --use-torch-fsdp2 asserts
#: pipeline_model_parallel_size == 1 (megatron/training/arguments.py, validate_args)
ZERO23_NO_PP = frozenset({
    "megatron-lm", "megatron-deepspeed", "nemo", "megatron-bridge", "megascale", "megatron-kwai",
    "gpt-neox", "deepspeed",
})
#: stacks whose ZeRO stops at stage 1 (nanotron: ZeroDistributedOptimizer shards optimizer states only)
ZERO1_ONLY = frozenset({"nanotron"})
#: stacks with DDP (ZeRO-0) or fully sharded data parallelism (ZeRO-3) and nothing in between
#: (torchtitan: data_parallel_replicate_degree / data_parallel_shard_degree, FSDP2 or HSDP)
ZERO_0_3_ONLY = frozenset({"torchtitan"})


def default_zero_stage(framework: str | None) -> int:
    """The ZeRO stage a configuration that states none runs: 1 (the distributed optimizer, ``ParallelSpec``'s
    default), or 3 under a stack whose sharded data parallelism is FSDP, which has no stage 1
    (``ZERO_0_3_ONLY``; ``validate`` gives a blank cell of such a stack's run the same)."""
    return 3 if (framework or "").strip().lower() in ZERO_0_3_ONLY else 1


#: stacks whose tensor parallelism always shards the sequence between the TP regions (torchtitan's
#: Llama TP plan: SequenceParallel on the norms, no replicated-activation mode)
SP_ALWAYS = frozenset({"torchtitan"})
#: stacks that implement Kuaishou's balanced recompute and activation offloading (Megatron-Kwai
#: --kaimm-recompute-norm/--kaimm-recompute-mlp-activation-func, --kaimm-offload-activation-ratio)
KWAI_FEATURES = frozenset({"megatron-kwai"})
#: stacks with all-to-all (Ulysses) context parallelism: Megatron-Core --cp-comm-type a2a,
#: DeepSpeed-Ulysses sequence parallelism
ULYSSES_FRAMEWORKS = frozenset({"megatron-lm", "nemo", "megatron-bridge", "megatron-kwai", "megascale", "deepspeed",
                                "megatron-deepspeed"})

#: stacks whose pipeline schedules are not interleaved: DeepSpeed's PipelineEngine runs TrainSchedule, a
#: 1F1B over one stage per rank (deepspeed/runtime/pipe/schedule.py), which Megatron-DeepSpeed and GPT-NeoX
#: use; nanotron's engines are AllForwardAllBackward and OneForwardOneBackward (nanotron/parallel/
#: pipeline_parallel/engine.py)
NO_INTERLEAVING = frozenset({"deepspeed", "megatron-deepspeed", "gpt-neox", "nanotron"})
#: stacks without ring (K/V-passing) context parallelism: DeepSpeed and the Megatron-DeepSpeed/GPT-NeoX
#: family split the sequence with DeepSpeed-Ulysses all-to-all only (--ds-sequence-parallel-size);
#: OneFlow's GPT and the flash-attention training scripts have no sequence split at all
NO_RING_CP = frozenset({"deepspeed", "megatron-deepspeed", "gpt-neox", "oneflow", "flash-attn"})

#: stacks whose context parallelism is Megatron-Core's: whatever the communication type (p2p ring or a2a),
#: the batch is split along the sequence in 2 cp load-balanced chunks (megatron/training/utils.py
#: get_batch_on_this_cp_rank: seq viewed as (2 cp, seq / (2 cp)))
MEGATRON_CORE_CP = frozenset({"megatron-lm", "nemo", "megatron-bridge", "megatron-kwai", "megascale"})
#: stacks on torch.distributed.pipelining (torchtitan): ScheduleInterleaved1F1B runs the micro-batches in
#: rounds of pp, and needs their number to split into equal rounds (n_microbatches % rounds == 0, rounds =
#: max(1, n_microbatches // pp)); Megatron-Core groups pp micro-batches per virtual stage and raises unless
#: the count is a multiple of the group (microbatch_group_size_per_vp_stage, default pp:
#: "The remainder of M ... should be 0, or larger than or equal to the pipeline-parallel size")
TORCH_PIPELINING = frozenset({"torchtitan"})
#: stacks with ZeRO++ (DeepSpeed's zero_quantized_weights / zero_hpz_partition_size /
#: zero_quantized_gradients): DeepSpeed and the stacks that train through its engine
ZEROPP_STACKS = frozenset({"deepspeed", "megatron-deepspeed", "gpt-neox"})
#: the named stacks without it (a job that names no stack, or one perfmodel has no profile for, may cost
#: ZeRO++ as a what-if)
NO_ZEROPP_STACKS = frozenset(name for name in PROFILES if name != "generic") - ZEROPP_STACKS
#: stacks whose data parallelism without sharding (DDP) does not compose with other parallelism:
#: torchtitan raises "DDP has not supported > 1D parallelism" where dp_replicate > 1 on a mesh of more
#: than one dimension (models/llama3/infra/parallelize.py), and with cp > 1 it shards anyway
#: (parallel_dims.py: fsdp_enabled = dp_shard_enabled or cp_enabled); with dp = cp = 1 (pure TP / PP)
#: neither DDP nor FSDP is applied, which is zero_stage 0 (and trains in float32: AMP_NEEDS_FSDP)
DDP_1D_ONLY = frozenset({"torchtitan"})
#: stacks whose mixed precision comes from FSDP (fully_shard's MixedPrecisionPolicy) or, for plain DDP or one
#: device, torch.autocast: torchtitan's maybe_enable_amp (torchtitan/distributed/utils.py) turns it off with
#: "Mixed precision training with TP or PP is only supported when FSDP/HSDP/CP is enabled" where TP or PP
#: runs with neither a sharded data-parallel degree nor CP: the job trains in float32, not the costed type
AMP_NEEDS_FSDP = frozenset({"torchtitan"})
#: stacks that need the sequence length to be a multiple of 2 x tp x cp, whatever the CP: torchtitan's
#: ParallelDims.seq_len_divisor (tp for sequence parallelism, 2 cp for load-balanced CP chunks), asserted
#: in its models' parallelize functions
SEQ_LEN_DIVISOR_2_TP_CP = frozenset({"torchtitan"})
#: stacks whose tensor parallelism needs whole key/value heads per rank: Megatron-Core's TransformerConfig
#: ("num_query_groups ... must be a multiple of tensor_model_parallel_size"), nanotron's attention
#: ("Number of key/value heads ... must be divisible by TP size"), torchtitan's (its k/v projections are
#: column-sharded and viewed as heads of head_dim); every named stack here, the generic one aside
KV_HEADS_PER_RANK = frozenset(name for name in PROFILES if name != "generic")
#: stacks where Megatron's sequence parallelism and DeepSpeed-Ulysses exclude each other: Megatron-DeepSpeed
#: asserts "sequence_parallel_size > 1 enables DeepSpeed's sequence parallel, which is not compatible with
#: Megatron-LM's sequence parallel" (megatron/initialize.py)
ULYSSES_NO_SP = frozenset({"megatron-deepspeed"})

#: stacks whose pipeline is DeepSpeed's PipelineEngine, whose process grid has pipe, data and model axes only
#: (deepspeed/runtime/pipe/topology.py PipeModelDataParallelTopology): Ulysses ranks would count as data
#: ranks there (train_batch_size and the gradient reduction over the grid's data groups), so DeepSpeed-Ulysses
#: runs without pipelining (DeepSpeed issue #4645, "Why can't Pipeline Parallelism do sequence parallel?", open)
ULYSSES_NO_PP = frozenset({"deepspeed", "megatron-deepspeed", "gpt-neox"})

#: stacks whose tensor parallelism is DeepSpeed's AutoTP (DeepSpeed without Megatron): it shards the linear
#: layers only, with ZeRO stage 0, 1 or 2 (deepspeed.ai/tutorials/autotp-training: "ZeRO Optimization ...
#: (Stage 0, 1, or 2)"), and has no sequence parallelism
AUTOTP = frozenset({"deepspeed"})

#: stacks on Transformer Engine attention: a head dimension flash and cuDNN's fused attention do not
#: take (not a multiple of 8, or above 256) leaves them UnfusedDotProductAttention, which has no context
#: parallelism (TE dot_product_attention/utils.py: "Disabling UnfusedDotProductAttention as it does not
#: support context parallelism"): no attention backend is left
TE_ATTENTION = frozenset(name for name, p in PROFILES.items()
                         if p.flash_attention and not p.flash_pads_misaligned_heads)

#: stacks whose pipeline takes stages of unequal layer counts: DeepSpeed's PipelineModule partitions by
#: parameters or layer type with partition_balanced (deepspeed/runtime/pipe/module.py; Megatron-DeepSpeed and
#: GPT-NeoX train through it), nanotron balances its blocks' costs (build_model), torchtitan rounds its
#: layers per stage up (its own rule, TT_PP_SPLIT). The busiest stage holds ceil(n_layers / pp) layers,
#: which the step model costs. Megatron-Core needs an even split (or --decoder-first/last-pipeline-num-layers,
#: which the search does not emit)
UNEVEN_PP = frozenset({"deepspeed", "megatron-deepspeed", "gpt-neox", "nanotron", "torchtitan"})


def unplaceable_factor(n_gpus: int, n_heads: int, n_layers: int, seq_len: int, global_batch: int,
                       framework: str | None) -> int | None:
    """The part of ``n_gpus`` that no parallel size can take, when there is one: n = tp x pp x cp x dp with tp
    dividing the heads, pp the layers (or layers + 2; any pp up to the layers where the stack splits unevenly),
    cp the sequence and dp the global batch, so a factor sharing nothing with those (96 GPUs for a 64-head,
    80-layer model at 8K tokens and a batch of 512: the 3) leaves the count without a layout. Each axis takes
    the largest part it can (gcd), in turn; None when every factor is placed (the count may still have no
    layout for another rule, which the rejection counts name)."""
    from math import gcd, prod

    left = n_gpus
    pp_room = (prod(range(1, n_layers + 1)) if (framework or "").lower() in UNEVEN_PP
               else n_layers * (n_layers + 2))
    for room in (n_heads, pp_room, seq_len, global_batch):
        left //= gcd(left, room)
    return left if left > 1 else None


def unplaceable_text(n_gpus: int, factor: int, n_heads: int, n_layers: int, seq_len: int, global_batch: int) -> str:
    """``unplaceable_factor``'s reason, one clause."""
    return (f"no parallel size can take the factor {factor} of {n_gpus:,} GPUs (tp divides the {n_heads} heads, pp "
            f"the {n_layers} layers, cp the {seq_len:,}-token sequence, dp the global batch {global_batch:,})")

#: stacks that split the pipeline by a layer count per (virtual) stage with the embedding and the
#: output counted as one layer each (torchtitan pipeline_parallel_layers_per_stage;
#: pipeline_parallel_first/last_stage_less_layers = 1)
PP_LAYERS_PER_STAGE = frozenset({"torchtitan"})

Arrays = Mapping[str, np.ndarray]


def torchtitan_layers_per_stage(n_layers, pp, vpp):
    """torchtitan's ``pipeline_parallel_layers_per_stage`` that gives pp x vpp (virtual) stages, or 0 where
    none does: its pipeline split (torchtitan/distributed/pipeline_parallel.py) builds
    ceil((n_layers + 1 + 1) / layers_per_stage) stages and requires that to be pp x stages per rank.
    Left unset, it builds pp stages for a single-stage schedule (1F1B) and 2 pp for a looped one."""
    stages = np.asarray(pp) * np.asarray(vpp)
    units = np.asarray(n_layers) + 2
    lps = -(-units // stages)
    return np.where(-(-units // np.maximum(lps, 1)) == stages, lps, 0)


def torchtitan_split_ok(n_layers, pp, vpp):
    """Whether torchtitan can run pp x vpp (virtual) stages: its default split (vpp 1 or 2, into at most
    n_layers + 2 stages: generate_llm_fqn_per_model_part raises "Number of stages ... cannot be greater than
    effective layers") or a ``pipeline_parallel_layers_per_stage`` (``torchtitan_layers_per_stage``)."""
    default = (np.asarray(vpp) <= 2) & (np.asarray(pp) * np.asarray(vpp) <= np.asarray(n_layers) + 2)
    return default | (torchtitan_layers_per_stage(n_layers, pp, vpp) > 0)


def job_values(model, cluster, job) -> dict:
    """The model, cluster and job quantities the rules read (scalars; the framework as a str)."""
    return {"n_gpus": cluster.n_gpus, "gpus_per_node": cluster.gpus_per_node,
            "nvlink_domain_gpus": cluster.nvlink_domain_gpus, "n_layers": model.n_layers,
            "n_heads": model.n_heads, "n_kv_heads": model.n_kv_heads, "head_dim": model.hidden_size / model.n_heads,
            "seq_len": job.seq_len,
            "global_batch": job.global_batch, "framework": (job.framework or "").lower(),
            # fused attention: an Ampere-or-newer GPU, and not turned off for the job (--no-flash-attention)
            "fused_attention": float(gpu_runs_fused_attention(cluster.gpu) and job.flash_attention is not False)}


@dataclass(frozen=True)
class Rule:
    code: int  # reason code in the search (int8, 0 = valid)
    field: str  # the input the rule is about
    rule: str  # what must hold, read after the field name
    broken: Callable[[Arrays], np.ndarray]
    shows: tuple[str, ...] = ()  # quantities quoted in a one-configuration message

    @property
    def reason(self) -> str:
        """One line for the search's rejection table: ``tp must divide n_heads``."""
        return f"{self.field} {self.rule}" if self.rule.split()[0] in ("must", "needs", "with", "above") else self.rule

    def message(self, x: Arrays) -> str:
        """The rule with the values of one configuration, for an ``InputError``."""
        values = ", ".join(f"{name}={_value(name, x)}" for name in self.shows)
        return f"{self.rule} ({values})" if values else self.rule


def _value(name: str, x: Arrays):
    derived = {
        "tp*pp*dp*cp": lambda: x["tp"] * x["pp"] * x["dp"] * x["cp"],
        "micro_batch*dp": lambda: x["micro_batch"] * x["dp"],
        "layers per stage": lambda: -(-x["n_layers"] // x["pp"]),
        "micro-batches": lambda: _micro_batches(x),
        "n_heads/tp": lambda: x["n_heads"] // x["tp"],
        "n_kv_heads/tp": lambda: max(x["n_kv_heads"] // x["tp"], 1),
        "gpus": lambda: x["n_gpus"],
    }
    v = derived[name]() if name in derived else x[name]
    v = np.asarray(v).item() if np.ndim(v) == 0 or np.size(v) == 1 else v
    return int(v) if isinstance(v, float) and v.is_integer() else v


def _framework_in(x: Arrays, names: frozenset[str]):
    fw = x["framework"]
    if isinstance(fw, str):  # one configuration: plain Python, fast
        return fw in names
    return np.isin(np.asarray(fw, dtype=object), list(names))


def _per_stage_ok(x: Arrays, vpp) -> np.ndarray:
    # layers per stage: Megatron splits L over pp, or L + 2 with embedding and loss counted as layers
    # (Megatron-Core account_for_embedding/loss_in_pipeline_split)
    L, pp = x["n_layers"], x["pp"]
    return (-(-L // pp) % vpp == 0) | ((L + 2) // pp % vpp == 0)


def _micro_batches(x: Arrays):
    """Micro-batches per step on each data-parallel rank: global_batch / (micro_batch x dp)."""
    return x["global_batch"] // (x["micro_batch"] * x["dp"])


def _interleaving_broken(x: Arrays):
    """Interleaved schedules need at least pp micro-batches per step, and the count to fit the stack's
    grouping (``TORCH_PIPELINING``: equal rounds; Megatron-Core and the rest: a multiple of pp)."""
    micro = _micro_batches(x)
    pp = x["pp"]
    torch_rounds = micro % np.maximum(micro // np.maximum(pp, 1), 1) != 0
    grouping = np.where(_framework_in(x, TORCH_PIPELINING), torch_rounds, micro % np.maximum(pp, 1) != 0)
    return (x["vpp"] > 1) & ((micro < pp) | grouping)


def _zeropp_on(x: Arrays):
    return (np.asarray(x.get("qwz", 0)) > 0) | (np.asarray(x.get("hpz", 0)) > 0) | (np.asarray(x.get("qgz", 0)) > 0)


def _ulysses_heads_broken(x: Arrays):
    on = (x["cp_ulysses"] == 1) & (x["cp"] > 1)

    def broken(a, kv, tp, cp):
        return ((a // tp) % cp != 0) | (np.maximum(kv // tp, 1) % cp != 0)

    if np.ndim(on) == 0:
        return on & broken(x["n_heads"], x["n_kv_heads"], x["tp"], x["cp"])
    # the integer divisions only where Ulysses runs (keeps the search fast)
    idx = np.flatnonzero(on)
    at = [np.broadcast_to(x[k], on.shape).ravel()[idx] for k in ("n_heads", "n_kv_heads", "tp", "cp")]
    out = np.zeros(on.shape, dtype=bool)
    out.ravel()[idx] = broken(*at)
    return out


GPUS = Rule(1, "dp", "tp*pp*dp*cp must equal gpus",
            lambda x: x["tp"] * x["pp"] * x["dp"] * x["cp"] != x["n_gpus"], ("tp*pp*dp*cp", "gpus"))
TP_HEADS = Rule(2, "tp", "must divide n_heads", lambda x: x["n_heads"] % x["tp"] != 0, ("tp", "n_heads"))
TP_KV_HEADS = Rule(3, "tp", "must divide n_kv_heads or be a multiple of it",
                   lambda x: (x["n_kv_heads"] % x["tp"] != 0) & (x["tp"] % x["n_kv_heads"] != 0), ("tp", "n_kv_heads"))
TP_DOMAINS = Rule(4, "tp", "must fit in two NVLink domains", lambda x: x["tp"] > 2 * x["nvlink_domain_gpus"])
PP_LAYERS = Rule(
    5, "pp", "must divide n_layers, or n_layers + 2 with embedding and loss counted as layers "
    "(Megatron-Core account_for_embedding/loss_in_pipeline_split), unless the framework splits layers "
    "unevenly (deepspeed, megatron-deepspeed, gpt-neox, nanotron, torchtitan) and pp <= n_layers",
    lambda x: np.where(_framework_in(x, UNEVEN_PP) if "framework" in x else False, x["pp"] > x["n_layers"],
                       (x["n_layers"] % x["pp"] != 0) & ((x["n_layers"] + 2) % x["pp"] != 0)),
    ("pp", "n_layers"))
CP_RING_SEQ = Rule(6, "cp", "ring CP, and any Megatron-Core CP, needs seq_len divisible by 2*cp (load-balanced "
                   "chunks)",
                   lambda x: (x["cp"] > 1) & ((x["cp_ulysses"] == 0) | _framework_in(x, MEGATRON_CORE_CP))
                   & (x["seq_len"] % (2 * x["cp"]) != 0),
                   ("cp", "seq_len"))
DP_BATCH = Rule(7, "dp", "must divide global_batch", lambda x: (x["dp"] > 0) & (x["global_batch"] % np.maximum(x["dp"], 1) != 0))
VPP_PP = Rule(8, "vpp", "must be 1 when pp is 1", lambda x: (x["vpp"] > 1) & (x["pp"] == 1), ("vpp", "pp"))
VPP_LAYERS = Rule(9, "vpp", "must divide the layers per pipeline stage",
                  lambda x: np.logical_not(_per_stage_ok(x, x["vpp"])), ("vpp", "layers per stage"))
INTERLEAVED_MICRO = Rule(
    10, "vpp", "interleaved schedule needs a multiple of pp micro-batches per step (Megatron-Core's groups of pp "
    "per virtual stage; torch pipelining: at least pp, in equal rounds)",
    _interleaving_broken, ("micro-batches", "pp"))
BATCH = Rule(11, "global_batch", "must be a multiple of micro_batch*dp",
             lambda x: x["global_batch"] % (x["micro_batch"] * x["dp"]) != 0, ("global_batch", "micro_batch*dp"))
SP_TP = Rule(12, "sp", "needs tp > 1", lambda x: (x["sp"] == 1) & (x["tp"] == 1))
ZERO_PP = Rule(13, "zero_stage", "ZeRO-2/3 does not compose with pipeline parallelism in this framework",
               lambda x: (x["zero_stage"] >= 2) & (x["pp"] > 1) & _framework_in(x, ZERO23_NO_PP),
               ("zero_stage", "pp", "framework"))
ZERO_DP = Rule(14, "zero_stage", "ZeRO sharding needs dp x cp > 1 (identical to zero_stage 0)",
               lambda x: (x["zero_stage"] > 0) & (x["dp"] * x["cp"] == 1))
ULYSSES_HEADS = Rule(
    15, "cp", "with cp_kind ulysses must divide the query and the key/value heads per TP rank (the all-to-all "
    "splits heads; Transformer Engine asserts 'number of attention heads needs to be divisible by CP size')",
    lambda x: _ulysses_heads_broken(x),
    ("cp", "n_heads/tp", "n_kv_heads/tp"))
OFFLOAD_PP = Rule(16, "offload_fraction", "activation offloading needs pp >= 3 (Megatron-Kwai)",
                  lambda x: (x["offload_fraction"] > 0) & (x["pp"] < 3), ("offload_fraction", "pp"))
BALANCED = Rule(17, "recompute", "balanced recompute needs Megatron-Kwai",
                lambda x: (x["recompute"] == RECOMPUTE_BALANCED) & np.logical_not(_framework_in(x, KWAI_FEATURES)), ("framework",))
ULYSSES_STACK = Rule(19, "cp", "with cp_kind ulysses needs cp > 1 and a framework that has it",
                     lambda x: (x["cp_ulysses"] == 1) & ((x["cp"] == 1) | np.logical_not(_framework_in(x, ULYSSES_FRAMEWORKS))),
                     ("cp", "framework"))
OFFLOAD_STACK = Rule(
    20, "offload_fraction", "activation offloading needs Megatron-Kwai and no full recompute",
    lambda x: (x["offload_fraction"] > 0) & ((x["recompute"] == RECOMPUTE_FULL) | np.logical_not(_framework_in(x, KWAI_FEATURES))),
    ("framework",))
ZERO_STAGES = Rule(21, "zero_stage", "above 1 is not implemented in this framework",
                   lambda x: (x["zero_stage"] >= 2) & _framework_in(x, ZERO1_ONLY), ("zero_stage", "framework"))
ZERO_FSDP = Rule(22, "zero_stage", "must be 0 (DDP) or 3 (FSDP) in this framework",
                 lambda x: np.isin(x["zero_stage"], (1, 2)) & _framework_in(x, ZERO_0_3_ONLY), ("zero_stage", "framework"))
SP_STACK = Rule(23, "sp", "must be on with tp > 1 in this framework (its TP plan always shards the sequence)",
                lambda x: (x["sp"] == 0) & (x["tp"] > 1) & _framework_in(x, SP_ALWAYS), ("sp", "tp", "framework"))
CP_SEQ = Rule(18, "cp", "must divide seq_len", lambda x: x["seq_len"] % x["cp"] != 0, ("cp", "seq_len"))
TT_PP_SPLIT = Rule(
    25, "vpp", "with torchtitan must be 1 or 2 (at most n_layers + 2 stages in all), or give pp x vpp stages "
    "through a pipeline_parallel_layers_per_stage (its pipeline split makes ceil((n_layers + 2) / "
    "layers_per_stage) stages, embedding and output counted as one layer each)",
    lambda x: (x["pp"] > 1) & _framework_in(x, PP_LAYERS_PER_STAGE) & np.logical_not(
        torchtitan_split_ok(x["n_layers"], x["pp"], x["vpp"])),
    ("pp", "vpp", "n_layers", "framework"))
TE_CP_HEAD_DIM = Rule(
    24, "cp", f"with Transformer Engine attention needs its fused attention (an Ampere or newer GPU, not turned "
    f"off) and a head dimension that is a "
    f"multiple of {HEAD_DIM_ALIGN:.0f} and at most {FLASH_MAX_HEAD_DIM:.0f} (else only its unfused attention is "
    "left, which has no context parallelism)",
    lambda x: (x["cp"] > 1) & _framework_in(x, TE_ATTENTION) & (
        (np.mod(x["head_dim"], HEAD_DIM_ALIGN) != 0) | (x["head_dim"] > FLASH_MAX_HEAD_DIM)
        | (x["fused_attention"] == 0)),
    ("cp", "head_dim", "fused_attention", "framework"))
VPP_STACK = Rule(26, "vpp", "must be 1 in this framework (its pipeline schedule is not interleaved)",
                 lambda x: (x["vpp"] > 1) & _framework_in(x, NO_INTERLEAVING), ("vpp", "framework"))
RING_CP_STACK = Rule(27, "cp", "with cp_kind ring needs a framework that has ring context parallelism",
                     lambda x: (x["cp"] > 1) & (x["cp_ulysses"] == 0) & _framework_in(x, NO_RING_CP),
                     ("cp", "framework"))
AUTOTP_SP = Rule(28, "sp", "must be off in this framework (its tensor parallelism, AutoTP, has no sequence parallelism)",
                 lambda x: (x["sp"] == 1) & (x["tp"] > 1) & _framework_in(x, AUTOTP), ("sp", "tp", "framework"))
AUTOTP_ZERO3 = Rule(29, "zero_stage", "must be 0, 1 or 2 with tp > 1 in this framework (AutoTP with ZeRO-3 is not "
                    "supported)", lambda x: (x["zero_stage"] >= 3) & (x["tp"] > 1) & _framework_in(x, AUTOTP),
                    ("zero_stage", "tp", "framework"))
AUTOTP_2D = Rule(30, "tp", "above 1 needs pp = 1 and cp = 1 in this framework (AutoTP composes with data parallelism "
                 "and ZeRO only)", lambda x: (x["tp"] > 1) & ((x["pp"] > 1) | (x["cp"] > 1)) & _framework_in(x, AUTOTP),
                 ("tp", "pp", "cp", "framework"))
TT_DDP = Rule(31, "zero_stage", "must be 3 (FSDP) with cp > 1, or with dp > 1 and tp or pp > 1, in this framework "
              "(its DDP replicates over a 1-D mesh only; without dp or cp no data parallelism is applied)",
              lambda x: (x["zero_stage"] == 0) & ((x["cp"] > 1) | ((x["dp"] > 1) & ((x["tp"] > 1) | (x["pp"] > 1))))
              & _framework_in(x, DDP_1D_ONLY), ("zero_stage", "dp", "tp", "pp", "cp", "framework"))
TORCH_1F1B_MICRO = Rule(
    44, "micro_batch", "with torch pipelining's 1F1B needs at least pp micro-batches per step (Schedule1F1B: "
    "'Number of microbatches ... must be greater than or equal to the number of stages')",
    lambda x: (x["pp"] > 1) & (x["vpp"] == 1) & (_micro_batches(x) < x["pp"])
    & _framework_in(x, TORCH_PIPELINING), ("micro-batches", "pp", "framework"))
TT_AMP = Rule(42, "dp", "must be above 1 (FSDP), or cp above 1, with tp or pp > 1 in this framework: without "
              "them torchtitan turns mixed precision off and trains in float32 (maybe_enable_amp)",
              lambda x: (x["dp"] == 1) & (x["cp"] == 1) & ((x["tp"] > 1) | (x["pp"] > 1))
              & _framework_in(x, AMP_NEEDS_FSDP), ("dp", "cp", "tp", "pp", "framework"))
TT_SEQ = Rule(43, "seq_len", "must be a multiple of 2 x tp x cp in this framework (torchtitan's "
              "ParallelDims.seq_len_divisor)",
              # (int64: the search's int32 tp x cp of every layout overflows from 32,768 GPUs)
              lambda x: (x["seq_len"] % (2 * np.asarray(x["tp"], dtype=np.int64) * x["cp"]) != 0)
              & _framework_in(x, SEQ_LEN_DIVISOR_2_TP_CP),
              ("seq_len", "tp", "cp", "framework"))
TP_KV_STACK = Rule(32, "tp", "must divide n_kv_heads in this framework (each rank holds whole key/value heads)",
                   lambda x: (x["n_kv_heads"] % x["tp"] != 0) & _framework_in(x, KV_HEADS_PER_RANK),
                   ("tp", "n_kv_heads", "framework"))
ULYSSES_SP = Rule(33, "sp", "must be off with cp_kind ulysses in this framework (Megatron's and DeepSpeed's "
                  "sequence parallelism exclude each other)",
                  # (at tp 1 the flag shards nothing: no conflict)
                  lambda x: (x["sp"] == 1) & (x["tp"] > 1) & (x["cp"] > 1) & (x["cp_ulysses"] == 1)
                  & _framework_in(x, ULYSSES_NO_SP), ("sp", "tp", "cp", "framework"))
ZEROPP_STACK = Rule(34, "zeropp", "needs a framework with ZeRO++ (DeepSpeed's engine)",
                    lambda x: _zeropp_on(x) & _framework_in(x, NO_ZEROPP_STACKS), ("framework",))
ULYSSES_PP = Rule(35, "cp", "with cp_kind ulysses needs pp = 1 in this framework (DeepSpeed's pipeline engine has no "
                  "sequence-parallel axis)",
                  lambda x: (x["cp"] > 1) & (x["cp_ulysses"] == 1) & (x["pp"] > 1) & _framework_in(x, ULYSSES_NO_PP),
                  ("cp", "pp", "framework"))
#: hpZ's secondary group is a node's ranks (at most its NVLink domain's, dividing the data-parallel group:
#: perfmodel.zeropp.default_hpz_members): a node of one GPU leaves a group of one, which DeepSpeed reads as
#: hpZ off (zero_hpz_partition_size 1)
HPZ_NODES = Rule(
    40, "zeropp", "hpz needs nodes of 2 or more GPUs whose count divides the GPU count (a secondary group of one "
    "rank is hpZ off; DeepSpeed _ensure_divisibility)",
    lambda x: (x["hpz"] > 0) & ((np.minimum(x["gpus_per_node"], x["n_gpus"]) < 2)
                                | (x["n_gpus"] % np.minimum(x["gpus_per_node"], x["n_gpus"]) != 0)),
    ("gpus_per_node", "gpus"))
#: DeepSpeed groups the hpZ secondary partition by consecutive global ranks, whatever the model-parallel
#: layout (deepspeed/utils/groups.py _create_zero_param_parallel_group: range(i * size, (i + 1) * size),
#: "TODO: assert that MPU is not set"): with TP ranks adjacent, such a group would hold different tensor
#: shards. Ulysses' sequence ranks hold the same weights and may share a group.
HPZ_TP = Rule(
    41, "zeropp", "hpz needs tp = 1: DeepSpeed's hpZ groups are consecutive ranks, which under tensor parallelism "
    "hold different tensor shards",
    lambda x: (np.asarray(x.get("hpz", 0)) > 0) & (x["tp"] > 1), ("tp",))

#: sequence parallelism splits each CP rank's tokens of a sequence evenly over the TP ranks (Megatron-Core
#: tensor_parallel/mappings.py _split_along_first_dim / _reduce_scatter_along_first_dim assert "First dimension
#: of the tensor should be divisible by tensor parallel size"; nanotron's reduce-scatter mode and torchtitan's
#: Shard(1) split the same dimension)
SP_SEQ = Rule(36, "sp", "needs tp to divide the tokens of a sequence on one CP rank (seq_len / cp)",
              lambda x: (x["sp"] == 1) & (x["tp"] > 1)
              & ((x["seq_len"] // np.maximum(x["cp"], 1)) % np.maximum(x["tp"], 1) != 0),
              ("sp", "tp", "seq_len"))

#: what any configuration given to estimate / whatif must satisfy (the layout is well formed), in
#: the order they are reported
CONFIG_RULES = (TP_HEADS, PP_LAYERS, TP_KV_HEADS, VPP_LAYERS, GPUS, BATCH, CP_SEQ, CP_RING_SEQ, ULYSSES_HEADS,
                OFFLOAD_PP, HPZ_NODES)
#: what the named stack can run: the search recommends only such configurations, while estimate
#: still costs a what-if the stack lacks (e.g. ZeRO-3 with pipelining under Megatron-LM)
CAPABILITY_RULES = (INTERLEAVED_MICRO, TORCH_1F1B_MICRO, ZERO_PP, ZERO_STAGES, ZERO_FSDP, SP_STACK, ULYSSES_STACK, OFFLOAD_STACK,
                    BALANCED, TE_CP_HEAD_DIM, TT_PP_SPLIT, VPP_STACK, RING_CP_STACK, AUTOTP_SP, AUTOTP_ZERO3,
                    AUTOTP_2D, TT_DDP, TT_AMP, TT_SEQ, TP_KV_STACK, ULYSSES_SP, ZEROPP_STACK, ULYSSES_PP, SP_SEQ,
                    HPZ_TP)
#: the search's pruning on top: equivalent duplicates (sp without tp, ZeRO without dp) and TP
#: beyond two NVLink domains are never worth costing
SEARCH_ONLY_RULES = (TP_DOMAINS, DP_BATCH, SP_TP, ZERO_DP)
#: measured runs: only what is needed to cost a row (uneven pipeline stages did run, e.g. nanotron)
RUN_RULES = (GPUS, BATCH, TP_HEADS, VPP_PP)
RULES = {r.code: r for r in CONFIG_RULES + CAPABILITY_RULES + SEARCH_ONLY_RULES + (VPP_PP,)}


def first_broken(rules, x: Arrays) -> Rule | None:
    """The first rule of ``rules`` that one configuration (scalars) breaks, or None."""
    for r in rules:
        broken = r.broken(x)
        if broken if isinstance(broken, (bool, np.bool_)) else np.any(broken):
            return r
    return None


def reason_codes(rules, x: Arrays, shape) -> np.ndarray:
    """Per element, the code of the first rule of ``rules`` it breaks (0 where none)."""
    reason = np.zeros(shape, dtype=np.int8)
    for r in reversed(rules):
        broken = r.broken(x)
        if np.any(broken):  # (a rule nothing breaks leaves the codes as they are: keeps the search fast)
            reason = np.where(np.broadcast_to(broken, shape), np.int8(r.code), reason)
    return reason
