"""What a second input audit found: each bad input below crashed with a traceback, was silently
dropped or coerced, or named an option the user never gave. Each now ends in one ``error:`` line
naming the field (exit 2) and leaves no output file behind."""
from __future__ import annotations

import gzip
import json

import pytest
from typer.testing import CliRunner

from perfmodel.cli import app

runner = CliRunner()
EST = ["estimate", "--model", "llama3-8b", "--gpu", "h100-sxm5-80gb", "--gpus", "16", "--global-batch", "16"]
NCCL_HEAD = """#  Rank  0 Group  0 Pid 1 on h1 device  0 [0x53] NVIDIA H100 80GB HBM3
#  Rank  1 Group  0 Pid 2 on h1 device  1 [0x64] NVIDIA H100 80GB HBM3
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw  #wrong
"""
ROW = "     {size}        262144     float     sum      -1    28.56   36.71   36.71      0    28.37   36.96   36.96      0\n"


def consistent_row(size: int, time_us: float = 28.56) -> str:
    """An all_reduce row whose count (size / 4 B) and algbw (size / time) say what its size and time do."""
    bw = size / (time_us * 1e3)
    return f"     {size}  {size // 4}  float  sum  -1  {time_us:.2f}  {bw:.2f}  {bw:.2f}  0  {time_us:.2f}  {bw:.2f}  {bw:.2f}  0\n"


def _error(res, field: str) -> str:
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert res.exit_code == 2, res.output
    assert len(lines) == 1 and lines[0].startswith("error:") and field in lines[0], res.output
    return lines[0]


def _calibrate(tmp_path, *args):
    out = tmp_path / "p.yaml"
    res = runner.invoke(app, ["calibrate", "--gpu", "h100-sxm5-80gb", *args, "--out", str(out)])
    return res, out


@pytest.mark.parametrize("body, where, field", [
    (NCCL_HEAD + ROW.format(size=1048576) + "# Avg bus bandwidth    : 1.2.3\n", ":5:", "avg bus bandwidth"),
    (NCCL_HEAD + ROW.format(size="1048576.5") + ROW.format(size=4194304), ":4:", "size"),
])
def test_nccl_tests_garbage_in_a_table_is_an_error_not_a_crash_or_a_dropped_row(tmp_path, body, where, field):
    log = tmp_path / "ar.txt"
    log.write_text(body)
    res, out = _calibrate(tmp_path, "--nccl-tests", str(log))
    assert where in _error(res, field) and not out.exists()


def test_a_csv_column_named_twice_is_refused(tmp_path):
    for header in ("m,n,k,dtype,time_s,time_s", "m,M,n,k,dtype,time_s"):
        gemm = tmp_path / "g.csv"
        gemm.write_text(header + "\n" + ",".join(["8192"] * 3 + ["bf16"] + ["0.0016"] * (len(header.split(",")) - 4)) + "\n")
        res, out = _calibrate(tmp_path, "--gemm", str(gemm))
        assert "appear more than once" in _error(res, "csv columns") and not out.exists()


@pytest.mark.parametrize("nelems", [1e308, 1e30])
def test_a_trace_with_absurd_element_counts_is_refused(tmp_path, nelems):
    event = {"ph": "X", "cat": "kernel", "name": "ncclKernel_AllReduce_RING_LL_Sum_float", "ts": 1, "dur": 100,
             "args": {"Collective name": "allreduce", "dtype": "Double", "Group size": 8, "In msg nelems": nelems}}
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps({"traceEvents": [event]}))
    res, out = _calibrate(tmp_path, "--trace", str(trace))
    assert "In msg nelems" in _error(res, "traceEvents[0].args") and not out.exists()


def test_a_truncated_gzip_trace_is_bad_input(tmp_path):
    data = gzip.compress(b'{"traceEvents": []}' * 50)
    trace = tmp_path / "t.json.gz"
    trace.write_bytes(data[: len(data) // 2])
    res, _ = _calibrate(tmp_path, "--trace", str(trace))
    _error(res, "t.json.gz:1: trace")


def test_a_trace_alone_fits_nothing_and_writes_no_profile(tmp_path):
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "sm90_xmma_gemm_bf16",
                                                  "ts": 1, "dur": 100}]}))
    res, out = _calibrate(tmp_path, "--trace", str(trace))
    assert res.exit_code == 1 and "kernel time by category" in res.output and "nothing was fitted" in res.output
    assert not out.exists()


@pytest.mark.parametrize("command", [
    EST[:6] + ["4096", "--global-batch", "4096", "--gpus-per-node", "4096"],
    ["comm", "--op", "all_reduce", "--bytes", "1048576", "--gpu", "h100-sxm5-80gb", "--gpus", "4096",
     "--gpus-per-node", "4096"],
])
def test_a_node_too_large_for_its_default_nics_names_gpus_per_node(command):
    """4,096 GPUs per node with one 400 Gbit/s NIC each exceeds the NIC bandwidth bound: the error names
    the option given, not the bandwidth derived from it (comm crashed with a pydantic traceback)."""
    assert "--scale-out-gbit-per-s" in _error(runner.invoke(app, command), "gpus_per_node")
    ok = runner.invoke(app, command + ["--scale-out-gbit-per-s", "400000"])
    assert ok.exit_code == 0, ok.output


def test_validate_does_not_overwrite_its_input(tmp_path):
    runs = tmp_path / "runs.csv"
    text = "\n".join(open("calibration/data/runs/calibration_runs.csv").read().splitlines()[:3]) + "\n"
    runs.write_text(text)
    _error(runner.invoke(app, ["validate", str(runs), "--out", str(runs)]), "out")
    assert runs.read_text() == text


def test_calibration_fabric_names_are_case_insensitive_and_gpu_names_exact(tmp_path):
    upper, lower = tmp_path / "upper.yaml", tmp_path / "lower.yaml"
    upper.write_text("networks:\n  EFA:\n    nic_efficiency: 0.01\n")
    lower.write_text("networks:\n  efa:\n    nic_efficiency: 0.01\n")
    times = []
    for cal in (upper, lower):
        res = runner.invoke(app, EST + ["--network", "EFA", "--calibration", str(cal), "--json"])
        assert res.exit_code == 0, res.output
        times.append(json.loads(res.stdout)["iteration_time_s"])
    assert times[0] == times[1]
    both = tmp_path / "both.yaml"
    both.write_text("networks:\n  EFA:\n    nic_efficiency: 0.01\n  efa:\n    nic_efficiency: 0.02\n")
    _error(runner.invoke(app, EST + ["--calibration", str(both)]), "calibration.networks.efa")
    gpu = tmp_path / "gpu.yaml"
    gpu.write_text("gpus:\n  h100-sxm5-80GB:\n    matmul_efficiency_max: 0.1\n")
    assert "'h100-sxm5-80gb'" in _error(runner.invoke(app, EST + ["--calibration", str(gpu)]), "calibration.gpus")


@pytest.mark.parametrize("body, field", [
    ('constants: {nic_efficiency: "0.5"}', "calibration.constants.nic_efficiency"),
    ("frameworks: {megatron-lm: {flash_attention: 0}}", "calibration.frameworks.megatron-lm.flash_attention"),
    ('frameworks: {megatron-lm: {flash_attention: "no"}}', "calibration.frameworks.megatron-lm.flash_attention"),
    ('frameworks: {megatron-lm: {kernel_efficiency: "0.9"}}', "calibration.frameworks.megatron-lm.kernel_efficiency"),
])
def test_calibration_values_are_not_coerced(tmp_path, body, field):
    cal = tmp_path / "c.yaml"
    cal.write_text(body + "\n")
    _error(runner.invoke(app, EST + ["--calibration", str(cal)]), field)


def test_yaml_numbers_with_an_exponent_are_numbers(tmp_path):
    """PyYAML (YAML 1.1) reads 1e-1 or 2.0e3 as text; YAML 1.2 and JSON read numbers, and so does perfmodel."""
    times = []
    for text in ("1e-1", "0.1", "1.0e-1"):
        cal = tmp_path / "c.yaml"
        cal.write_text(f"constants: {{nic_efficiency: {text}}}\n")
        res = runner.invoke(app, EST + ["--calibration", str(cal), "--json"])
        assert res.exit_code == 0, res.output
        times.append(json.loads(res.stdout)["iteration_time_s"])
    assert times[0] == times[1] == times[2]


def test_model_yaml_switches_are_booleans(tmp_path):
    m = tmp_path / "m.yaml"
    m.write_text("name: x\nn_layers: 2\nhidden_size: 256\nffn_hidden_size: 1024\nn_heads: 4\nn_kv_heads: 4\n"
                 "vocab_size: 1000\ntied_embeddings: 1\n")
    _error(runner.invoke(app, ["estimate", "--model", str(m), "--gpu", "h100-sxm5-80gb", "--gpus", "1",
                               "--global-batch", "1"]), "model.tied_embeddings")


@pytest.mark.parametrize("config, args, field", [
    ({"train_micro_batch_size_per_gpu": 1}, ["--zero-stage", "3", "--zeropp", "qwz"], "zero_stage"),
    ({"train_micro_batch_size_per_gpu": 1}, ["--zeropp", "qwz"], "zeropp"),
    ({"train_micro_batch_size_per_gpu": 1}, ["--micro-batch", "2"], "micro_batch"),
    ({"train_batch_size": 64, "gradient_accumulation_steps": 1}, ["--micro-batch", "2"], "micro_batch"),
    ({"bf16": {"enabled": True}}, ["--precision", "fp16"], "precision"),
])
def test_deepspeed_config_and_explicit_options_must_agree(tmp_path, config, args, field):
    """An option that contradicts the config was dropped without a word."""
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps(config))
    batch = "64" if "train_batch_size" in config else "16"
    _error(runner.invoke(app, EST[:-1] + [batch, "--deepspeed-config", str(ds), *args]), field)


@pytest.mark.parametrize("config, precision, costed", [
    ({"bf16": {"enabled": True}}, "bf16", "bf16"),
    # fp8 matmuls (Transformer Engine) run on top of DeepSpeed's bf16 mixed precision
    ({"bf16": {"enabled": True}}, "fp8", "fp8"),
    # a block turned off is the same as no block: the precision is the option's
    ({"fp16": {"enabled": False}}, "bf16", "bf16"),
    ({}, "fp16", "fp16"),
])
def test_deepspeed_config_with_agreeing_options_runs(tmp_path, config, precision, costed):
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, **config}))
    res = runner.invoke(app, EST + ["--deepspeed-config", str(ds), "--zero-stage", "0", "--micro-batch", "1",
                                    "--precision", precision, "--json"])
    assert res.exit_code == 0, res.output
    cfg = json.loads(res.stdout)["config"]
    assert cfg["zero_stage"] == 0 and cfg["precision"] == costed


def test_megatron_log_arguments_keep_the_cli_limits(tmp_path):
    log = tmp_path / "mlog.txt"
    log.write_text("""------------------------ arguments ------------------------
  bf16 ............................................ True
  global_batch_size ............................... 64
  hidden_size ..................................... 4096
  micro_batch_size ................................ 1
  num_attention_heads ............................. 32
  num_layers ...................................... 32
  seq_length ...................................... 4096
  vocab_size ...................................... 32000
  world_size ...................................... 99999999999999
-------------------- end of arguments ---------------------
 iteration       10/     100 | elapsed time per iteration (ms): 5000.0 |
""")
    res, out = _calibrate(tmp_path, "--log", str(log))
    assert ":10:" in _error(res, "world_size") and not out.exists()


def test_empty_network_and_fixed_options_in_best_mode_are_refused(tmp_path):
    _error(runner.invoke(app, EST + ["--network", ""]), "network")
    res = runner.invoke(app, ["whatif", "--model", "llama3-8b", "--gpu", "h100-sxm5-80gb", "--gpus", "16",
                              "--global-batch", "16", "--vary", "gpus=16,32", "--tp", "8", "--out", str(tmp_path / "w")])
    assert "--mode fixed" in _error(res, "tp")
    assert not (tmp_path / "w").exists()
    res = runner.invoke(app, ["whatif", "--model", "llama3-8b", "--gpu", "h100-sxm5-80gb", "--gpus", "16",
                              "--global-batch", "16", "--vary", "gpus=16,32", "--mode", "bogus", "--tp", "8",
                              "--out", str(tmp_path / "w")])
    _error(res, "mode: must be fixed or best")


def test_a_note_after_an_nccl_tests_table_is_still_skipped(tmp_path):
    log = tmp_path / "all_reduce.txt"
    log.write_text(NCCL_HEAD + consistent_row(1048576) + consistent_row(4194304)
                   + "# Avg bus bandwidth    : 36.8\n\nNotes:\n1. run with NCCL_ALGO=Ring\n")
    res, out = _calibrate(tmp_path, "--nccl-tests", str(log))
    # the table is read whole and the notes after it are not a parse error
    assert "1 table(s), median |error|" in res.output, res.output
    assert not [ln for ln in res.output.splitlines() if ln.startswith(f"error: {log}:")], res.output


@pytest.mark.parametrize("extra, field", [
    ({"n_positions": "1024"}, "model.n_positions"),
    ({"n_positions": -1}, "model.n_positions"),
    ({"kv_lora_rank": 512}, "model.kv_lora_rank"),
])
def test_hf_config_fields_that_cannot_be_costed(tmp_path, extra, field):
    cfg = {"model_type": "gpt2", "n_layer": 2, "n_embd": 256, "n_head": 4, "vocab_size": 1000, "n_positions": 1024,
           "activation_function": "gelu_new", **extra}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    _error(runner.invoke(app, ["estimate", "--model", str(path), "--gpu", "h100-sxm5-80gb", "--gpus", "1",
                               "--global-batch", "1"]), field)


def test_a_hardware_profile_with_a_misspelt_precision_is_refused(tmp_path):
    """fp-8 or FP8 would leave the fp8 peak unread; a datasheet's fp64 or int8 row is kept, unused."""
    text = open("hardware_profiles/h100-sxm5-80gb.yaml").read()
    assert "\n  fp8:" in text
    gpu = tmp_path / "gpu.yaml"
    for typo in ("fp-8", "FP8"):
        gpu.write_text(text.replace("\n  fp8:", f"\n  {typo}:", 1))
        assert "'fp8'" in _error(runner.invoke(app, EST[:4] + [str(gpu)] + EST[5:]), "peak_dense_tflop_per_s")
    gpu.write_text(text.replace("\n  fp8:", "\n  fp64: 66.9\n  int8: 1978.9\n  fp8:", 1))
    assert runner.invoke(app, EST[:4] + [str(gpu)] + EST[5:]).exit_code == 0


def test_text_that_looks_like_a_number_survives_a_yaml_round_trip():
    """A fabric or file named 1e5 is text: written quoted by perfmodel, so it reads back as text."""
    from perfmodel.structured_text import dump_yaml, load_yaml

    doc = {"networks": {"2e1": {"nic_efficiency": 1e-5}}, "path": "1e5", "n": 12, "x": 2e-05}
    assert load_yaml(dump_yaml(doc), "calibration", "mem") == doc


def test_a_corrupted_row_inside_an_nccl_tests_table_is_an_error(tmp_path):
    log = tmp_path / "all_reduce.txt"
    log.write_text(NCCL_HEAD + ROW.format(size=1048576) + "     1048576.5  262144  float  sum\n"
                   + ROW.format(size=4194304))
    res, out = _calibrate(tmp_path, "--nccl-tests", str(log))
    assert ":5:" in _error(res, "size") and not out.exists()


def test_a_stack_borrowing_a_fitted_efficiency_says_so():
    res = runner.invoke(app, ["estimate", "--model", "llama3-8b", "--gpu", "a100-sxm4-80gb", "--gpus", "64",
                              "--global-batch", "512", "--tp", "2", "--pp", "4", "--framework", "gpt-neox"])
    assert res.exit_code == 0, res.output
    assert ("gpt-neox has no fit of its own for these: it runs at megatron-deepspeed's fitted kernel_efficiency"
            in res.output) and "microbatch_overhead_s" in res.output


def test_fp8_beside_a_fp16_deepspeed_config_is_refused(tmp_path):
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "fp16": {"enabled": True}}))
    _error(runner.invoke(app, EST + ["--deepspeed-config", str(ds), "--precision", "fp8"]), "precision")
