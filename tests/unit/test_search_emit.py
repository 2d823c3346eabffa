"""``--emit``: the chosen configuration in each framework's own flag and key names.

The reference name lists below are copied from the projects' sources:

* Megatron-LM ``megatron/training/arguments.py`` (NVIDIA/Megatron-LM, commit 000c4ac2...,
  ``group.add_argument('--...')`` names in _add_network_size_args, _add_training_args,
  _add_distributed_args, _add_mixed_precision_args, _add_transformer_engine_args).
* DeepSpeed ``deepspeed/runtime/constants.py`` (top-level keys), ``deepspeed/runtime/zero/config.py``
  (``DeepSpeedZeroConfig`` fields) and ``deepspeed/runtime/activation_checkpointing/config.py``.
* torchtitan 0.2.0 (PyPI) ``torchtitan/config/job_config.py`` (``Training``, ``Parallelism``,
  ``ActivationCheckpoint``, ``Compile``, ``Model`` dataclass fields) and
  ``torchtitan/components/quantization/float8.py`` (``register_model_converter(..., "quantize.linear.float8")``).
"""
from __future__ import annotations

import json
import tomllib

import pytest
from typer.testing import CliRunner

import perfmodel as pm
from perfmodel.cli import app
from perfmodel.search import run_search
from perfmodel.search.emit import deepspeed_config, emit_notes, megatron_flags, torchtitan_toml

runner = CliRunner()

MEGATRON_ARGS = {
    # _add_network_size_args
    "--num-layers", "--hidden-size", "--ffn-hidden-size", "--num-attention-heads", "--group-query-attention",
    "--num-query-groups", "--max-position-embeddings", "--swiglu", "--untie-embeddings-and-output-weights",
    "--disable-bias-linear", "--add-qkv-bias", "--position-embedding-type", "--squared-relu",
    # _add_regularization_args
    "--attention-dropout", "--hidden-dropout",
    # _add_training_args
    "--micro-batch-size", "--global-batch-size", "--recompute-granularity", "--recompute-method",
    "--recompute-num-layers", "--no-gradient-accumulation-fusion",
    "--tp-comm-overlap",  # next to --profile-ranks: "Enables the overlap of Tensor parallel communication and GEMM"
    # _add_data_args
    "--seq-length", "--no-create-attention-mask-in-dataloader",
    # _add_distributed_args
    "--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--context-parallel-size",
    "--num-layers-per-virtual-pipeline-stage", "--account-for-embedding-in-pipeline-split",
    "--account-for-loss-in-pipeline-split", "--sequence-parallel", "--use-distributed-optimizer",
    "--overlap-grad-reduce", "--overlap-param-gather", "--use-megatron-fsdp", "--data-parallel-sharding-strategy",
    # _add_checkpointing_args
    "--ckpt-format",
    # _add_mixed_precision_args / _add_transformer_engine_args
    "--fp16", "--bf16", "--fp8-format", "--fp8-recipe", "--fp4-format", "--fp4-recipe",
}
MEGATRON_CHOICES = {
    "--recompute-granularity": {"full", "selective"},
    "--recompute-method": {"uniform", "block"},
    "--data-parallel-sharding-strategy": {"no_shard", "optim", "optim_grads", "optim_grads_params"},
    "--fp8-format": {"e4m3", "hybrid"},
    "--fp8-recipe": {"tensorwise", "delayed", "mxfp8", "blockwise"},
    "--fp4-format": {"e2m1"},
    "--fp4-recipe": {"nvfp4"},
    "--position-embedding-type": {"learned_absolute", "rope", "mrope", "relative", "none"},
}

DEEPSPEED_TOP = {  # deepspeed/runtime/constants.py; tensor_parallel: AutoTP training (deepspeed.ai/tutorials/autotp-training)
    "train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "steps_per_print",
    "gradient_clipping", "bf16", "fp16", "zero_optimization", "activation_checkpointing", "tensor_parallel",
}
DEEPSPEED_ZERO = {  # deepspeed/runtime/zero/config.py DeepSpeedZeroConfig
    "stage", "contiguous_gradients", "reduce_scatter", "reduce_bucket_size", "allgather_partitions",
    "allgather_bucket_size", "overlap_comm", "offload_param", "offload_optimizer", "sub_group_size",
    "zero_hpz_partition_size", "zero_quantized_weights", "zero_quantized_nontrainable_weights",
    "zero_quantized_gradients", "memory_efficient_linear",
}
DEEPSPEED_AC = {"partition_activations", "contiguous_memory_optimization", "cpu_checkpointing",
                "number_checkpoints", "synchronize_checkpoint_boundary", "profile"}

TORCHTITAN = {
    "training": {"local_batch_size", "global_batch_size", "seq_len", "max_norm", "steps", "dtype",
                 "mixed_precision_param", "mixed_precision_reduce"},
    "parallelism": {
        "data_parallel_replicate_degree", "data_parallel_shard_degree", "fsdp_reshard_after_forward",
        "tensor_parallel_degree", "disable_loss_parallel", "enable_async_tensor_parallel",
        "pipeline_parallel_degree", "pipeline_parallel_split_points", "pipeline_parallel_layers_per_stage",
        "pipeline_parallel_schedule", "pipeline_parallel_microbatch_size", "context_parallel_degree",
        "context_parallel_rotate_method",
    },
    "activation_checkpoint": {"mode", "selective_ac_option"},
    "model": {"name", "flavor", "converters"},
    "compile": {"enable", "components", "backend"},
}
#: the fp8 converter's registered name in that release
TORCHTITAN_FP8_CONVERTER = "quantize.linear.float8"

ROWS = [
    dict(tp=4, pp=8, dp=32, cp=1, vpp=12, micro_batch=2, sp=True, zero_stage=1, zeropp="", recompute="none"),
    dict(tp=8, pp=1, dp=64, cp=2, vpp=1, micro_batch=1, sp=True, zero_stage=3, zeropp="qwz,hpz,qgz",
         recompute="full"),
    dict(tp=1, pp=4, dp=128, cp=1, vpp=1, micro_batch=4, sp=False, zero_stage=0, zeropp="", recompute="selective"),
    dict(tp=2, pp=1, dp=256, cp=1, vpp=1, micro_batch=1, sp=True, zero_stage=2, zeropp="", recompute="none"),
]


def _job(precision="bf16", framework="megatron-lm"):
    return pm.JobSpec(global_batch=1536, seq_len=2048, precision=precision, framework=framework)


@pytest.mark.parametrize("row", ROWS)
@pytest.mark.parametrize("precision", ["bf16", "fp16", "fp8", "mxfp8", "nvfp4"])
def test_megatron_flags_are_real(row, precision):
    for name in ("gpt3-175b", "llama3-70b"):
        flags = megatron_flags(pm.load_model(name), _job(precision), row)
        names = [t for t in flags if t.startswith("--")]
        assert set(names) <= MEGATRON_ARGS, set(names) - MEGATRON_ARGS
        assert len(names) == len(set(names))
        for flag, allowed in MEGATRON_CHOICES.items():
            if flag in flags:
                assert flags[flags.index(flag) + 1] in allowed


def test_megatron_flag_values():
    model = pm.load_model("gpt3-175b")
    flags = megatron_flags(model, _job(), ROWS[0])
    val = {flags[i]: flags[i + 1] for i in range(len(flags) - 1) if not flags[i + 1].startswith("--")}
    assert val["--tensor-model-parallel-size"] == "4" and val["--pipeline-model-parallel-size"] == "8"
    assert val["--num-layers-per-virtual-pipeline-stage"] == str(96 // 8 // 12)
    assert val["--micro-batch-size"] == "2" and val["--global-batch-size"] == "1536"
    assert "--sequence-parallel" in flags and "--use-distributed-optimizer" in flags


@pytest.mark.parametrize("row", ROWS)
def test_deepspeed_keys_are_real(row):
    cfg = deepspeed_config(pm.load_model("gpt3-175b"), _job(), row)
    json.dumps(cfg)
    assert set(cfg) <= DEEPSPEED_TOP
    assert set(cfg["zero_optimization"]) <= DEEPSPEED_ZERO
    assert {"zero_quantized_weights", "zero_hpz_partition_size", "zero_quantized_gradients"} <= set(
        cfg["zero_optimization"])
    assert set(cfg.get("activation_checkpointing", {})) <= DEEPSPEED_AC
    assert cfg["train_batch_size"] == cfg["train_micro_batch_size_per_gpu"] * cfg["gradient_accumulation_steps"] * row["dp"]
    assert cfg["zero_optimization"]["stage"] == row["zero_stage"]
    assert cfg["zero_optimization"]["zero_quantized_weights"] == ("qwz" in row["zeropp"])


@pytest.mark.parametrize("row", ROWS)
def test_torchtitan_toml_is_real(row):
    text = torchtitan_toml(pm.load_model("llama3-70b"), _job(), row)
    doc = tomllib.loads(text)
    assert set(doc) <= set(TORCHTITAN)
    for section, keys in doc.items():
        assert set(keys) <= TORCHTITAN[section], set(keys) - TORCHTITAN[section]
    par = doc["parallelism"]
    assert par["tensor_parallel_degree"] == row["tp"] and par["pipeline_parallel_degree"] == row["pp"]
    assert par["context_parallel_degree"] == row["cp"]
    # the ring the model costs: torchtitan 0.2.0's default rotate method "allgather" gathers all K/V at once
    assert par.get("context_parallel_rotate_method") == ("alltoall" if row["cp"] > 1 else None)
    assert par["data_parallel_replicate_degree"] * par["data_parallel_shard_degree"] == row["dp"]
    assert doc["activation_checkpoint"]["mode"] == row["recompute"]


def test_torchtitan_toml_names_the_version_it_is_written_for():
    """The job config's keys change between torchtitan releases: the text says which one it follows,
    compiles the model as the runs the torchtitan rates come from did, and names the fp8 converter of that
    version, with a note for later ones."""
    from perfmodel.search.emit import TORCHTITAN_VERSION

    model = pm.load_model("llama3-70b")
    text = torchtitan_toml(model, _job("fp8", "torchtitan"), ROWS[1])
    assert text.splitlines()[0] == f"# {TORCHTITAN_VERSION}" and "torchtitan==0.2.0" in TORCHTITAN_VERSION
    doc = tomllib.loads(text)
    assert doc["compile"]["enable"] is True
    assert doc["model"]["converters"] == [TORCHTITAN_FP8_CONVERTER]
    notes = emit_notes("torchtitan", model, _job("fp8", "torchtitan"), ROWS[1])
    assert any("named it float8" in n for n in notes)
    assert not any("float8" in n for n in emit_notes("torchtitan", model, _job("bf16", "torchtitan"), ROWS[1]))


@pytest.mark.parametrize("target", ["megatron", "deepspeed", "torchtitan"])
def test_cli_emit(target):
    args = ["recommend", "--model", "llama3-8b", "--gpu", "h100-sxm5-80gb", "--gpus", "64",
            "--global-batch", "256", "--seq-len", "8192", "--emit", target]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, args + ["--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    text = out["emit"]["text"]
    win = out["top"][0]
    if target == "deepspeed":
        assert json.loads(text)["train_micro_batch_size_per_gpu"] == win["micro_batch"]
    elif target == "torchtitan":
        assert tomllib.loads(text)["parallelism"]["tensor_parallel_degree"] == win["tp"]
    else:
        assert f"--tensor-model-parallel-size {win['tp']}" in text


def test_emit_matches_search_winner():
    model = pm.load_model("gpt3-175b")
    cluster = pm.ClusterSpec.build(pm.load_gpu("a100-sxm4-80gb"), 1024, 8)
    job = _job()
    best = run_search(model, cluster, job, top=1).candidates.iloc[0].to_dict()
    flags = megatron_flags(model, job, best)
    assert flags[flags.index("--pipeline-model-parallel-size") + 1] == str(best["pp"])
    assert flags[flags.index("--micro-batch-size") + 1] == str(best["micro_batch"])


def test_megatron_flags_carry_the_overlaps_that_were_costed():
    """megatron-lm is costed as Megatron-LM defaults (no overlap): its flags leave the overlap switches
    off and the hint names them; nemo is costed with its recipes' overlaps and its flags turn them on."""
    from perfmodel.search.emit import megatron_overlap_hint

    model = pm.load_model("llama3-70b")
    row = {"tp": 4, "pp": 4, "dp": 4, "cp": 1, "vpp": 1, "micro_batch": 1, "sp": True, "zero_stage": 1,
           "recompute": "none"}
    plain = megatron_flags(model, _job(framework="megatron-lm"), row)
    recipe = megatron_flags(model, _job(framework="nemo"), row)
    switches = {"--overlap-grad-reduce", "--overlap-param-gather", "--tp-comm-overlap"}
    names = {t for t in recipe if t.startswith("--")}
    assert not switches & set(plain) and switches <= names <= MEGATRON_ARGS
    hint = megatron_overlap_hint(_job(framework="megatron-lm"), row)
    assert all(s in hint for s in switches)
    assert megatron_overlap_hint(_job(framework="nemo"), row) is None


def test_the_emitted_deepspeed_config_reads_back_to_the_same_prediction(tmp_path):
    """Round trip: the search's ZeRO++ winner for a DeepSpeed job, emitted as a DeepSpeed JSON and given
    back to `perfmodel estimate --deepspeed-config` with its layout, costs what the search said."""
    model = pm.load_model("llama3-8b")
    cluster = pm.ClusterSpec.build(pm.load_gpu("h100-sxm5-80gb"), 64, 8, 400.0)
    job = pm.JobSpec(global_batch=256, seq_len=4096, precision="bf16", framework="deepspeed")
    df = pm.search(model, cluster, job, top=None)  # every feasible candidate, best first
    zpp = df[(df["zero_stage"] == 3) & (df["zeropp"] != "")]
    assert len(zpp), "the search tries ZeRO++ for DeepSpeed"
    row = zpp.iloc[0].to_dict()
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps(deepspeed_config(model, job, row)))
    args = ["estimate", "--model", "llama3-8b", "--gpu", "h100-sxm5-80gb", "--gpus", "64", "--gpus-per-node", "8",
            "--scale-out-gbit-per-s", "400", "--global-batch", "256", "--seq-len", "4096", "--framework", "deepspeed",
            "--tp", str(row["tp"]), "--pp", str(row["pp"]), "--cp", str(row["cp"]), "--vpp", str(row["vpp"]),
            "--recompute", row["recompute"], "--sp" if row["sp"] else "--no-sp", "--deepspeed-config", str(ds),
            "--json"]
    if row.get("cp_kind"):
        args += ["--cp-kind", row["cp_kind"]]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["config"]["zeropp"] == row["zeropp"] and out["config"]["micro_batch"] == row["micro_batch"]
    assert out["tokens_per_s_per_gpu"] == pytest.approx(row["tokens_per_s_per_gpu"], rel=1e-9)


# ---- pipeline splits the frameworks accept ------------------------------------------------------
def _megatron_split(flags: list[str], n_layers: int, pp: int) -> int:
    """Megatron-LM validate_args: num_layers += 1 per --account-for-*-in-pipeline-split; num_layers % pp
    == 0; layers per stage % --num-layers-per-virtual-pipeline-stage == 0; vpp = their ratio."""
    n = n_layers + sum(f in flags for f in ("--account-for-embedding-in-pipeline-split",
                                            "--account-for-loss-in-pipeline-split"))
    assert n % pp == 0
    per_stage = n // pp
    if "--num-layers-per-virtual-pipeline-stage" not in flags:
        return 1
    per_chunk = int(flags[flags.index("--num-layers-per-virtual-pipeline-stage") + 1])
    assert per_chunk > 0 and per_stage % per_chunk == 0
    return per_stage // per_chunk


@pytest.mark.parametrize("n_layers", [24, 30, 40, 62, 80, 96, 126])
def test_megatron_flags_give_the_costed_interleaving(n_layers):
    """Every (pp, vpp) the search allows (rules PP_LAYERS and VPP_LAYERS: L or L + 2 splits) comes out as
    flags Megatron accepts and that run exactly vpp chunks per stage (llama2-13b: vpp 21 on pp 2 is one
    layer per chunk with the embedding and the loss counted; gpt3-13b vpp 7 on pp 2, three)."""
    from perfmodel import rules

    model = pm.load_model("llama2-13b").model_copy(update={"n_layers": n_layers})
    for pp in range(2, n_layers + 3):
        for vpp in range(1, n_layers + 3):
            x = {"n_layers": n_layers, "pp": pp, "vpp": vpp}
            if rules.PP_LAYERS.broken(x) or rules.VPP_LAYERS.broken(x):
                continue
            row = dict(ROWS[0], tp=1, pp=pp, dp=1, vpp=vpp)
            assert _megatron_split(megatron_flags(model, _job(), row), n_layers, pp) == vpp, (pp, vpp)


def _torchtitan_stages(doc: dict, n_layers: int) -> int:
    """torchtitan's pipeline split: ceil((n_layers + 1 + 1) / layers_per_stage) stages, or pp (1F1B) and
    2 pp (looped schedules) when layers_per_stage is unset (distributed/pipeline_parallel.py)."""
    par = doc["parallelism"]
    lps = par.get("pipeline_parallel_layers_per_stage")
    looped = par.get("pipeline_parallel_schedule") != "1F1B"
    stages = -(-(n_layers + 2) // lps) if lps else par["pipeline_parallel_degree"] * (2 if looped else 1)
    assert stages % par["pipeline_parallel_degree"] == 0
    per_rank = stages // par["pipeline_parallel_degree"]
    assert (per_rank == 1) if not looped else (per_rank >= 2)
    return stages


@pytest.mark.parametrize("n_layers", [16, 32, 40, 80, 126])
def test_torchtitan_toml_gives_the_costed_stages(n_layers):
    """Where the rule TT_PP_SPLIT lets torchtitan run pp x vpp stages, the TOML builds exactly those."""
    from perfmodel import rules

    model = pm.load_model("llama3-70b").model_copy(update={"n_layers": n_layers})
    seen_rejected = False
    for pp in (2, 4, 8, 16):
        for vpp in range(1, 12):
            x = {"n_layers": n_layers, "pp": pp, "vpp": vpp, "framework": "torchtitan"}
            if rules.TT_PP_SPLIT.broken(x):
                seen_rejected = True
                continue
            row = dict(ROWS[0], tp=1, pp=pp, dp=1, vpp=vpp, zero_stage=3)
            doc = tomllib.loads(torchtitan_toml(model, _job(framework="torchtitan"), row))
            assert _torchtitan_stages(doc, n_layers) == pp * vpp, (pp, vpp)
    assert seen_rejected  # e.g. 80 layers on pp 8: no layer count per stage makes 80 stages


def test_torchtitan_search_keeps_to_splits_torchtitan_runs():
    from perfmodel.rules import torchtitan_split_ok

    model = pm.load_model("llama3-70b")
    cluster = pm.ClusterSpec.build(pm.load_gpu("a100-sxm4-80gb"), 256, 8)
    res = run_search(model, cluster, pm.JobSpec(global_batch=64, seq_len=2048, framework="torchtitan"))
    df = res.candidates
    assert (df.pp > 1).any() and (df.vpp > 2).any()
    assert bool(torchtitan_split_ok(80, df.pp.to_numpy(), df.vpp.to_numpy()).all())
    assert any("torchtitan must be 1 or 2" in k for k in res.rejected)


def test_emit_notes_say_what_the_target_cannot_carry():
    model = pm.load_model("llama3-8b")
    row = dict(ROWS[0], cp=4, cp_kind="ulysses", zero_stage=1, recompute="balanced", offload_fraction=0.5)
    ds = emit_notes("deepspeed", model, _job("fp8", "megatron-kwai"), row)
    assert any("tp=4 pp=8 cp=4 vpp=12" in n for n in ds) and any("fp8" in n for n in ds)
    assert any("offload" in n for n in ds)
    tt = emit_notes("torchtitan", model, _job("bf16", "megatron-kwai"), row)
    assert any("ZeRO-1" in n for n in tt) and any("Ulysses" in n for n in tt) and any("balanced" in n for n in tt)
    doc = tomllib.loads(torchtitan_toml(model, _job("fp8", "megatron-kwai"), row))
    assert doc["activation_checkpoint"]["mode"] == "selective"
    assert doc["model"]["converters"] == [TORCHTITAN_FP8_CONVERTER]
    mg = emit_notes("megatron", model, _job(), dict(ROWS[1]))
    assert any("ZeRO++" in n for n in mg) and any("RMSNorm" in n for n in mg)
    # nothing to say where the target carries everything (besides Megatron's normalization reminder) ...
    assert emit_notes("deepspeed", model, _job("bf16", "deepspeed"), dict(ROWS[3], tp=1)) == []
    # ... but that it was costed as another stack runs it (tests/cli/test_third_audit.py)
    assert [n.split(" (")[0] for n in emit_notes("deepspeed", model, _job(), dict(ROWS[3], tp=1))] == [
        "costed as megatron-lm runs it"]


def test_emit_for_another_stack_says_what_its_own_stack_cannot_run():
    """A review (2026-12-02): torchtitan's winner with FSDP beside a 32-stage pipeline was emitted as Megatron
    flags (--use-megatron-fsdp with --pipeline-model-parallel-size 32) and as a DeepSpeed stage-3 config with
    pp 32, both of which those engines refuse (rules.ZERO_PP), with only the 'costed as torchtitan' note."""
    model = pm.load_model("llama3.1-405b")
    cluster = pm.ClusterSpec.build(pm.load_gpu("h100-sxm5-80gb"), 1536)
    row = dict(tp=4, pp=32, dp=12, cp=1, vpp=1, micro_batch=1, sp=True, zero_stage=3, zeropp="", recompute="none",
               cp_kind="ring", offload_fraction=0.0)
    tt_job = pm.JobSpec(global_batch=1536, seq_len=8192, framework="torchtitan")
    for target, own in (("megatron", "megatron-lm"), ("deepspeed", "deepspeed")):
        notes = emit_notes(target, model, tt_job, row, cluster)
        assert any(n.startswith(f"{own} cannot run this configuration") and "pipeline" in n for n in notes), notes
    # the stack's own target, or a row its target's stack runs, gets no such note
    assert not any("cannot run this configuration" in n for n in emit_notes("torchtitan", model, tt_job, row, cluster))
    assert not any("cannot run this configuration" in n
                   for n in emit_notes("megatron", model, tt_job, dict(row, zero_stage=1), cluster))


def test_cli_emit_prints_and_returns_the_notes():
    args = ["recommend", "--model", "llama3-8b", "--gpu", "h100-sxm5-80gb", "--gpus", "64", "--global-batch", "64",
            "--seq-len", "8192", "--precision", "fp8", "--framework", "deepspeed", "--emit", "deepspeed"]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    assert "# note: fp8 GEMMs come from Transformer Engine" in r.stdout
    j = json.loads(runner.invoke(app, args + ["--json"]).stdout)
    assert any("fp8" in n for n in j["emit"]["notes"])


def test_explanation_names_the_cp_kind_zeropp_and_offload():
    from perfmodel.search.explain import _diff_keys, describe

    a = dict(ROWS[0], cp=4, cp_kind="ulysses", offload_fraction=0.0)
    b = dict(a, cp_kind="ring")
    assert _diff_keys(a, b) == "cp_kind ulysses vs ring"
    assert "cp_kind=ulysses" in describe(a) and "cp_kind" not in describe(dict(a, cp=1))
    c = dict(ROWS[1], offload_fraction=0.25)
    assert "zero++=qwz,hpz,qgz" in describe(c) and "offload=0.25" in describe(c)
    assert _diff_keys(c, dict(c, zeropp="", offload_fraction=0.0)) == "zero++ qwz,hpz,qgz vs none, offload 0.25 vs none"


def test_the_common_default_never_offloads_and_cp_kind_differs_only_between_split_sequences():
    from perfmodel.search.explain import _diff_keys

    model = pm.load_model("llama3-70b")
    cluster = pm.ClusterSpec.build(pm.load_gpu("h100-sxm5-80gb"), 32, 8)
    res = run_search(model, cluster, pm.JobSpec(global_batch=64, seq_len=16384, framework="megatron-kwai"), top=3)
    from perfmodel.search.explain import default_row

    for ev in res.evaluated:
        i = default_row(ev, 8, "megatron-kwai")
        if i is not None:
            assert ev.configs["offload_fraction"][i] == 0
    a = dict(ROWS[0], cp=1, cp_kind="ring")
    assert _diff_keys(a, dict(a, cp=2)) == "cp 1 vs 2"


def test_deepspeed_alone_takes_its_tensor_parallelism_from_autotp(tmp_path):
    """Under DeepSpeed alone tp is AutoTP's tensor_parallel.autotp_size in the JSON (not a launcher flag);
    under Megatron-DeepSpeed it stays Megatron's flag. The config reads back to the same layout."""
    model = pm.load_model("llama3-8b")
    row = dict(ROWS[0], tp=4, pp=1, dp=16, cp=1, vpp=1, sp=False, zero_stage=1, zeropp="", recompute="none",
               micro_batch=1)
    job = pm.JobSpec(global_batch=256, seq_len=4096, precision="bf16", framework="deepspeed")
    cfg = deepspeed_config(model, job, row)
    assert cfg["tensor_parallel"] == {"autotp_size": 4} and "train_batch_size" not in cfg
    notes = emit_notes("deepspeed", model, job, row)
    assert not any("tp=" in n for n in notes) and any("train_batch_size is left out" in n for n in notes)
    mds = deepspeed_config(model, job.model_copy(update={"framework": "megatron-deepspeed"}), row)
    assert "tensor_parallel" not in mds
    # checkpoints partitioned over the TP ranks need Megatron's mpu, which AutoTP does not give DeepSpeed's
    # checkpointing (a review, 2026-12-02): asked for only under Megatron-DeepSpeed
    full = dict(row, recompute="full")
    assert deepspeed_config(model, job, full)["activation_checkpointing"]["partition_activations"] is False
    assert deepspeed_config(model, job.model_copy(update={"framework": "megatron-deepspeed"}), full)[
        "activation_checkpointing"]["partition_activations"] is True
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps(cfg))
    base = ["estimate", "--model", "llama3-8b", "--gpu", "h100-sxm5-80gb", "--gpus", "64", "--global-batch", "256",
            "--seq-len", "4096", "--framework", "deepspeed", "--deepspeed-config", str(ds)]
    res = CliRunner().invoke(app, base + ["--json"])
    assert res.exit_code == 0, res.output
    got = json.loads(res.stdout)["config"]
    assert got["tp"] == 4 and got["sp"] is False  # AutoTP has no sequence parallelism: off unless --sp is given
    res = CliRunner().invoke(app, base + ["--tp", "2"])
    assert res.exit_code == 2 and "error: tp: --tp 2 contradicts deepspeed_config.tensor_parallel.autotp_size" in res.output


def test_emit_notes_fit_the_model_and_the_stack():
    """Reviewer's findings: the RMSNorm reminder was printed for GPT-3 (LayerNorm, Megatron's default);
    the rotary base and CUDA_DEVICE_MAX_CONNECTIONS were not mentioned; Megatron-DeepSpeed was told to
    'use DeepSpeed' for ZeRO++ it runs through its ds_config.json; a ring-CP layout costed for another stack
    was said to be taken by Megatron-DeepSpeed's launcher, which has no ring CP."""
    gpt3, llama = pm.load_model("gpt3-175b"), pm.load_model("llama3-8b")
    tp8 = dict(ROWS[1], zeropp="", zero_stage=1)
    assert not any("RMSNorm" in n or "rotary" in n for n in emit_notes("megatron", gpt3, _job(), tp8))
    mg = emit_notes("megatron", llama, _job(), tp8)
    assert any("RMSNorm" in n for n in mg) and any("--rotary-base" in n for n in mg)
    assert any("CUDA_DEVICE_MAX_CONNECTIONS=1" in n for n in mg)
    assert not any("CUDA_DEVICE_MAX_CONNECTIONS" in n for n in emit_notes("megatron", llama, _job(), dict(ROWS[2])))
    mds = emit_notes("megatron", llama, _job("bf16", "megatron-deepspeed"), dict(ROWS[1], cp=1))
    assert not any("use DeepSpeed" in n for n in mds) and any("ds_config.json" in n for n in mds)
    ds = emit_notes("deepspeed", llama, _job(), dict(ROWS[1], cp_kind="ring"))
    assert not any("Megatron-DeepSpeed flags" in n for n in ds)
    assert any("--framework megatron-deepspeed" in n for n in ds) and any("ring context" in n for n in ds)
    ds_uly = emit_notes("deepspeed", llama, _job("bf16", "megatron-deepspeed"), dict(ROWS[1], cp_kind="ulysses"))
    assert any("Megatron-DeepSpeed flags" in n for n in ds_uly) and not any("ring context" in n for n in ds_uly)


def test_explanation_prints_sp_as_on_off():
    from perfmodel.search.explain import _diff_keys

    assert _diff_keys(dict(ROWS[0]), dict(ROWS[0], sp=False)) == "sp on vs off"


def test_megatron_flags_of_an_uneven_pipeline_say_what_megatron_needs():
    """A pp costed for a stack that splits layers unevenly (32 layers on 3 stages) is not a split
    Megatron-LM takes as emitted: the note names its first/last-stage flags."""
    row = dict(tp=1, pp=3, dp=8, cp=1, vpp=1, micro_batch=1, sp=False, zero_stage=0, zeropp="", recompute="none")
    model = pm.load_model("llama3-8b")
    for fw in ("nanotron", "torchtitan", "deepspeed"):
        notes = emit_notes("megatron", model, pm.JobSpec(global_batch=192, seq_len=2048, framework=fw), row)
        assert any("--decoder-first-pipeline-num-layers" in n for n in notes), fw
    even = emit_notes("megatron", model, pm.JobSpec(global_batch=192, seq_len=2048, framework="nanotron"),
                      dict(row, pp=4, dp=6))
    assert not any("--decoder-first-pipeline-num-layers" in n for n in even)


def test_an_uneven_interleaved_two_stage_pipeline_gets_both_notes():
    row = dict(tp=1, pp=2, dp=4, cp=1, vpp=2, micro_batch=1, sp=False, zero_stage=0, zeropp="", recompute="none")
    model = pm.load_model("llama3-8b").model_copy(update={"n_layers": 31})
    notes = emit_notes("megatron", model, pm.JobSpec(global_batch=64, seq_len=2048, framework="nanotron"), row)
    assert any("--no-overlap-p2p-communication" in n for n in notes)
    assert any("--decoder-first-pipeline-num-layers" in n for n in notes)


def test_no_max_connections_note_on_blackwell():
    """Megatron-LM asks for CUDA_DEVICE_MAX_CONNECTIONS=1 with tp or cp > 1 only below compute capability 10
    (validate_args: 'requirement no longer exists since the Blackwell architecture'); a GB200 winner was told to
    set it. recommend marks the row with its GPU's generation (a profile with mxfp8 peaks)."""
    llama = pm.load_model("llama3-8b")
    tp8 = dict(ROWS[1], zeropp="", zero_stage=1)
    assert any("CUDA_DEVICE_MAX_CONNECTIONS=1" in n for n in emit_notes("megatron", llama, _job(), tp8))
    blackwell = dict(tp8, blackwell_or_later=True)
    assert not any("CUDA_DEVICE_MAX_CONNECTIONS" in n for n in emit_notes("megatron", llama, _job(), blackwell))
    res = CliRunner().invoke(app, ["recommend", "--model", "llama3-70b", "--gpu", "gb200", "--gpus", "72",
                                   "--seq-len", "8192", "--global-batch", "72", "--emit", "megatron"])
    assert res.exit_code == 0 and "--tensor-model-parallel-size" in res.output
    assert "CUDA_DEVICE_MAX_CONNECTIONS" not in res.output


def test_a_qwen2_config_emits_its_qkv_biases(tmp_path):
    """Qwen2 has biases on its query/key/value projections only: the emitted flags said --disable-bias-linear
    and nothing else, so Megatron would train another model; the bias is also named as not costed."""
    import json as _json

    cfg = {"model_type": "qwen2", "hidden_act": "silu", "hidden_size": 1024, "intermediate_size": 2816,
           "num_hidden_layers": 4, "num_attention_heads": 16, "num_key_value_heads": 16, "vocab_size": 151936,
           "tie_word_embeddings": True}
    path = tmp_path / "config.json"
    path.write_text(_json.dumps(cfg))
    qwen = pm.load_model(str(path))
    assert qwen.qkv_bias and any("projections' biases are not costed" in n for n in qwen.notes)
    flags = megatron_flags(qwen, _job(), dict(ROWS[2]))
    assert "--disable-bias-linear" in flags and "--add-qkv-bias" in flags
    path.write_text(_json.dumps({**cfg, "model_type": "llama"}))
    assert not pm.load_model(str(path)).qkv_bias
    # a Llama-style attention_bias also biases the output projection, which Megatron cannot state alone: said
    path.write_text(_json.dumps({**cfg, "model_type": "llama", "attention_bias": True}))
    llama_bias = pm.load_model(str(path))
    assert not llama_bias.qkv_bias and any("emitted flags drop them" in n for n in llama_bias.notes)
    assert "--add-qkv-bias" not in megatron_flags(llama_bias, _job(), dict(ROWS[2]))


def test_megatron_flags_run_what_was_costed_dropout_and_masks():
    """Megatron-LM's defaults are dropout 0.1 and a micro-batch x s x s attention mask built by the data
    loader; a Llama-family model is costed without dropout and neither is costed (reviewer's run of 33
    emitted flag sets through Megatron-LM's own parse_args / validate_args: Llama 3 8B's winner at 79.0 GiB
    would hold 80.0 GiB with the default dropout, over the 79.6 GiB of the GPU)."""
    llama = megatron_flags(pm.load_model("llama3-8b"), _job(), ROWS[0])
    assert llama[llama.index("--attention-dropout") + 1] == "0.0"
    assert llama[llama.index("--hidden-dropout") + 1] == "0.0"
    assert "--no-create-attention-mask-in-dataloader" in llama
    gpt = megatron_flags(pm.load_model("gpt3-175b"), _job(), ROWS[0])  # costed with dropout: the default 0.1
    assert "--attention-dropout" not in gpt and "--no-create-attention-mask-in-dataloader" in gpt


def test_kwai_flags_are_said_to_be_the_forks():
    model = pm.load_model("llama3-70b")
    row = dict(ROWS[0], recompute="balanced", offload_fraction=0.5)
    notes = emit_notes("megatron", model, _job("bf16", "megatron-kwai"), row)
    assert any("--kaimm-* flags are Megatron-Kwai's" in n for n in notes)
    assert not any("kaimm" in n for n in emit_notes("megatron", model, _job("bf16", "megatron-kwai"), ROWS[0]))


def test_megatron_deepspeed_flags_keep_to_its_own_parser():
    """--no-create-attention-mask-in-dataloader is Megatron-LM's (2024); Megatron-DeepSpeed's argparse (no
    unknown arguments) has no such flag. Its dropout flags are the original Megatron ones."""
    flags = megatron_flags(pm.load_model("llama3-8b"), _job("bf16", "megatron-deepspeed"), ROWS[2])
    assert "--no-create-attention-mask-in-dataloader" not in flags
    assert flags[flags.index("--hidden-dropout") + 1] == "0.0"


def test_alibi_models_get_no_rotary_flags(tmp_path):
    """An audit: BLOOM (ALiBi, no position table) was emitted with --position-embedding-type rope and a
    --rotary-base note. Megatron-LM has no ALiBi: 'none' with a note naming BigScience's fork's flag; the
    Megatron-DeepSpeed emit drops --use-rotary-position-embeddings. HF configs: BLOOM always, MPT by
    attn_config.alibi (default true), Falcon by alibi."""
    import json

    bloom = pm.load_model("bloom-176b")
    assert bloom.alibi and not pm.load_model("llama3-70b").alibi
    row = ROWS[0]
    flags = megatron_flags(bloom, _job(), row)
    i = flags.index("--position-embedding-type")
    assert flags[i + 1] == "none" and flags[i + 1] in MEGATRON_CHOICES["--position-embedding-type"]
    notes = " ".join(emit_notes("megatron", bloom, _job(), row))
    assert "ALiBi" in notes and "--position-embedding-type alibi" in notes and "--rotary-base" not in notes
    ds_flags = megatron_flags(bloom, _job(framework="megatron-deepspeed"), dict(row, vpp=1))
    assert "--use-rotary-position-embeddings" not in ds_flags
    llama_ds = megatron_flags(pm.load_model("llama3-70b"), _job(framework="megatron-deepspeed"), dict(row, vpp=1))
    assert "--use-rotary-position-embeddings" in llama_ds
    # a review (2026-12-02): Megatron-DeepSpeed adds a learned position table unless --no-position-embedding
    # (add_position_embedding defaults on), which neither rotary nor ALiBi models were costed with
    assert "--no-position-embedding" in llama_ds and "--no-position-embedding" in ds_flags
    gpt = pm.load_model("gpt3-175b")
    assert gpt.learned_pos_emb and "--no-position-embedding" not in megatron_flags(
        gpt, _job(framework="megatron-deepspeed"), dict(row, vpp=1))
    base = {"hidden_size": 1024, "num_hidden_layers": 2, "num_attention_heads": 16, "vocab_size": 1000}
    for cfg, expected in (({"model_type": "bloom", "n_embed": 1024, "n_layer": 2, "n_head": 16}, True),
                          ({"model_type": "mpt", "d_model": 1024, "n_layers": 2, "n_heads": 16, "attn_config": {}}, True),
                          ({"model_type": "mpt", "d_model": 1024, "n_layers": 2, "n_heads": 16,
                            "attn_config": {"alibi": False}}, False),
                          ({"model_type": "falcon", "alibi": True}, True), ({"model_type": "falcon"}, False),
                          ({"model_type": "llama", "intermediate_size": 2816}, False)):
        p = tmp_path / "config.json"
        p.write_text(json.dumps({**base, **cfg}))
        assert pm.load_model(str(p)).alibi is expected, cfg
