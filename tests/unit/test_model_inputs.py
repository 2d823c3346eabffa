"""A user's model file (Hugging Face config.json or model YAML): every value is read as the file states
it or refused with an InputError naming the field; nothing is coerced (a string, a boolean, a zero) or
replaced by a default, and dimensions past any real model are refused rather than overflowed."""
from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

import perfmodel
from perfmodel import InputError

# the shape of meta-llama/Meta-Llama-3-8B config.json
LLAMA3_8B_HF = {
    "model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
    "num_key_value_heads": 8, "vocab_size": 128256, "intermediate_size": 14336, "hidden_act": "silu",
    "max_position_embeddings": 8192,
}

LLAMA3_8B_YAML = {
    "n_layers": 32, "hidden_size": 4096, "ffn_hidden_size": 14336, "n_heads": 32, "n_kv_heads": 8,
    "vocab_size": 128256, "mlp": "swiglu",
}


def _config_json(tmp_path, **changes):
    cfg = {**LLAMA3_8B_HF, **changes}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    return str(p)


def _model_yaml(tmp_path, **changes):
    import yaml

    p = tmp_path / "m.yaml"
    p.write_text(yaml.safe_dump({**LLAMA3_8B_YAML, **changes}))
    return str(p)


def _error(ref) -> InputError:
    with pytest.raises(InputError) as exc:
        perfmodel.load_model(ref)
    return exc.value


def test_llama3_config_json_matches_the_catalog(tmp_path):
    m = perfmodel.load_model(_config_json(tmp_path))
    ref = perfmodel.load_model("llama3-8b")
    for key in ("n_layers", "hidden_size", "ffn_hidden_size", "n_heads", "n_kv_heads", "vocab_size", "mlp",
                "tied_embeddings"):
        assert getattr(m, key) == getattr(ref, key), key


@pytest.mark.parametrize("key,value", [
    ("num_local_experts", "8"),      # a string: compared with 1 it was a TypeError traceback
    ("num_experts", {"a": 1}),       # an object: likewise
    ("n_routed_experts", 8.5),
    ("moe_num_experts", True),
])
def test_expert_count_must_be_an_integer(tmp_path, key, value):
    err = _error(_config_json(tmp_path, **{key: value}))
    assert err.field == f"model.{key}"
    assert "must be an integer" in err.rule


@pytest.mark.parametrize("key", ["num_local_experts", "num_experts"])
def test_expert_count_of_0_1_or_null_is_dense(tmp_path, key):
    for value in (0, 1, None):
        assert perfmodel.load_model(_config_json(tmp_path, **{key: value})).n_layers == 32


def test_mixture_of_experts_is_refused(tmp_path):
    err = _error(_config_json(tmp_path, num_local_experts=8))
    assert err.field == "model" and "mixture-of-experts" in err.rule


@pytest.mark.parametrize("key,value,field", [
    ("intermediate_size", 0, "model.ffn_hidden_size"),   # was silently replaced by 4 * hidden
    ("intermediate_size", -1, "model.ffn_hidden_size"),
    ("intermediate_size", "14336", "model.ffn_hidden_size"),
    ("num_key_value_heads", "8", "model.n_kv_heads"),    # was read as 8 by pydantic's lax mode
    ("num_key_value_heads", 0, "model.n_kv_heads"),
    ("head_dim", "128", "model.head_dim"),
    ("num_hidden_layers", 0, "model.n_layers"),
    ("num_hidden_layers", True, "model.n_layers"),
])
def test_given_config_json_integers_are_used_as_given_or_refused(tmp_path, key, value, field):
    err = _error(_config_json(tmp_path, **{key: value}))
    assert err.field == field
    assert key in err.rule and ("must be an integer" in err.rule or "must be a positive integer" in err.rule)


@pytest.mark.parametrize("value,kept", [(8192, 8192), (4096.0, 4096), (1e30, None), ("8k", None), (0, None)])
def test_the_trained_context_length_is_kept_for_reference_only(tmp_path, value, kept):
    """In a RoPE model no cost reads max_position_embeddings: a value outside a whole positive length is
    not kept, and never rejects the model (GPT-2's learned table is sized by it: tests/cli/test_input_audit.py)."""
    p = tmp_path / "config.json"
    p.write_text(json.dumps({**LLAMA3_8B_HF, "max_position_embeddings": value}))
    assert perfmodel.load_model(str(p)).max_seq_len == kept


def test_falcon_multi_query_and_gemma_tying(tmp_path):
    """Falcon-7B states multi_query: true (one KV head); Gemma configs omit tie_word_embeddings,
    whose GemmaConfig default is true."""
    p = tmp_path / "config.json"
    p.write_text(json.dumps({"model_type": "falcon", "hidden_size": 4544, "num_attention_heads": 71,
                             "num_hidden_layers": 32, "vocab_size": 65024, "multi_query": True, "hidden_act": "gelu"}))
    assert perfmodel.load_model(str(p)).n_kv_heads == 1
    p.write_text(json.dumps({"model_type": "gemma", "hidden_size": 3072, "intermediate_size": 24576,
                             "num_attention_heads": 16, "num_key_value_heads": 16, "num_hidden_layers": 28,
                             "vocab_size": 256000, "hidden_act": "gelu_pytorch_tanh"}))
    m = perfmodel.load_model(str(p))
    assert m.tied_embeddings and m.mlp == "swiglu"


def test_only_a_missing_mlp_width_takes_the_gpt2_default(tmp_path):
    """GPT-2 writes n_inner: null for 4 * n_embd; a Llama config without intermediate_size would take
    LlamaConfig's 11008 whatever its width in transformers, not 4h: an error, not a guess."""
    gpt2 = {"model_type": "gpt2", "n_embd": 1600, "n_head": 25, "n_layer": 48, "vocab_size": 50257,
            "activation_function": "gelu_new"}
    p = tmp_path / "config.json"
    for extra in ({}, {"n_inner": None}):
        p.write_text(json.dumps({**gpt2, **extra}))
        assert perfmodel.load_model(str(p)).ffn_hidden_size == 4 * 1600
    p.write_text(json.dumps({k: v for k, v in LLAMA3_8B_HF.items() if k != "intermediate_size"}))
    err = _error(str(p))
    assert err.field == "model.ffn_hidden_size" and "intermediate_size" in err.rule


def test_encoder_decoder_configs_are_refused(tmp_path):
    t5 = {"model_type": "t5", "is_encoder_decoder": True, "d_model": 768, "num_heads": 12, "num_layers": 12,
          "num_decoder_layers": 12, "d_ff": 2048, "vocab_size": 32128, "feed_forward_proj": "gated-gelu"}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(t5))
    err = _error(str(p))
    assert err.field == "model.is_encoder_decoder" and "encoder-decoder" in err.rule


@pytest.mark.parametrize("value", ["no", "false", 0, 1, None])
def test_tie_word_embeddings_must_be_a_json_boolean(tmp_path, value):
    ref = _config_json(tmp_path, tie_word_embeddings=value)
    if value is None:  # null: not given, the documented default (untied for a gated MLP)
        assert perfmodel.load_model(ref).tied_embeddings is False
        return
    err = _error(ref)
    assert err.field == "model.tied_embeddings"
    assert "tie_word_embeddings" in err.rule and "boolean" in err.rule


@pytest.mark.parametrize("value", [True, False])
def test_tie_word_embeddings_booleans_are_read(tmp_path, value):
    assert perfmodel.load_model(_config_json(tmp_path, tie_word_embeddings=value)).tied_embeddings is value


def test_null_model_type_and_activation_are_missing_not_the_string_none(tmp_path):
    """str(None) == 'none' passed the check and the MLP was guessed as gelu."""
    err = _error(_config_json(tmp_path, model_type=None, hidden_act=None))
    assert err.field == "model.mlp"
    assert "neither hidden_act nor model_type" in err.rule


@pytest.mark.parametrize("key,value", [("model_type", 5), ("hidden_act", ["silu"])])
def test_model_type_and_activation_must_be_strings(tmp_path, key, value):
    err = _error(_config_json(tmp_path, **{key: value}))
    assert err.field == f"model.{key}"
    assert "string" in err.rule


@pytest.mark.parametrize("field", ["n_layers", "hidden_size", "ffn_hidden_size", "n_heads", "n_kv_heads",
                                   "vocab_size", "max_seq_len"])
@pytest.mark.parametrize("value", [True, False])
def test_model_yaml_integers_refuse_booleans(tmp_path, field, value):
    """`n_layers: true` was read as a 1-layer model (pydantic's lax bool -> int)."""
    err = _error(_model_yaml(tmp_path, **{field: value}))
    assert err.field == f"model.{field}"
    assert "boolean" in str(err)


def test_model_yaml_integral_floats_still_load(tmp_path):
    m = perfmodel.load_model(_model_yaml(tmp_path, n_layers=32.0, hidden_size=4096.0))
    assert (m.n_layers, m.hidden_size) == (32, 4096)


@pytest.mark.parametrize("field,value", [
    ("n_layers", 10_001),
    ("hidden_size", 4_096_000_000),                 # f/m_hhuge.yaml
    ("ffn_hidden_size", 9_223_372_036_854_775_807),
    ("n_heads", 1 << 17),
    ("n_kv_heads", 1 << 17),
    ("vocab_size", 99_999_999_999_999_999_999_999),  # f/m_ovf3.yaml
    ("max_seq_len", 1 << 31),
])
def test_model_dimensions_have_upper_bounds(tmp_path, field, value):
    err = _error(_model_yaml(tmp_path, **{field: value}))
    assert err.field == f"model.{field}"
    assert "less than or equal to" in err.rule


def test_model_dimensions_at_their_bounds_load():
    from perfmodel.specs.model import MAX_HEADS, MAX_LAYERS, MAX_VOCAB, MAX_WIDTH

    m = perfmodel.ModelSpec(name="big", n_layers=MAX_LAYERS, hidden_size=MAX_WIDTH, ffn_hidden_size=MAX_WIDTH,
                            n_heads=MAX_HEADS, n_kv_heads=MAX_HEADS, vocab_size=MAX_VOCAB)
    assert m.head_dim == MAX_WIDTH // MAX_HEADS


@pytest.mark.parametrize("cfg,expected", [
    # BLOOM: n_embed; MPT / original OLMo: d_model, n_heads, n_layers; GPT-Neo: num_heads, num_layers
    ({"model_type": "bloom", "n_embed": 14336, "num_attention_heads": 112, "n_layer": 70, "vocab_size": 250880},
     (70, 14336, 112, 112)),
    ({"model_type": "mpt", "d_model": 4096, "n_heads": 32, "n_layers": 32, "vocab_size": 50432}, (32, 4096, 32, 32)),
    ({"model_type": "gpt_neo", "hidden_size": 2560, "num_heads": 20, "num_layers": 32, "vocab_size": 50257},
     (32, 2560, 20, 20)),
    # Falcon-40B's original RefinedWeb config: n_head_kv
    ({"model_type": "RefinedWeb", "hidden_size": 8192, "n_head": 128, "n_head_kv": 8, "n_layer": 60,
      "vocab_size": 65024}, (60, 8192, 128, 8)),
])
def test_dimension_spellings_transformers_maps(tmp_path, cfg, expected):
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    m = perfmodel.load_model(str(p))
    assert (m.n_layers, m.hidden_size, m.n_heads, m.n_kv_heads) == expected


def test_squared_relu_is_read(tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps({"model_type": "nemotron", "hidden_size": 4096, "intermediate_size": 16384,
                             "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 32,
                             "vocab_size": 256000, "hidden_act": "relu2"}))
    assert perfmodel.load_model(str(p)).mlp == "relu2"


def test_mpt_expansion_ratio_sets_the_mlp_width(tmp_path):
    p = tmp_path / "config.json"
    mpt = {"model_type": "mpt", "d_model": 1024, "n_heads": 16, "n_layers": 24, "vocab_size": 50432}
    p.write_text(json.dumps({**mpt, "expansion_ratio": 8}))
    assert perfmodel.load_model(str(p)).ffn_hidden_size == 8192
    p.write_text(json.dumps(mpt))
    assert perfmodel.load_model(str(p)).ffn_hidden_size == 4096
    p.write_text(json.dumps({**mpt, "expansion_ratio": "8"}))
    assert _error(str(p)).field == "model.ffn_hidden_size"


# ---- a review of the Hugging Face loader against transformers' own configs ------------------------------
pm = perfmodel
FALCON_7B_SAVED = {  # tiiuae/falcon-7b as transformers' save_pretrained writes it (num_kv_heads beside multi_query)
    "architectures": ["FalconForCausalLM"], "bias": False, "hidden_size": 4544, "model_type": "falcon",
    "multi_query": True, "new_decoder_architecture": False, "num_attention_heads": 71, "num_hidden_layers": 32,
    "num_kv_heads": 71, "parallel_attn": True, "vocab_size": 65024,
}


def _hf(tmp_path, cfg, name="config.json"):
    path = tmp_path / name
    path.write_text(json.dumps(cfg))
    return pm.load_model(str(path))


def test_falcon_multi_query_is_one_kv_head_whatever_num_kv_heads_says(tmp_path):
    """transformers FalconAttention: num_kv_heads if new_decoder_architecture or not multi_query else 1;
    Falcon-7B has 6.92B parameters (query_key_value out_features 4544 + 2 x 64)."""
    m = _hf(tmp_path, FALCON_7B_SAVED)
    assert m.n_kv_heads == 1 and m.parallel_block
    assert m.n_params() / 1e9 == pytest.approx(6.92, abs=0.01)
    m40 = _hf(tmp_path, {**FALCON_7B_SAVED, "new_decoder_architecture": True, "num_kv_heads": 8,
                         "num_attention_heads": 128, "hidden_size": 8192, "num_hidden_layers": 60})
    assert m40.n_kv_heads == 8


def test_parallel_blocks_are_read(tmp_path):
    """GPT-NeoX's use_parallel_residual (true when absent, as GPTNeoXConfig defaults), GPT-J always,
    Llama never."""
    neox = {"model_type": "gpt_neox", "hidden_size": 6144, "num_hidden_layers": 44, "num_attention_heads": 64,
            "intermediate_size": 24576, "vocab_size": 50432, "hidden_act": "gelu", "tie_word_embeddings": False}
    assert _hf(tmp_path, neox).parallel_block
    assert not _hf(tmp_path, {**neox, "use_parallel_residual": False}).parallel_block
    gptj = {"model_type": "gptj", "n_embd": 4096, "n_layer": 28, "n_head": 16, "vocab_size": 50400,
            "activation_function": "gelu_new"}
    assert _hf(tmp_path, gptj).parallel_block
    assert not pm.load_model("llama3-8b").parallel_block


def test_a_parallel_block_reduces_once_in_forward():
    """GPT-NeoX ParallelTransformerLayer (gpt_j_residual): the attention and MLP row-parallel outputs are summed
    before one reduction in forward; the backward keeps one per branch: 3 reductions a layer instead of 4,
    and full recompute re-runs the one forward reduction (4 instead of 6)."""
    model = pm.load_model("gpt3-13b")
    cluster = pm.ClusterSpec.build(pm.load_gpu("a100-sxm4-80gb"), 8, 8)
    job = pm.JobSpec(global_batch=8, seq_len=2048)

    def tp_s(parallel, recompute):
        m = model.model_copy(update={"parallel_block": parallel})
        par = pm.ParallelSpec(tp=8, pp=1, dp=1, recompute=recompute, zero_stage=0)
        return pm.estimate(m, cluster, par, job).time_breakdown_s["tp_comm_s"]

    assert tp_s(True, "none") == pytest.approx(0.75 * tp_s(False, "none"), rel=1e-9)
    assert tp_s(True, "full") == pytest.approx(4.0 / 6.0 * tp_s(False, "full"), rel=1e-9)


def test_opt_projected_embeddings_are_refused(tmp_path):
    opt350 = {"model_type": "opt", "hidden_size": 1024, "word_embed_proj_dim": 512, "num_hidden_layers": 24,
              "num_attention_heads": 16, "ffn_dim": 4096, "vocab_size": 50272, "activation_function": "relu"}
    with pytest.raises(InputError) as exc:
        _hf(tmp_path, opt350)
    assert exc.value.field == "model.word_embed_proj_dim"
    assert _hf(tmp_path, {**opt350, "word_embed_proj_dim": 1024}).hidden_size == 1024


def test_a_sliding_window_is_a_note_of_every_output(tmp_path):
    """Not a bare stderr print: the note is the model's (ModelSpec.notes) and so in est.notes, in --json's
    notes list, and stderr stays empty."""
    from typer.testing import CliRunner

    from perfmodel.cli import app

    mistral = {"model_type": "mistral", "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 14336,
               "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8, "sliding_window": 4096,
               "tie_word_embeddings": False, "vocab_size": 32000}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(mistral))
    m = pm.load_model(str(path))
    assert any("sliding_window" in n for n in m.notes)
    est = pm.estimate(m, pm.ClusterSpec.build(pm.load_gpu("h100-sxm5-80gb"), 8, 8), pm.ParallelSpec(dp=8),
                      pm.JobSpec(global_batch=8, seq_len=8192))
    assert any("sliding_window" in n for n in est.notes)
    res = CliRunner().invoke(app, ["estimate", "--model", str(path), "--gpu", "h100-sxm5-80gb", "--gpus", "8",
                                   "--global-batch", "8", "--json"])
    assert res.exit_code == 0 and not res.stderr
    assert any("sliding_window" in n for n in json.loads(res.stdout)["notes"])


@pytest.mark.parametrize("field", ["tied_embeddings", "learned_pos_emb", "parallel_block", "qkv_bias"])
@pytest.mark.parametrize("value", [1, 0.0, "yes", "off", "true"])
def test_a_model_switch_is_true_or_false_not_a_value_to_coerce(field, value):
    """Every yes/no field of a model refuses 1, 0.0 and words alike (qkv_bias took them: it changes the
    emitted flags)."""
    base = pm.load_model("llama3-8b").model_dump()
    with pytest.raises(ValidationError, match="true or false"):
        pm.ModelSpec(**{**base, field: value})
