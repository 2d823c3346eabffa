"""Calibrating from a Megatron-LM training log: its arguments block gives the configuration, its
iteration lines the measured time, and the stack's kernel efficiency is fitted to it."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from perfmodel.calibrate.log_config import megatron_log_specs, padded_vocab
from perfmodel.calibrate.parsers.megatron_args import arg_value, parse_megatron_arguments
from perfmodel.catalog import load_gpu
from perfmodel.errors import InputError

ROOT = Path(__file__).resolve().parents[2]
LOG = ROOT / "tests" / "fixtures" / "parsers" / "megatron_args_llama2_7b.log"
H100 = load_gpu("h100-sxm5-80gb")


def _specs(args, **kw):
    return megatron_log_specs(args, H100, framework="megatron-lm", gpus_per_node=None, scale_out_gbit_per_s=None,
                              network=None, where="x.log", **kw)


def _write(tmp_path, lines):
    p = tmp_path / "run.log"
    p.write_text("\n".join(lines) + "\n")
    return p


def _block(args: dict) -> list[str]:
    # megatron/training/arguments.py _print_args: names padded with dots to 48 characters
    return (["------------------------ arguments ------------------------"]
            + ["  {} {} {}".format(k, "." * (48 - len(k)), v) for k, v in sorted(args.items())]
            + ["-------------------- end of arguments ---------------------"])


def test_arguments_block_is_read_with_the_tokenizers_padded_vocab():
    args = parse_megatron_arguments(LOG)
    assert args["tensor_model_parallel_size"] == "1" and args["swiglu"] == "True"
    assert args["padded_vocab_size"] == "32000"  # from ' > padded vocab (size: 32000) ... (new size: 32000)'
    assert arg_value(args["recompute_granularity"]) is None and arg_value(args["world_size"]) == 8
    assert arg_value("torch.bfloat16") == "torch.bfloat16" and arg_value("0.0003") == pytest.approx(3e-4)


def test_fixture_maps_onto_the_run_it_describes():
    model, cluster, par, job = _specs(parse_megatron_arguments(LOG))
    assert (model.n_layers, model.hidden_size, model.ffn_hidden_size, model.n_heads, model.n_kv_heads) == (
        32, 4096, 11008, 32, 32)
    assert model.mlp == "swiglu" and not model.tied_embeddings and model.vocab_size == 32000
    assert (cluster.n_gpus, par.tp, par.pp, par.dp, par.cp, par.vpp, par.micro_batch) == (8, 1, 1, 8, 1, 1, 1)
    assert par.zero_stage == 1 and par.recompute == "none" and not par.sp  # --use-distributed-optimizer
    assert (job.global_batch, job.seq_len, job.precision, job.framework) == (128, 4096, "bf16", "megatron-lm")


def test_long_names_gqa_fp8_recompute_and_vocab_padding(tmp_path):
    long_name = "x" * 50  # _print_args pads with no dot: '  name  value'
    args = {"num_layers": 80, "hidden_size": 8192, "ffn_hidden_size": 28672, "num_attention_heads": 64,
            "group_query_attention": True, "num_query_groups": 8, "seq_length": 8192, "world_size": 64,
            "tensor_model_parallel_size": 4, "pipeline_model_parallel_size": 4, "micro_batch_size": 1,
            "global_batch_size": 128, "virtual_pipeline_model_parallel_size": 5, "sequence_parallel": True,
            "bf16": True, "fp8": "hybrid", "recompute_granularity": "selective", "vocab_size": 128256,
            "make_vocab_size_divisible_by": 128, long_name: "None"}
    parsed = parse_megatron_arguments(_write(tmp_path, ["[rank0]: " + ln for ln in _block(args)]))
    assert parsed[long_name] == "None" and parsed["fp8"] == "hybrid"
    model, cluster, par, job = _specs(parsed)
    assert model.n_kv_heads == 8 and model.vocab_size == padded_vocab(128256, parsed, 4, "x") == 128512
    assert (par.tp, par.pp, par.dp, par.vpp, par.sp, par.recompute, job.precision) == (
        4, 4, 4, 5, True, "selective", "fp8")
    old = {**args, "recompute_granularity": None, "checkpoint_activations": True, "fp8": None, "bf16": False,
           "fp16": True, "vocab_size": None, "tokenizer_type": "GPT2BPETokenizer"}
    model, _, par, job = _specs(parse_megatron_arguments(_write(tmp_path, _block(old))))
    assert par.recompute == "full" and job.precision == "fp16" and model.vocab_size == 50688  # 50257 -> x 512


@pytest.mark.parametrize("change,field", [
    ({"num_experts": 8}, "num_experts"),
    ({"num_layers": None}, "num_layers"),
    ({"bf16": False}, "bf16"),
    ({"world_size": 12, "tensor_model_parallel_size": 8}, "world_size"),
    ({"vocab_size": None}, "vocab_size"),
    ({"micro_batch_size": -1}, "micro_batch_size"),
])
def test_a_block_that_cannot_be_costed_names_the_argument(change, field):
    args = {k: v for k, v in parse_megatron_arguments(LOG).items() if k != "padded_vocab_size"}
    args["vocab_size"] = "32000"
    args.update({k: str(v) for k, v in change.items()})
    with pytest.raises(InputError) as err:
        _specs(args)
    assert err.value.field == field and err.value.where == "x.log"


def test_broken_blocks_are_errors_with_file_and_line(tmp_path):
    assert parse_megatron_arguments(_write(tmp_path, [" iteration 1/ 2 | elapsed time per iteration (ms): 5.0 |"])) is None
    with pytest.raises(InputError, match=r"run.log:1: arguments: the block never ends"):
        parse_megatron_arguments(_write(tmp_path, _block({"a": 1})[:-1]))
    with pytest.raises(InputError, match=r"run.log:3: arguments: expected"):
        parse_megatron_arguments(_write(tmp_path, _block({"a": 1})[:2] + ["  !! garbage"] + _block({"a": 1})[2:]))
    # another process's (unindented) line printed into the block is not an argument: skipped
    noisy = _block({"a": 1, "b": 2})
    noisy.insert(2, "[W init.cpp:767] Warning: nvfuser is deprecated")
    assert dict(parse_megatron_arguments(_write(tmp_path, noisy))) == {"a": "1", "b": "2"}


@pytest.mark.parametrize("label", ["[1,0]<stdout>:", "[rank0]:", "[default0]:", "0: ", "  0: ", "[0] "])
def test_launcher_labels_before_the_block_and_the_iteration_lines(tmp_path, label):
    from perfmodel.calibrate.parsers import parse_training_log

    lines = [label + t for t in _block({"a": 1, "tensor_model_parallel_size": 8})]
    lines.append(label + " iteration        1/      10 | elapsed time per iteration (ms): 5000.0 |")
    path = _write(tmp_path, lines)
    assert dict(parse_megatron_arguments(path)) == {"a": "1", "tensor_model_parallel_size": "8"}
    log = parse_training_log(path)
    assert list(log.iteration_time_s) == [5.0] and list(log.framework) == ["megatron-lm"]


def _calibrate(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "perfmodel.cli", "calibrate", "--gpu", "h100-sxm5-80gb", *args],
                          capture_output=True, text=True, cwd=cwd)


def test_calibrate_fits_the_stacks_kernel_efficiency_to_the_log(tmp_path):
    out = tmp_path / "cal.yaml"
    res = _calibrate("--log", str(LOG), "--out", str(out))
    assert res.returncode == 0, res.stderr
    prof = yaml.safe_load(out.read_text())
    entry = next(i for i in prof["provenance"]["inputs"] if i["kind"] == "log")
    assert entry["measured_iteration_time_s"] == pytest.approx(5.9025)  # median of the six lines
    assert abs(entry["err_after_pct"]) < 1.0 and entry["predicted_before_s"] != pytest.approx(5.9025, rel=0.01)
    assert prof["frameworks"]["megatron-lm"]["kernel_efficiency"] == pytest.approx(
        prof["provenance"]["logs_fit_params"]["megatron-lm.kernel_efficiency"])
    assert "before the fit" in res.stdout and "after" in res.stdout
    # the profile applies: the same run costed with it takes the measured time
    est = subprocess.run([sys.executable, "-m", "perfmodel.cli", "estimate", "--model", "llama2-7b", "--gpu",
                          "h100-sxm5-80gb", "--gpus", "8", "--global-batch", "128", "--seq-len", "4096",
                          "--zero-stage", "1", "--calibration", str(out), "--json"], capture_output=True, text=True,
                         cwd=ROOT)
    assert yaml.safe_load(est.stdout)["iteration_time_s"] == pytest.approx(5.9025, rel=0.01)


def test_calibrate_says_a_log_without_configuration_fits_nothing(tmp_path):
    log = _write(tmp_path, [" iteration 1/ 2 | elapsed time per iteration (ms): 5.0 |"])
    res = _calibrate("--log", str(log), "--out", str(tmp_path / "c.yaml"))
    # summarised, nothing fitted: exit 1 and no profile that would only restate the shipped one
    assert res.returncode == 1 and "no Megatron arguments block" in res.stdout
    assert "nothing was fitted" in res.stderr and not (tmp_path / "c.yaml").exists()


def test_calibrate_refuses_a_block_it_cannot_cost_and_writes_nothing(tmp_path):
    text = LOG.read_text().replace("num_experts ..................................... None",
                                   "num_experts ..................................... 8")
    log = tmp_path / "moe.log"
    log.write_text(text)
    out = tmp_path / "c.yaml"
    res = _calibrate("--log", str(log), "--out", str(out))
    assert res.returncode == 2 and res.stderr.count("error:") == 1 and "Traceback" not in res.stderr
    assert "moe.log" in res.stderr and "num_experts" in res.stderr and not out.exists()


def test_trace_nccl_kernels_are_compared_with_the_model():
    """The residual a trace gets: its NCCL kernels' times against the model's for the same collective,
    size and group. Kernels that took exactly the modelled time give ratio 1 and 0% error; twice as
    long, ratio 2 and 50%; collectives the model does not cost (broadcast) are left out."""
    import pandas as pd

    from perfmodel.calibrate.command import _trace_nccl_check
    from perfmodel.calibrate.comm import collective_inputs, collective_time
    from perfmodel.calibration_profile import load_calibration

    cal = load_calibration(None)
    sizes = [1 << 20, 1 << 26]
    pred = collective_time("all_reduce", sizes, 8, collective_inputs(H100, 8, 8, None, None, "all_reduce", cal))
    coll = pd.DataFrame({"collective": ["all_reduce", "all_reduce", "broadcast"], "bytes": sizes + [4096],
                         "group_size": [8, 8, 8], "dur_s": [pred[0], pred[1], 1.0]})
    check = _trace_nccl_check(coll, H100, None, None, None, cal)
    assert check["nccl_kernels_compared"] == 2
    assert check["nccl_median_measured_over_predicted"] == pytest.approx(1.0)
    assert check["nccl_median_abs_err_pct"] == pytest.approx(0.0, abs=1e-6)
    slow = coll.assign(dur_s=coll.dur_s * 2.0)
    assert _trace_nccl_check(slow, H100, None, None, None, cal)["nccl_median_abs_err_pct"] == pytest.approx(50.0)
    assert _trace_nccl_check(coll[coll.collective == "broadcast"], H100, None, None, None, cal) is None


def test_megatron_deepspeed_blocks_and_their_own_spellings(tmp_path):
    """Megatron-DeepSpeed prints num_experts as a list ([1] = dense) and --zero-stage as 1.0; torchrun
    --tee prefixes every line with [defaultN]:."""
    args = {k: v for k, v in parse_megatron_arguments(LOG).items()}
    args.update({"num_experts": "[1]", "deepspeed": "True", "zero_stage": "1.0", "use_distributed_optimizer": "False"})
    parsed = parse_megatron_arguments(_write(tmp_path, ["[default0]:" + ln for ln in _block(args)]))
    assert arg_value(parsed["num_experts"]) == [1]
    model, _, par, _ = _specs(parsed)
    assert par.zero_stage == 1 and model.n_layers == 32
    parsed["num_experts"] = "[8, 8]"
    with pytest.raises(InputError, match="num_experts"):
        _specs(parsed)


def test_errors_name_the_line_of_the_argument(tmp_path):
    args = {**parse_megatron_arguments(LOG), "num_layers": "abc"}
    block = _block(args)
    line = 2 + next(i for i, ln in enumerate(block) if ln.startswith("  num_layers "))  # 1-based, after a preamble
    parsed = parse_megatron_arguments(_write(tmp_path, ["some preamble"] + block))
    with pytest.raises(InputError) as err:
        _specs(parsed)
    assert err.value.field == "num_layers" and err.value.where.endswith(f"run.log:{line}")
    with pytest.raises(InputError, match=rf"run.log:{line}: num_layers: printed twice .*line {line - 1}"):
        parse_megatron_arguments(_write(tmp_path, block[:line - 1] + [block[line - 2]] + block[line - 1:]))


def test_the_logs_own_overlap_flags_are_costed_not_fitted_away():
    from perfmodel.calibrate.log_config import megatron_log_overrides
    from perfmodel.frameworks import framework_profile

    args = parse_megatron_arguments(LOG)
    assert megatron_log_overrides(args, "bf16") == {}  # the fixture states overlap_grad_reduce False
    flags = {**args, "overlap_grad_reduce": "True", "overlap_param_gather": "True", "tp_comm_overlap": "True",
             "accumulate_allreduce_grads_in_fp32": "True"}
    nemo = framework_profile("nemo")
    assert megatron_log_overrides(flags, "fp16") == {
        "dp_overlap": nemo.dp_overlap, "param_gather_overlap": nemo.param_gather_overlap,
        "tp_overlap": nemo.tp_overlap, "grad_bytes_per_param": 4.0}
    assert "grad_bytes_per_param" not in megatron_log_overrides(flags, "bf16")


def test_a_fit_on_its_bound_is_not_applied(tmp_path):
    """A log 20x slower than any kernel efficiency explains: warned, not applied, and with nothing
    else to fit, no profile (exit 1)."""
    slow = tmp_path / "slow.log"
    slow.write_text(LOG.read_text().replace("(ms): 59", "(ms): 1190"))
    out = tmp_path / "c.yaml"
    res = _calibrate("--log", str(slow), "--out", str(out))
    assert res.returncode == 1 and "on its bound" in res.stderr and not out.exists()
    assert "Traceback" not in res.stderr and res.stderr.strip().splitlines()[-1].startswith("error: logs:")


def test_a_trace_group_that_part_fills_a_node_is_compared():
    import pandas as pd

    from perfmodel.calibrate.command import _trace_nccl_check
    from perfmodel.calibration_profile import load_calibration

    # 12 ranks on 8-GPU nodes: the second node part-used, costed like any other group
    coll = pd.DataFrame({"collective": ["all_reduce", "all_reduce", "broadcast"], "bytes": [1 << 20] * 3,
                         "group_size": [12, 8, 8], "dur_s": [1e-3] * 3})
    check = _trace_nccl_check(coll, H100, None, None, None, load_calibration(None))
    assert check["nccl_kernels_compared"] == 2 and check["nccl_kernels_not_compared"] == 0
    # nothing the model costs (a broadcast): no check at all
    assert _trace_nccl_check(coll.tail(1), H100, None, None, None, load_calibration(None)) is None


def _fixture_args(**change) -> dict:
    args = dict(parse_megatron_arguments(LOG))
    args.update({k: str(v) for k, v in change.items()})
    return args


@pytest.mark.parametrize("change,recompute", [
    ({"recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 1}, "full"),
    ({"recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 4}, "full"),
    ({"recompute_granularity": "full", "recompute_method": "block", "recompute_num_layers": 32}, "full"),
    ({"recompute_granularity": "selective", "recompute_modules": "['core_attn']"}, "selective"),
    ({"recompute_granularity": "selective", "recompute_modules": "None"}, "selective"),
])
def test_recomputation_of_every_layer_or_of_the_attention_core_is_read(change, recompute):
    """uniform recomputes every layer whatever the chunk size; block with every layer of a chunk, too."""
    assert _specs(_fixture_args(**change))[2].recompute == recompute


@pytest.mark.parametrize("change,field", [
    # Megatron-LM recompute_method block: only recompute_num_layers of each chunk's 32 layers are recomputed
    ({"recompute_granularity": "full", "recompute_method": "block", "recompute_num_layers": 2}, "recompute_num_layers"),
    ({"recompute_granularity": "full", "recompute_method": "block", "recompute_num_layers": 0}, "recompute_num_layers"),
    # Megatron-Core --recompute-modules beyond core_attn: more than the attention core is recomputed
    ({"recompute_granularity": "selective", "recompute_modules": "['core_attn', 'mlp']"}, "recompute_modules"),
    ({"recompute_granularity": "selective", "recompute_modules": "['layernorm']"}, "recompute_modules"),
    ({"attention_backend": "AttnBackend.sliding"}, "attention_backend"),
])
def test_recomputation_or_attention_the_model_has_no_mode_for_is_refused(change, field):
    with pytest.raises(InputError) as err:
        _specs(_fixture_args(**change))
    assert err.value.field == field


def test_block_recomputation_counts_a_chunks_layers():
    """With pp 2 x vpp 2 a chunk holds 8 of the 32 layers: block of 8 is every layer, block of 4 is not."""
    base = {"pipeline_model_parallel_size": 2, "virtual_pipeline_model_parallel_size": 2,
            "recompute_granularity": "full", "recompute_method": "block"}
    assert _specs(_fixture_args(**base, recompute_num_layers=8))[2].recompute == "full"
    with pytest.raises(InputError, match="4 of each model chunk's 8 layers"):
        _specs(_fixture_args(**base, recompute_num_layers=4))


@pytest.mark.parametrize("change,flash", [
    ({}, None),  # the block does not say: the stack's profile decides
    ({"use_flash_attn": True}, True),  # Megatron-LM 2023-2024
    ({"use_flash_attn": False}, False),  # ... off, with the local attention
    ({"use_flash_attn": False, "transformer_impl": "local"}, False),
    ({"use_flash_attn": False, "transformer_impl": "transformer_engine"}, None),  # TE picks its own kernel
    ({"use_flash_attn_v1": False, "use_flash_attn_v2": True, "use_flash_attn_triton": False}, True),  # Megatron-DeepSpeed
    ({"use_flash_attn_v1": False, "use_flash_attn_v2": False, "use_flash_attn_triton": False}, False),
    ({"attention_backend": "AttnBackend.flash"}, True),  # Megatron-Core 0.10+
    ({"attention_backend": "AttnBackend.fused"}, True),
    ({"attention_backend": "AttnBackend.unfused"}, False),
    ({"attention_backend": "AttnBackend.local"}, False),
    ({"attention_backend": "AttnBackend.auto"}, None),
])
def test_the_blocks_attention_kernel_is_costed(change, flash):
    assert _specs(_fixture_args(**change))[3].flash_attention is flash


def test_calibrate_costs_a_log_without_flash_attention_without_it(tmp_path):
    """The same measured time: a block that turns FlashAttention off is predicted slower than one that turns
    it on, so the fitted kernel efficiency is higher (before: the profile's default for both)."""
    text = LOG.read_text()
    fits = {}
    for flash in (True, False):
        log = tmp_path / f"flash_{flash}.log"
        log.write_text(text.replace("  use_distributed_optimizer ", f"  use_flash_attn {'.' * 34} {flash}\n"
                                    "  use_distributed_optimizer ", 1))
        out = tmp_path / f"flash_{flash}.yaml"
        res = _calibrate("--log", str(log), "--gpu", "h100-sxm5-80gb", "--out", str(out))
        assert res.returncode in (0, 1), res.stderr
        fits[flash] = float(re.search(r"predicted ([0-9.]+) s", res.stdout).group(1))
    assert fits[False] > 1.2 * fits[True]


@pytest.mark.parametrize("change,kind", [
    ({"context_parallel_size": 2, "world_size": 16}, "ring"),  # not printed: p2p, Megatron's only kind before 0.9
    ({"context_parallel_size": 2, "world_size": 16, "cp_comm_type": "['p2p']"}, "ring"),
    ({"context_parallel_size": 2, "world_size": 16, "cp_comm_type": "a2a"}, "ulysses"),
    ({"context_parallel_size": 2, "world_size": 16, "cp_comm_type": "['a2a', 'a2a']"}, "ulysses"),
    ({"cp_comm_type": "['allgather']"}, "ring"),  # cp 1: no context parallelism to cost
])
def test_the_blocks_context_parallel_kind_is_costed(change, kind):
    assert _specs(_fixture_args(**change))[2].cp_kind == kind


@pytest.mark.parametrize("value", ["['allgather']", "['a2a+p2p']", "['p2p', 'a2a']"])
def test_context_parallel_kinds_the_model_lacks_are_refused(value):
    with pytest.raises(InputError) as err:
        _specs(_fixture_args(context_parallel_size=2, world_size=16, cp_comm_type=value))
    assert err.value.field == "cp_comm_type"
