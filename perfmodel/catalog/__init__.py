"""The catalog: built-in models and GPUs by name, or a user's file.

``load_model`` takes a catalog name, a model YAML (the fields of ``ModelSpec``) or a Hugging
Face ``config.json``; ``load_gpu`` takes a catalog name or a hardware-profile YAML.
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import yaml
from pydantic import ValidationError

from perfmodel.errors import InputError, UnknownName, file_stamp, from_validation_error, read_text_file
from perfmodel.shipped import data_root
from perfmodel.specs.hardware import AcceleratorSpec
from perfmodel.specs.model import ModelSpec
from perfmodel.structured_text import load_json, load_yaml

CATALOG_DIR = Path(__file__).resolve().parent
#: the GPU catalog: hardware_profiles/ of the checkout, or its copy in an installed wheel (perfmodel.shipped)
PROFILES_DIR = data_root() / "hardware_profiles"


def _read_yaml(path: Path, field: str) -> object:
    return load_yaml(read_text_file(path, field), field, str(path))


@lru_cache(maxsize=1)
def _model_table() -> dict:
    return yaml.safe_load((CATALOG_DIR / "models.yaml").read_text())


def model_names() -> list[str]:
    return sorted(_model_table())


def gpu_names() -> list[str]:
    return sorted(p.stem for p in PROFILES_DIR.glob("*.yaml"))


def _looks_like_path(ref: str) -> bool:
    return ref.endswith((".yaml", ".yml", ".json")) or "/" in ref


#: where a config.json states its trained context length, first found wins
CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "n_ctx")


def _informational_length(value, where: str, key: str, used: bool) -> int | None:
    """The trained context length: a whole positive number; one beyond the model's bound is not kept (a
    config's 1e30 'unbounded' marker, say). Where it sizes a learned position table (``used``), anything
    else is an error; elsewhere no cost reads it and it is only not kept."""
    from perfmodel.specs.model import MAX_SEQ_LEN

    if value is None:
        return None
    ok = not isinstance(value, bool) and isinstance(value, (int, float)) and value > 0 and float(value).is_integer()
    if not ok and used:
        raise InputError(f"model.{key}", f"the context length sizes the learned position table: it must be a "
                         f"positive whole JSON number (got {value!r:.40})", where=where)
    return int(value) if ok and value <= MAX_SEQ_LEN else None


#: transformers' ACT2FN names of the activations a dense MLP uses: the GELU variants and ReLU cost as a
#: two-matrix MLP, silu / swish as SwiGLU's gate (three matrices), relu2 as Nemotron's squared ReLU
HF_ACTIVATIONS = frozenset({"gelu", "gelu_new", "gelu_fast", "gelu_pytorch_tanh", "gelu_python", "gelu_accurate",
                            "quick_gelu", "relu", "relu2", "silu", "swish", "swiglu"})


#: model types whose config may leave the MLP width out, meaning 4 x hidden in transformers (GPT-2, GPT-J,
#: CodeGen, GPT-BigCode: n_inner None -> 4 * n_embd; GPT-Neo: intermediate_size None -> 4 * hidden_size;
#: BLOOM, Falcon / RefinedWeb: a fixed 4h MLP; MPT: expansion_ratio 4). Others (Llama, GPT-NeoX, OPT, Phi, ...)
#: default to a fixed width of their own, which is not 4h: their configs must state it.
GPT2_STYLE = frozenset({"gpt2", "gpt_bigcode", "gpt_neo", "gptj", "codegen", "bloom", "falcon", "refinedweb",
                        "refinedwebmodel", "mpt"})


#: model types whose MLP is gated (gate, up, down) whatever the config says of its activation
GATED_MODEL_TYPES = frozenset({"llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "olmo", "olmo2", "phi3"})
#: model types whose transformers class fixes the MLP when the config names no activation
MLP_BY_MODEL_TYPE = GATED_MODEL_TYPES | GPT2_STYLE | frozenset({"gpt_neox", "opt"})
#: transformers classes that build a mixture of experts by default (their configs' expert counts default > 1:
#: MixtralConfig num_local_experts 8, Qwen2MoeConfig num_experts 60, DeepseekV2/V3, DbrxConfig, OlmoeConfig, ...)
MOE_MODEL_TYPES = frozenset({"mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v2", "deepseek_v3", "dbrx", "olmoe",
                             "granitemoe", "phimoe", "jetmoe", "jamba", "arctic", "minimax", "llama4_text"})
#: types whose transformers config unties the output layer when tie_word_embeddings is absent (GPTNeoXConfig,
#: GPTJConfig, PhiConfig: tie_word_embeddings=False), unlike PretrainedConfig's default
UNTIED_MODEL_TYPES = frozenset({"gpt_neox", "gptj", "phi"})


def _model_from_hf_config(cfg: dict, name: str, where: str) -> ModelSpec:
    """Map a Hugging Face config.json (Llama/Mistral/Qwen/Gemma style or GPT-2 style) to a ModelSpec.

    Nothing is guessed: a config the dense-transformer model cannot represent (mixture of
    experts, a head_dim other than hidden/heads) or one without the fields that decide the shape
    is an error naming the field."""
    def pick(*keys, default=None):
        for k in keys:
            if cfg.get(k) is not None:  # JSON null is "not given"
                return cfg[k]
        return default

    def found(*keys):
        return next((k for k in keys if cfg.get(k) is not None), keys[0])

    def integer(field, *keys, default=None, minimum=1):
        """The first of ``keys`` given, as a JSON integer >= minimum (not a string, a fraction or a boolean);
        ``default`` only when none of them is given (absent or null)."""
        value = pick(*keys)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            raise InputError(f"model.{field}", f"must be an integer (got {found(*keys)}={value!r})", where=where)
        if value < minimum:
            rule = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
            raise InputError(f"model.{field}", f"must be {rule} (got {found(*keys)}={value!r})", where=where)
        return value

    def need(field, *keys):
        value = integer(field, *keys)
        if value is None:
            raise InputError(f"model.{field}", f"config.json must give one of {', '.join(keys)}", where=where)
        return value

    def text(key):
        value = cfg.get(key)
        if value is not None and not isinstance(value, str):
            raise InputError(f"model.{key}", f"must be a JSON string (got {value!r})", where=where)
        return (value or "").strip().lower()

    # the spellings transformers maps onto these (GPT-2 n_embd, BLOOM n_embed, MPT/OLMo d_model,
    # n_heads, n_layers, GPT-Neo num_heads, num_layers)
    if cfg.get("is_encoder_decoder") is not None and not isinstance(cfg.get("is_encoder_decoder"), bool):
        raise InputError("model.is_encoder_decoder", f"must be a JSON boolean, true or false (got "
                         f"{cfg.get('is_encoder_decoder')!r})", where=where)
    if cfg.get("is_encoder_decoder") is True or cfg.get("num_decoder_layers") is not None:
        raise InputError("model.is_encoder_decoder", "encoder-decoder models (T5, BART, ...) are not modelled "
                         "(decoder-only transformers only)", where=where)
    hidden = need("hidden_size", "hidden_size", "n_embd", "n_embed", "d_model")
    layers = need("n_layers", "num_hidden_layers", "n_layer", "num_layers", "n_layers")
    heads = need("n_heads", "num_attention_heads", "n_head", "num_heads", "n_heads")
    vocab = need("vocab_size", "vocab_size")
    for key in ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts"):
        experts = integer(key, key, default=0, minimum=0)
        if experts > 1:
            raise InputError("model", f"mixture-of-experts ({key}={experts}) is not modelled (dense transformers only)",
                             where=where)
    # DBRX states its experts in a nested block (ffn_config.moe_num_experts)
    ffn_block = cfg.get("ffn_config")
    nested = ffn_block.get("moe_num_experts") if isinstance(ffn_block, dict) else None
    if isinstance(nested, int) and not isinstance(nested, bool) and nested > 1:
        raise InputError("model", f"mixture-of-experts (ffn_config.moe_num_experts={nested}) is not modelled (dense "
                         "transformers only)", where=where)
    if nested is not None and (isinstance(nested, bool) or not isinstance(nested, int)):
        raise InputError("model.ffn_config.moe_num_experts", f"must be a JSON integer (got {nested!r})", where=where)
    # the classes that build experts (or latent attention) whatever the keys say: transformers fills their
    # defaults (MixtralConfig num_local_experts 8, DeepseekV2Config kv_lora_rank 512, ...)
    model_type = text("model_type")
    if model_type in MOE_MODEL_TYPES:
        raise InputError("model.model_type", f"{model_type!r} is a mixture-of-experts model (its class builds experts "
                         "by default): not modelled (dense transformers only)", where=where)
    for key in ("kv_lora_rank", "q_lora_rank"):
        if cfg.get(key) is not None:  # DeepSeek-V2/V3: low-rank compressed keys/values and queries
            raise InputError(f"model.{key}", "multi-head latent attention (MLA) is not modelled (standard or grouped-"
                             "query attention only)", where=where)
    notes = []
    window = cfg.get("sliding_window")
    if window is not None and cfg.get("use_sliding_window") is not False:
        # a local window cuts attention to s * w, the model costs the full causal s^2 / 2: an upper bound
        notes.append(f"{where}: sliding_window ({window!r}) is not modelled: attention is costed as full causal "
                     "attention (an upper bound on its time where the sequence is longer than the window)")
    proj = integer("word_embed_proj_dim", "word_embed_proj_dim")
    if proj is not None and proj != hidden:  # OPT-350m: 512-wide embeddings and head, projected in and out
        raise InputError("model.word_embed_proj_dim", f"an embedding width ({proj}) other than hidden_size ({hidden}) "
                         "is not modelled (embeddings and the output layer are costed at the model width)", where=where)
    head_dim = integer("head_dim", "head_dim")
    if head_dim is not None and head_dim * heads != hidden:
        raise InputError("model.head_dim", f"head_dim * num_attention_heads ({head_dim}*{heads}) must equal "
                         f"hidden_size ({hidden}): decoupled head dims are not modelled", where=where)
    act_key = found("hidden_act", "hidden_activation", "activation_function")
    act = text(act_key)
    if not act and not model_type:
        raise InputError("model.mlp", "config.json gives neither hidden_act nor model_type", where=where)
    if not act and model_type not in MLP_BY_MODEL_TYPE:
        # the MLP (gated or not) would be guessed: only the types whose class fixes it may leave it out
        raise InputError("model.hidden_act", f"config.json of model_type {model_type!r} states no hidden_act: its "
                         "MLP (gated SwiGLU or a plain GELU) would be a guess; add the activation", where=where)
    if act and act not in HF_ACTIVATIONS:
        raise InputError(f"model.{act_key}", f"activation {act!r} is not one perfmodel costs (one of "
                         f"{', '.join(sorted(HF_ACTIVATIONS))})", where=where)
    # gated MLPs (gate, up, down): SwiGLU (silu) and GeGLU (Gemma's gelu_pytorch_tanh)
    gated = act in ("silu", "swiglu", "swish") or model_type in GATED_MODEL_TYPES
    # a missing MLP width is GPT-2's documented default (n_inner: null -> 4 * n_embd), and only GPT-2's
    # (and its derivatives'): a gated config without one would take its class's default in transformers
    # (LlamaConfig: 11008 whatever the width), which is not 4h; a given one is used as is
    if model_type in GPT2_STYLE or (not gated and not model_type):
        default_ffn = 4 * hidden
        ratio = cfg.get("expansion_ratio") if model_type == "mpt" else None  # MPT: d_model * expansion_ratio
        if ratio is not None:
            if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or ratio <= 0 or \
                    float(ratio * hidden) != int(ratio * hidden):
                raise InputError("model.ffn_hidden_size", f"expansion_ratio must be a positive number giving a whole "
                                 f"MLP width with d_model={hidden} (got {ratio!r})", where=where)
            default_ffn = int(ratio * hidden)
        if not model_type and pick("ffn_hidden_size", "intermediate_size", "n_inner", "ffn_dim") is None:
            # without a model_type nothing says the width is GPT-2's 4h
            raise InputError("model.ffn_hidden_size", "config.json gives no MLP width (intermediate_size) and no "
                             "model_type whose class fixes one", where=where)
        ffn = integer("ffn_hidden_size", "intermediate_size", "n_inner", "ffn_dim", "ffn_hidden_size",
                      default=default_ffn)
    else:
        ffn = need("ffn_hidden_size", "intermediate_size", "n_inner", "ffn_dim", "ffn_hidden_size")
    tied = pick("tie_word_embeddings")
    if tied is None:
        # transformers' defaults when the key is absent: PretrainedConfig and GemmaConfig tie,
        # LlamaConfig-style gated configs do not
        tied = (not gated or (model_type or "").startswith("gemma")) and model_type not in UNTIED_MODEL_TYPES
    elif not isinstance(tied, bool):
        raise InputError("model.tied_embeddings", f"tie_word_embeddings must be a JSON boolean, true or false "
                         f"(got {tied!r})", where=where)
    learned = model_type in ("gpt2", "opt", "gpt_bigcode")  # learned absolute position embeddings
    # ALiBi attention biases: BLOOM always (transformers BloomAttention), Falcon where its config says alibi,
    # MPT where attn_config.alibi is true (its default in transformers MptAttentionConfig)
    attn_config = cfg.get("attn_config") if isinstance(cfg.get("attn_config"), dict) else {}
    alibi = (model_type == "bloom" or (model_type in ("falcon", "refinedweb", "refinedwebmodel")
                                       and cfg.get("alibi") is True)
             or (model_type == "mpt" and attn_config.get("alibi", True) is True))
    # Falcon's multi_query (without its new decoder architecture) is one key/value head, whatever num_kv_heads
    # says (transformers FalconAttention: num_kv_heads if new_decoder_architecture or not multi_query else 1;
    # save_pretrained writes num_kv_heads = num_attention_heads beside multi_query: true)
    mqa = cfg.get("multi_query") is True and cfg.get("new_decoder_architecture") is not True
    kv_heads = 1 if mqa else integer("n_kv_heads", "num_key_value_heads", "num_kv_heads", "n_head_kv", default=heads)
    # attention and MLP side by side: GPT-J, Phi-1/2 and Cohere always; GPT-NeoX's use_parallel_residual and
    # Falcon's parallel_attn (or its new decoder architecture), both true when absent in transformers' configs
    parallel = (model_type in ("gptj", "phi", "cohere")
                or (model_type == "gpt_neox" and cfg.get("use_parallel_residual", True) is True)
                or (model_type in ("falcon", "refinedweb", "refinedwebmodel")
                    and (cfg.get("parallel_attn", True) is True or cfg.get("new_decoder_architecture") is True))
                or cfg.get("use_parallel_residual") is True or cfg.get("parallel_attn") is True)
    # QKV biases without other linear biases: Qwen2 (transformers Qwen2Attention: q/k/v_proj bias=True, o_proj
    # none), Megatron-LM's --add-qkv-bias. A Llama-style attention_bias puts one on o_proj too, which Megatron
    # cannot state without the MLP's (--add-bias-linear is every linear layer): said, not emitted
    qkv_bias = gated and model_type == "qwen2"
    if qkv_bias:
        notes.append(f"{where}: the query/key/value projections' biases are not costed (a few parameters a layer)")
    elif gated and cfg.get("attention_bias") is True:
        notes.append(f"{where}: attention_bias (biases on the query/key/value and output projections) is not costed, "
                     "and Megatron-LM has no flag for it without the MLP's biases: the emitted flags drop them")
    if gated and cfg.get("mlp_bias") is True:  # LlamaConfig.mlp_bias: biases on gate, up and down
        notes.append(f"{where}: mlp_bias (biases on the MLP's projections) is not costed (a few parameters a layer), "
                     "and the emitted flags drop them")
    data = dict(
        name=name,
        n_layers=layers,
        hidden_size=hidden,
        ffn_hidden_size=ffn,
        n_heads=heads,
        n_kv_heads=kv_heads,
        vocab_size=vocab,
        mlp="swiglu" if gated else ("relu2" if act == "relu2" else "gelu"),  # Nemotron: squared ReLU
        tied_embeddings=tied,
        learned_pos_emb=learned,
        alibi=alibi,
        max_seq_len=_informational_length(pick(*CONTEXT_KEYS), where, found(*CONTEXT_KEYS), used=learned),
        parallel_block=parallel,
        qkv_bias=qkv_bias,
        source=where,
        notes=tuple(notes),
    )
    try:
        return ModelSpec(**data)
    except ValidationError as exc:
        raise from_validation_error(exc, "model", where=where) from None


def load_model(ref: str | Path) -> ModelSpec:
    """A ModelSpec from a catalog name, a YAML file or a Hugging Face config.json."""
    if not isinstance(ref, (str, Path)):
        raise InputError("model", f"must be a catalog name or a file path (got {type(ref).__name__})")
    ref = str(ref)
    table = _model_table()
    if ref in table:
        return ModelSpec(name=ref, **table[ref])
    if not _looks_like_path(ref):
        raise UnknownName("model", f"unknown model '{ref}' (known: {', '.join(model_names())}; or a .yaml/config.json path)")
    path = Path(ref)
    if path.is_dir() and (path / "config.json").is_file():
        path = path / "config.json"  # a Hugging Face model folder
    elif path.is_dir():
        raise InputError("model", f"'{ref}' is a folder without a config.json")
    elif not path.is_file():
        raise InputError("model", f"'{ref}' is not a regular file" if path.exists() else f"no such file '{ref}'")
    if path.suffix.lower() == ".json" or path.name.lower().endswith(".json.gz"):  # CONFIG.JSON too
        cfg = load_json(read_text_file(path, "model"), "model", str(path))
        if not isinstance(cfg, dict):
            raise InputError("model", "config.json must hold a JSON object", where=str(path))
        # a Hugging Face folder's config.json is named by its folder (Llama-3.1-8B/config.json), any other
        # JSON file by its own name (models/mistral7b.json: mistral7b, not "models")
        name = (path.resolve().parent.name or path.stem) if path.name.lower() == "config.json" else path.stem
        return _model_from_hf_config(cfg, name, str(path))
    data = _read_yaml(path, "model")
    if not isinstance(data, dict):
        raise InputError("model", "model YAML must be a mapping of ModelSpec fields", where=str(path))
    data.setdefault("name", path.stem)
    try:
        spec = ModelSpec(**data)
    except ValidationError as exc:
        raise from_validation_error(exc, "model", where=str(path)) from None
    if "mlp" not in data:  # 2 or 3 matrices is a third of the layer: not guessed (as a config.json's activation)
        raise InputError("model.mlp", "required in a model YAML: gelu (2 matrices), swiglu (3) or relu2 (2)",
                         where=str(path))
    return spec


@lru_cache(maxsize=64)
def _load_gpu_file(path_str: str, stamp: tuple[int, int] | None) -> AcceleratorSpec:
    """(``stamp``: ``errors.file_stamp``, part of the cache key only)"""
    path = Path(path_str)
    data = _read_yaml(path, "gpu")
    if not isinstance(data, dict):
        raise InputError("gpu", "hardware profile must be a mapping", where=str(path))
    data.setdefault("name", path.stem)
    try:
        spec = AcceleratorSpec(**data)
    except ValidationError as exc:
        raise from_validation_error(exc, "gpu", where=str(path)) from None
    if spec.calibration_from is not None and spec.calibration_from not in gpu_names():
        raise InputError("gpu.calibration_from", f"must name a catalog GPU (got '{spec.calibration_from}'; known: "
                         f"{', '.join(gpu_names())})", where=str(path))
    return spec


def load_gpu(ref: str | Path) -> AcceleratorSpec:
    """An AcceleratorSpec from a catalog name (hardware_profiles/NAME.yaml) or a YAML path. Each call returns
    its own copy (a caller that changes one changes no other), read again where the file changed since."""
    if not isinstance(ref, (str, Path)):
        raise InputError("gpu", f"must be a catalog name or a hardware-profile path (got {type(ref).__name__})")
    return _cached_gpu(str(ref)).model_copy(deep=True)


def _cached_gpu(ref: str) -> AcceleratorSpec:
    path = PROFILES_DIR / f"{ref}.yaml"
    if path.is_file():
        return _load_gpu_file(str(path), file_stamp(path))
    if not _looks_like_path(ref) and not PROFILES_DIR.is_dir():
        raise InputError("gpu", f"the GPU catalog {PROFILES_DIR} is missing from this installation (reinstall "
                         "perfmodel: pip install . or pip install -e . in the repository)")
    if not _looks_like_path(ref):
        raise UnknownName("gpu", f"unknown GPU '{ref}' (known: {', '.join(gpu_names())}; or a profile .yaml path)")
    file = Path(ref)
    if file.is_dir():
        raise InputError("gpu", f"'{ref}' is a folder, not a hardware-profile YAML")
    if not file.is_file():
        raise InputError("gpu", f"'{ref}' is not a regular file" if file.exists() else f"no such file '{ref}'")
    return _load_gpu_file(str(file.resolve()), file_stamp(file))
