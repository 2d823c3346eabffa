"""The configuration a Megatron-family training log ran, from its start-up arguments block.

``parse_megatron_arguments`` gives the printed arguments; this maps them onto the model, cluster,
parallel and job specs the cost model takes, with Megatron-LM's own meaning of each argument
(``megatron/training/arguments.py``). Anything the block does not state and Megatron does not
default is an error naming the argument: nothing is guessed.
"""
from __future__ import annotations

import math

from pydantic import ValidationError

from perfmodel.errors import InputError, from_validation_error
from perfmodel.frameworks import framework_profile
from perfmodel.limits import MAX_COUNT, MAX_GPUS
from perfmodel.calibrate.parsers.megatron_args import MegatronArguments, arg_value
from perfmodel.specs import ClusterSpec, JobSpec, ModelSpec, ParallelSpec
from perfmodel.specs.hardware import AcceleratorSpec, check_node_size

#: GPT-2 BPE's vocabulary (Megatron's GPT2BPETokenizer reads gpt2-vocab.json: 50,257 entries)
GPT2_BPE_VOCAB = 50257


def _at(args: dict, name: str, where: str) -> str:
    """'file:line' of the argument where the block records it, else the file."""
    return args.where(name) if isinstance(args, MegatronArguments) and name in args else where


def _get(args: dict, name: str, where: str, default=InputError):
    value = arg_value(args.get(name))
    if value is None:
        if default is InputError:
            raise InputError(name, "not stated in the log's arguments block (needed to cost the run)", where)
        return default
    return value


def _whole(args: dict, name: str, where: str, default=InputError, maximum: int = MAX_COUNT) -> int:
    """A positive whole argument, at most ``maximum`` (the limits the CLI options have)."""
    value = _get(args, name, where, default)
    if isinstance(value, float) and value.is_integer():  # Megatron-DeepSpeed: --zero-stage default 1.0
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= maximum:
        raise InputError(name, f"must be a whole number from 1 to {maximum:,} in the arguments block "
                         f"(got {args.get(name)!r})", _at(args, name, where))
    return value


#: the Megatron switches (argparse store_true: printed True / False) that decide the modelled run
SWITCHES = ("checkpoint_activations", "recompute_activations", "bf16", "fp16", "deepspeed", "use_torch_fsdp2",
            "use_custom_fsdp", "use_megatron_fsdp", "use_distributed_optimizer", "group_query_attention", "swiglu",
            "squared_relu", "untie_embeddings_and_output_weights", "sequence_parallel", "overlap_grad_reduce",
            "overlap_param_gather", "tp_comm_overlap", "accumulate_allreduce_grads_in_fp32", "use_flash_attn",
            "use_flash_attn_v1", "use_flash_attn_v2", "use_flash_attn_triton")


def _flag(args: dict, name: str) -> bool:
    return arg_value(args.get(name)) is True


#: the arguments the modelled run is read from: a later block of the same log must print the same
MODELLED_ARGS = SWITCHES + (
    "tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size", "world_size",
    "data_parallel_size", "num_attention_heads", "hidden_size", "num_query_groups", "num_layers", "ffn_hidden_size",
    "padded_vocab_size", "vocab_size", "make_vocab_size_divisible_by", "seq_length", "micro_batch_size",
    "global_batch_size", "virtual_pipeline_model_parallel_size", "zero_stage", "recompute_granularity",
    "num_experts", "fp8", "fp8_recipe", "recompute_method", "recompute_num_layers", "recompute_modules",
    "attention_backend", "transformer_impl", "cp_comm_type")


def _check_later_blocks(args: dict, where: str) -> None:
    """A log whose later arguments block (a restart) prints another configuration holds two runs: its
    iteration lines cannot all be this block's."""
    for start, later in getattr(args, "later", []):
        for name in MODELLED_ARGS:
            if name in later and name in args and arg_value(later[name]) != arg_value(args[name]):
                raise InputError(name, f"the log's second arguments block (line {start}) prints "
                                 f"{later[name].strip()!r}, the first {args[name].strip()!r}: two runs in one log; "
                                 "give each run's log on its own", _at(args, name, where))


def _check_switches(args: dict, where: str) -> None:
    """A switch printed as anything but True / False (or None) is refused, not read as off."""
    for name in SWITCHES:
        value = arg_value(args.get(name))
        if value is not None and not isinstance(value, bool):
            raise InputError(name, f"a store_true switch prints True or False (got {args.get(name).strip()!r})",
                             _at(args, name, where))
    # Megatron-LM's validate_args refuses --fp16 with --bf16: a block printing both does not say the precision
    if arg_value(args.get("bf16")) is True and arg_value(args.get("fp16")) is True:
        raise InputError("fp16", f"True together with bf16 True ({_at(args, 'bf16', where)}) in the arguments "
                         "block: Megatron-LM refuses --fp16 with --bf16, so the run's precision is contradictory",
                         _at(args, "fp16", where))


def padded_vocab(vocab: int, args: dict, tp: int, where: str) -> int:
    """Megatron pads the vocabulary to a multiple of make_vocab_size_divisible_by x tp
    (``_vocab_size_with_padding``)."""
    multiple = _whole(args, "make_vocab_size_divisible_by", where, 128) * tp
    return int(math.ceil(vocab / multiple) * multiple)


def _vocab(args: dict, tp: int, where: str) -> int:
    padded = arg_value(args.get("padded_vocab_size"))
    if isinstance(padded, int) and not isinstance(padded, bool) and padded > 0:
        return padded
    vocab = arg_value(args.get("vocab_size"))
    if isinstance(vocab, int) and not isinstance(vocab, bool) and vocab > 0:
        return padded_vocab(vocab, args, tp, where)
    if arg_value(args.get("tokenizer_type")) == "GPT2BPETokenizer":
        return padded_vocab(GPT2_BPE_VOCAB, args, tp, where)
    raise InputError("vocab_size", "not stated in the log's arguments block (padded_vocab_size, vocab_size or "
                     "tokenizer_type GPT2BPETokenizer)", where)


def _recompute(args: dict, layers_per_chunk: int, where: str) -> str:
    """none, selective or full, as the block states it. What the cost model has no mode for is refused, not
    costed as the nearest mode: full recomputation of only some layers (--recompute-method block with
    --recompute-num-layers below a model chunk's layers: Megatron-LM recomputes that many per chunk) and
    selective recomputation of modules beyond the attention core (--recompute-modules, Megatron-Core 0.12+;
    its default is ['core_attn'])."""
    granularity = arg_value(args.get("recompute_granularity"))
    if granularity == "full":
        method, count = arg_value(args.get("recompute_method")), arg_value(args.get("recompute_num_layers"))
        if (method == "block" and isinstance(count, int) and not isinstance(count, bool)
                and 0 <= count < layers_per_chunk):
            raise InputError("recompute_num_layers", f"{count} of each model chunk's {layers_per_chunk} layers "
                             "recomputed (recompute_method block): recomputing only some layers is not modelled "
                             "(full recomputes every layer)", _at(args, "recompute_num_layers", where))
        return granularity
    if granularity == "selective":
        modules = arg_value(args.get("recompute_modules"))
        names = modules if isinstance(modules, (list, tuple)) else [] if modules is None else [modules]
        beyond = [m for m in names if m != "core_attn"]
        if beyond:
            raise InputError("recompute_modules", f"selective recomputation of {', '.join(map(str, beyond))} is not "
                             "modelled (selective is the attention core's, 'core_attn', Megatron's default)",
                             _at(args, "recompute_modules", where))
        return granularity
    if granularity is not None:  # Megatron's argparse offers full and selective only (None: not set)
        raise InputError("recompute_granularity", f"must be full, selective or None, as Megatron-LM's "
                         f"--recompute-granularity choices (got {granularity!r:.40})",
                         _at(args, "recompute_granularity", where))
    if _flag(args, "checkpoint_activations"):  # Megatron-LM before 2022: --checkpoint-activations = full
        return "full"
    if _flag(args, "recompute_activations"):  # 2022-: --recompute-activations = selective
        return "selective"
    return "none"


def _cp_kind(args: dict, cp: int, where: str) -> str:
    """ring or ulysses: Megatron-Core's --cp-comm-type (one for all layers, or a list of one per layer) p2p
    (K/V blocks around a ring) or a2a (DeepSpeed-Ulysses' all-to-all of heads); allgather and the a2a+p2p
    hierarchy are not modelled. Not printed (Megatron before core 0.9): p2p, its only kind then."""
    value = arg_value(args.get("cp_comm_type"))
    kinds = set(value) if isinstance(value, (list, tuple)) else {value}
    if cp <= 1 or kinds <= {None, "p2p"}:
        return "ring"
    if kinds == {"a2a"}:
        return "ulysses"
    raise InputError("cp_comm_type", f"context parallelism by {args.get('cp_comm_type').strip()} is not modelled "
                     "(p2p: ring, a2a: all-to-all, one kind for every layer)", _at(args, "cp_comm_type", where))


#: switches that turn a FlashAttention kernel on: Megatron-LM's --use-flash-attn (2023-2024, the local
#: attention) and Megatron-DeepSpeed's --use-flash-attn(-v1) / -v2 / -triton
FLASH_SWITCHES = ("use_flash_attn", "use_flash_attn_v1", "use_flash_attn_v2", "use_flash_attn_triton")


def _flash_attention(args: dict, where: str) -> bool | None:
    """Whether the run's attention is a fused flash kernel, as the block states it; None where it does not
    say (the stack's profile decides). Megatron-Core's --attention-backend (AttnBackend.flash / fused / unfused
    / local / auto) names it; else a FlashAttention switch on means flash, and every printed switch off
    means none unless TransformerEngine's attention runs (--transformer-impl transformer_engine: TE picks its
    own fused kernel, whatever --use-flash-attn says)."""
    backend = arg_value(args.get("attention_backend"))
    if backend is not None:
        kind = str(backend).rsplit(".", 1)[-1]
        if kind in ("flash", "fused"):
            return True
        if kind in ("unfused", "local"):
            return False
        if kind == "auto":
            return None
        raise InputError("attention_backend", f"must be one of flash, fused, unfused, local, auto (got "
                         f"{args.get('attention_backend').strip()!r})", _at(args, "attention_backend", where))
    printed = [name for name in FLASH_SWITCHES if arg_value(args.get(name)) is not None]
    if any(_flag(args, name) for name in printed):
        return True
    if printed and arg_value(args.get("transformer_impl")) in (None, "local"):
        return False
    return None


def _precision(args: dict, where: str) -> str:
    if arg_value(args.get("fp8")) is not None:  # --fp8-format e4m3 | hybrid (TransformerEngine)
        return "mxfp8" if arg_value(args.get("fp8_recipe")) == "mxfp8" else "fp8"
    if _flag(args, "bf16"):
        return "bf16"
    if _flag(args, "fp16"):
        return "fp16"
    raise InputError("bf16", "the arguments block shows neither --bf16, --fp16 nor --fp8: fp32 training is not "
                     "modelled", where)


def _zero_stage(args: dict, where: str) -> int:
    if _flag(args, "deepspeed"):  # Megatron-DeepSpeed: --zero-stage N (type=int, default 1.0) with --deepspeed
        stage = arg_value(args.get("zero_stage"))
        if isinstance(stage, float) and stage.is_integer():
            stage = int(stage)
        if isinstance(stage, bool) or stage not in (0, 1, 2, 3):
            raise InputError("zero_stage", f"must be 0, 1, 2 or 3 with --deepspeed (got {args.get('zero_stage')!r})",
                             _at(args, "zero_stage", where))
        return stage
    if any(_flag(args, k) for k in ("use_torch_fsdp2", "use_custom_fsdp", "use_megatron_fsdp")):
        return 3
    return 1 if _flag(args, "use_distributed_optimizer") else 0


def megatron_log_specs(
    args: dict[str, str],
    gpu: AcceleratorSpec,
    *,
    framework: str,
    gpus_per_node: int | None,
    scale_out_gbit_per_s: float | None,
    network: str | None,
    where: str,
) -> tuple[ModelSpec, ClusterSpec, ParallelSpec, JobSpec]:
    """(model, cluster, parallel, job) of the run whose arguments block is ``args``."""
    _check_switches(args, where)
    _check_later_blocks(args, where)
    experts = arg_value(args.get("num_experts"))  # Megatron-DeepSpeed prints a list per expert group: [1] = dense
    counts = experts if isinstance(experts, (list, tuple)) else [experts]
    if not all(c is None or (isinstance(c, int) and not isinstance(c, bool) and c <= 1) for c in counts):
        raise InputError("num_experts", f"mixture-of-experts runs ({args.get('num_experts')} experts) are not modelled",
                         _at(args, "num_experts", where))
    tp = _whole(args, "tensor_model_parallel_size", where, 1)
    pp = _whole(args, "pipeline_model_parallel_size", where, 1)
    cp = _whole(args, "context_parallel_size", where, 1)
    world = _whole(args, "world_size", where, maximum=MAX_GPUS)
    if world % (tp * pp * cp):
        raise InputError("world_size", f"must be a multiple of tp x pp x cp = {tp * pp * cp} (got {world})",
                         _at(args, "world_size", where))
    dp = _whole(args, "data_parallel_size", where, world // (tp * pp * cp))
    heads = _whole(args, "num_attention_heads", where)
    hidden = _whole(args, "hidden_size", where)
    kv = _whole(args, "num_query_groups", where, heads) if _flag(args, "group_query_attention") else heads
    mlp = "swiglu" if _flag(args, "swiglu") else "relu2" if _flag(args, "squared_relu") else "gelu"
    try:
        model = ModelSpec(
            name=f"megatron-log-l{_whole(args, 'num_layers', where)}-h{hidden}",
            n_layers=_whole(args, "num_layers", where),
            hidden_size=hidden,
            # Megatron's own default when unset: 4h, or int(4h * 2/3 / 64) * 64 with --swiglu
            ffn_hidden_size=_whole(args, "ffn_hidden_size", where,
                                   int(4 * hidden * 2 / 3 / 64) * 64 if mlp == "swiglu" else 4 * hidden),
            n_heads=heads,
            n_kv_heads=kv,
            vocab_size=_vocab(args, tp, where),
            mlp=mlp,
            tied_embeddings=not _flag(args, "untie_embeddings_and_output_weights"),
            source=f"Megatron arguments block of {where}",
        )
        check_node_size(gpu, gpus_per_node or gpu.default_gpus_per_node, scale_out_gbit_per_s)
        cluster = ClusterSpec.build(gpu, world, gpus_per_node, scale_out_gbit_per_s, network=network)
        vpp = _whole(args, "virtual_pipeline_model_parallel_size", where, 1)
        parallel = ParallelSpec(
            tp=tp, pp=pp, dp=dp, cp=cp, vpp=vpp,
            micro_batch=_whole(args, "micro_batch_size", where), sp=_flag(args, "sequence_parallel") and tp > 1,
            zero_stage=_zero_stage(args, where), cp_kind=_cp_kind(args, cp, where),
            recompute=_recompute(args, max(model.n_layers // (pp * vpp), 1), where),
        )
        job = JobSpec(global_batch=_whole(args, "global_batch_size", where), seq_len=_whole(args, "seq_length", where),
                      precision=_precision(args, where), framework=framework,
                      flash_attention=_flash_attention(args, where))
    except ValidationError as exc:
        raise from_validation_error(exc, where=where) from None
    return model, cluster, parallel, job


def megatron_log_overrides(args: dict, precision: str) -> dict[str, float]:
    """Step inputs the block's own flags set for this run, over the megatron-lm profile's defaults
    (no overlap, fp16 gradients in fp16 runs): --overlap-grad-reduce, --overlap-param-gather and
    --tp-comm-overlap take the overlaps of Megatron-Core's performance recipes (the nemo profile),
    and --accumulate-allreduce-grads-in-fp32 keeps fp32 gradients in an fp16 run. Without them the
    fitted kernel efficiency would absorb the overlap."""
    recipe = framework_profile("nemo")
    out: dict[str, float] = {}
    if _flag(args, "overlap_grad_reduce"):
        out["dp_overlap"] = recipe.dp_overlap
    if _flag(args, "overlap_param_gather"):
        out["param_gather_overlap"] = recipe.param_gather_overlap
    if _flag(args, "tp_comm_overlap"):
        out["tp_overlap"] = recipe.tp_overlap
    if precision == "fp16" and _flag(args, "accumulate_allreduce_grads_in_fp32"):
        out["grad_bytes_per_param"] = 4.0
    return out
