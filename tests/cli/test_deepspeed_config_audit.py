"""What an audit of ``estimate --deepspeed-config`` with real DeepSpeed configs found (DeepSpeedExamples,
Megatron-DeepSpeed, Hugging Face / accelerate, the ZeRO++ tutorial; and recommend's own emitted JSON read
back): a full-recompute winner read back without recompute (525.8 GiB instead of 27.1), the Trainer's
"auto" refused, real keys refused as unknown, skipped keys and an fp32 config passed over in silence,
combinations DeepSpeed's engine refuses costed as what-ifs, and errors naming a field never given."""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from perfmodel.cli import app

runner = CliRunner()
EST = ["estimate", "--model", "llama3-8b", "--gpu", "h100-sxm5-80gb", "--gpus", "16", "--seq-len", "4096"]


def estimate(tmp_path, config, *args: str, batch: int = 32):
    path = tmp_path / "ds.json"
    path.write_text(config if isinstance(config, str) else json.dumps(config))
    return runner.invoke(app, [*EST, "--global-batch", str(batch), "--deepspeed-config", str(path), *args])


def notes(res) -> list[str]:
    assert res.exit_code == 0, res.output
    return [ln for ln in res.output.splitlines() if ln.startswith("note:")]


def error(res) -> str:
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert res.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error:"), res.output
    return lines[0]


BASE = {"zero_optimization": {"stage": 1}, "bf16": {"enabled": True}, "train_micro_batch_size_per_gpu": 2}


def test_a_full_recompute_winner_reads_back_when_the_note_is_followed(tmp_path):
    """recommend's JSON cannot say 'recompute full' (DeepSpeed checkpoints in the model code): its notes now
    say how to read it back, and estimate says which mode it costed."""
    job = ["--model", "gpt3-175b", "--gpu", "v100-sxm3-32gb", "--gpus", "384", "--gpus-per-node", "16",
           "--scale-out-gbit-per-s", "100", "--seq-len", "2048", "--global-batch", "1536"]
    rec = runner.invoke(app, ["recommend", *job, "--framework", "deepspeed", "--top", "1", "--emit", "deepspeed",
                              "--json"])
    out = json.loads(rec.stdout)
    top, emitted = out["top"][0], out["emit"]
    assert top["recompute"] == "full" and any("--recompute full" in n for n in emitted["notes"])
    path = tmp_path / "emitted.json"
    path.write_text(emitted["text"])
    base = ["estimate", *job, "--deepspeed-config", str(path), "--json"]
    unsaid = json.loads(runner.invoke(app, base).stdout)
    assert any("costed without recompute; give --recompute full" in n for n in unsaid["notes"])
    back = json.loads(runner.invoke(app, base + ["--recompute", "full"]).stdout)
    for key in ("iteration_time_s", "memory_gib", "tokens_per_s_per_gpu"):
        assert back[key] == pytest.approx(top[key], rel=1e-9)
    assert not any("recompute mode is the model code's" in n for n in back["notes"])


def test_the_16_bit_type_is_never_guessed_in_silence(tmp_path):
    snippet = {"zero_optimization": {"stage": 1}, "train_micro_batch_size_per_gpu": 2}  # no bf16 / fp16 block
    assert any("enables neither bf16 nor fp16" in n and "GPU's default" in n for n in notes(estimate(tmp_path, snippet)))
    assert "turns bf16 and fp16 off and enables no 16-bit type" in error(estimate(
        tmp_path, {**snippet, "bf16": {"enabled": False}, "fp16": {"enabled": False}}, "--precision", "fp8"))
    # one type turned off and none enabled: fp32 too, unless --precision names the other type
    assert "give --precision fp16 if the run uses it" in error(estimate(tmp_path, {**snippet, "bf16": {"enabled": False}}))
    assert any("costed in fp16, as --precision says" in n for n in notes(
        estimate(tmp_path, {**snippet, "bf16": {"enabled": False}}, "--precision", "fp16")))
    assert "contradicts deepspeed_config.fp16.enabled (false)" in error(
        estimate(tmp_path, {**snippet, "fp16": {"enabled": False}}, "--precision", "fp16"))
    auto = {**snippet, "bf16": {"enabled": "auto"}}
    assert "deepspeed_config.bf16.enabled: \"auto\" is filled by the Hugging Face Trainer" in error(estimate(tmp_path, auto))
    assert "deepspeed_config.fp16.enabled" in error(estimate(tmp_path, {**snippet, "fp16": {"enabled": "auto"}}))
    both = {**snippet, "bf16": {"enabled": True}, "fp16": {"enabled": "auto"}}  # bf16 stated outright: no question
    assert '"precision": "bf16"' in estimate(tmp_path, both, "--json").stdout
    assert any('"auto" (bf16.enabled)' in n for n in notes(estimate(tmp_path, auto, "--precision", "bf16")))
    legacy = {**snippet, "bfloat16": {"enabled": True}}  # bf16's older name, which DeepSpeed still reads
    read = estimate(tmp_path, legacy, "--json")
    assert '"precision": "bf16"' in read.stdout and "enables neither" not in read.stdout


def test_the_trainers_auto_batch_keys_come_from_the_command_line(tmp_path):
    cfg = {**BASE, "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
           "train_batch_size": "auto"}
    said = notes(estimate(tmp_path, cfg, "--micro-batch", "2"))
    assert any('"auto" (gradient_accumulation_steps, train_batch_size, train_micro_batch_size_per_gpu)' in n
               for n in said)
    # the micro-batch and the global batch are the command line's; the accumulation completes them
    config = json.loads(estimate(tmp_path, {**cfg, "gradient_accumulation_steps": 1}, "--micro-batch", "2",
                                 "--json").stdout)["config"]
    assert config["micro_batch"] == 2
    ga_auto = {**BASE, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": "auto"}
    assert json.loads(estimate(tmp_path, ga_auto, "--json", batch=64).stdout)["config"]["micro_batch"] == 2
    # "auto" where the Trainer fills nothing is not a value
    hpz = {**BASE, "zero_optimization": {"stage": 3, "zero_hpz_partition_size": "auto"}}
    assert "zero_hpz_partition_size: must be a whole number >= 0 (got 'auto')" in error(estimate(tmp_path, hpz))


@pytest.mark.parametrize("zero, fragment", [
    ({"offload_optimizer": {"device": "cpu"}}, "offloading the optimizer or the parameters to CPU or NVMe"),
    ({"offload_param": {"device": "nvme"}}, "offloading the optimizer or the parameters"),
    ({"cpu_offload": True}, "offloading the optimizer or the parameters"),
])
def test_offload_is_named_as_not_modelled(tmp_path, zero, fragment):
    assert fragment in error(estimate(tmp_path, {**BASE, "zero_optimization": {"stage": 2, **zero}}))


def test_real_keys_are_read_skipped_with_a_note_or_refused_for_what_they_are(tmp_path):
    off = {**BASE, "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "none"}, "cpu_offload": False}}
    notes(estimate(tmp_path, off))  # an offload that is off is accepted
    skipped = {**BASE, "activation_checkpointing": {"partition_activations": True}, "data_types":
               {"grad_accum_dtype": "fp32"}, "zero_optimization": {"stage": 1, "reduce_bucket_size": "auto"}}
    said = notes(estimate(tmp_path, skipped))
    assert any("read but not costed" in n and "data_types, reduce_bucket_size" in n for n in said)
    assert any("the activation_checkpointing block only tunes it" in n for n in said)
    assert "Apex AMP is not modelled" in error(estimate(tmp_path, {**BASE, "amp": {"enabled": True, "opt_level": "O1"}}))
    assert "must be fp16, bf16 or fp32" in error(estimate(tmp_path, {**BASE, "communication_data_type": "bfp16"}))
    hint = error(estimate(tmp_path, '{\n  // a comment\n  "zero_optimization": {"stage": 1},\n}'))
    assert "DeepSpeed also reads hjson (comments, trailing commas), which perfmodel does not" in hint


def test_what_deepspeeds_engine_refuses_is_an_error_beside_a_config(tmp_path):
    z2 = {"zero_optimization": {"stage": 2}, "bf16": {"enabled": True}, "train_micro_batch_size_per_gpu": 1}
    line = error(estimate(tmp_path, z2, "--pp", "2", batch=8))
    assert "deepspeed cannot run this configuration (ZeRO-2/3 does not compose with pipeline parallelism" in line


def test_errors_name_the_key_that_was_given(tmp_path):
    assert "deepspeed_config.sequence_parallel_size: times the tensor-parallel size must divide the GPU count" in error(
        estimate(tmp_path, {**BASE, "sequence_parallel_size": 3}))
    assert "deepspeed_config.tensor_parallel.autotp_size: must divide the GPU count" in error(
        estimate(tmp_path, {**BASE, "tensor_parallel": {"autotp_size": 3}}))
    assert "train_batch_size: 40 is not a multiple of gradient_accumulation_steps 2 x dp 16" in error(estimate(
        tmp_path, {"zero_optimization": {"stage": 1}, "bf16": {"enabled": True}, "train_batch_size": 40,
                   "gradient_accumulation_steps": 2}, batch=40))


def test_a_megatron_deepspeed_ulysses_winner_reads_back(tmp_path):
    """Its JSON failed read back: --sp stayed on by default beside Ulysses at tp 1, where the flag shards nothing,
    and the rule that Ulysses excludes Megatron's SP refused it."""
    job = ["--model", "llama3-8b", "--gpu", "h100-sxm5-80gb", "--gpus", "64", "--seq-len", "32768",
           "--global-batch", "64", "--framework", "megatron-deepspeed"]
    out = json.loads(runner.invoke(app, ["recommend", *job, "--top", "1", "--emit", "deepspeed", "--json"]).stdout)
    top = out["top"][0]
    assert top["cp_kind"] == "ulysses" and top["tp"] == 1
    path = tmp_path / "ds.json"
    path.write_text(out["emit"]["text"])
    flags = ["--cp", str(top["cp"]), "--cp-kind", "ulysses", "--recompute", top["recompute"], "--pp", str(top["pp"])]
    back = runner.invoke(app, ["estimate", *job, "--deepspeed-config", str(path), *flags, "--json"])
    assert back.exit_code == 0, back.output
    assert json.loads(back.stdout)["iteration_time_s"] == pytest.approx(top["iteration_time_s"], rel=1e-9)


def test_a_pipelined_deepspeed_winner_gets_one_layout_note():
    """The Ulysses note broke the if/elif chain: a DeepSpeed pipeline winner also got 'it was costed for deepspeed:
    search with --framework megatron-deepspeed (or deepspeed)'."""
    res = runner.invoke(app, ["recommend", "--model", "bloom-176b", "--gpu", "a100-sxm4-80gb", "--gpus", "384",
                              "--seq-len", "2048", "--global-batch", "2048", "--framework", "deepspeed", "--top", "1",
                              "--emit", "deepspeed", "--json"])
    emitted = json.loads(res.stdout)["emit"]["notes"]
    assert sum("is not a DeepSpeed config setting" in n for n in emitted) == 1
    assert not any("search with --framework megatron-deepspeed" in n for n in emitted)


def test_the_text_header_names_zeropp_and_the_hpz_partition(tmp_path):
    """A config with qwZ + hpZ printed 'zero=3' only: the parts and the secondary partition were not shown."""
    cfg = {"zero_optimization": {"stage": 3, "zero_quantized_weights": True, "zero_hpz_partition_size": 8},
           "bf16": {"enabled": True}, "train_micro_batch_size_per_gpu": 2}
    head = estimate(tmp_path, cfg).output.splitlines()[0]
    assert head.endswith("zero=3 recompute=none zero++=qwz,hpz hpz_partition=8"), head
