"""Input review findings (2026-11-30), each through the real entry point: a node layout the file does not
show is said, and a joint fit pinned on a bound applies nothing; outputs never replace inputs; terminal
colour codes and byte-order marks are not content; an impossible throughput is not a measurement; a
framework without a profile is named."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from cli_helpers import run_cli

ROOT = Path(__file__).resolve().parents[2]
POLARIS_N2 = ROOT / "tests" / "fixtures" / "calibrate_review" / "old_rank_all_reduce_polaris_n2.txt"
ARGS_LOG = ROOT / "tests" / "fixtures" / "parsers" / "megatron_args_llama2_7b.log"
RUNS = ROOT / "calibration" / "data" / "runs" / "calibration_runs.csv"




def _runs_row(tmp_path, name="runs.csv", **cells) -> Path:
    row = {"run_id": "r-001", "n_layers": 32, "hidden_size": 4096, "ffn_hidden_size": 11008, "n_heads": 32,
           "n_kv_heads": 32, "vocab_size": 32000, "seq_len": 4096, "mlp": "swiglu", "gpu": "h100-sxm5-80gb",
           "n_gpus": 8, "tp": 1, "pp": 1, "dp": 8, "micro_batch": 1, "global_batch": 64, "framework": "megatron-lm",
           "tokens_per_s_per_gpu": 3000.0, **cells}
    path = tmp_path / name
    pd.DataFrame([row]).to_csv(path, index=False)
    return path


# ---- nccl-tests: the node layout a file does not show -------------------------------------------
def test_nccl_tests_without_rank_lines_say_the_node_size_and_a_pinned_fit_applies_nothing(tmp_path, monkeypatch,
                                                                                        capsys):
    """Polaris' 2 x 4-GPU all_reduce without its Rank lines was fitted as one 8-GPU node, silently: the
    NVLink efficiency ended on its bound and the latency fitted with it (3.7 ms) was written all the same."""
    text = "".join(ln for ln in POLARIS_N2.read_text().splitlines(keepends=True) if "Rank" not in ln)
    bare = tmp_path / "n2_no_ranks.txt"
    bare.write_text(text)
    out = tmp_path / "p.yaml"
    code, _, err = run_cli(monkeypatch, capsys, "calibrate", "--gpu", "a100-sxm4-40gb", "--nccl-tests", str(bare),
                           "--out", str(out))
    assert code == 1 and not out.exists(), err
    assert "name no hosts (no Rank lines): nodes of 8 GPUs" in err
    assert "nor the values of its fit stage" in err and "Traceback" not in err
    code, _, err = run_cli(monkeypatch, capsys, "calibrate", "--gpu", "a100-sxm4-40gb", "--gpus-per-node", "4",
                           "--nccl-tests", str(bare), "--out", str(out))
    assert code == 0 and out.is_file(), err
    latency = yaml.safe_load(out.read_text())["gpus"]["a100-sxm4-40gb"].get("intra_node_latency_us", 0.0)
    assert latency < 100.0  # microseconds, not milliseconds


# ---- outputs never replace inputs ---------------------------------------------------------------------
def test_validate_refuses_to_write_its_predictions_over_the_calibration(tmp_path, monkeypatch, capsys):
    cal = tmp_path / "cal.yaml"
    cal.write_text("constants: {nvlink_efficiency: 0.8}\n")
    code, _, err = run_cli(monkeypatch, capsys, "validate", str(_runs_row(tmp_path)), "--out", str(cal),
                           "--calibration", str(cal))
    assert code == 2 and err.strip().splitlines() == [f"error: {cal}: out: is the --calibration profile; give "
                                                      "another file for the predictions"]
    assert cal.read_text() == "constants: {nvlink_efficiency: 0.8}\n"


@pytest.mark.parametrize("input_name", ["scaling.csv", "runs_predicted.csv", "candidates.csv"])
def test_report_refuses_a_folder_where_one_of_its_files_is_an_input(tmp_path, monkeypatch, capsys, input_name):
    folder = tmp_path / "rep"
    folder.mkdir()
    runs = _runs_row(folder, name=input_name)
    before = runs.read_bytes()
    code, _, err = run_cli(monkeypatch, capsys, "report", "--model", "llama2-7b", "--gpu", "h100-sxm5-80gb",
                           "--gpus", "8", "--global-batch", "64", "--seq-len", "4096", "--top", "2",
                           "--out", str(folder), "--runs", str(runs))
    assert code == 2 and "Traceback" not in err, err
    assert f"out: its {input_name} would replace the input {runs}" in err
    assert runs.read_bytes() == before and not (folder / "report.html").exists()


def test_whatif_refuses_a_folder_where_its_csv_is_the_calibration(tmp_path, monkeypatch, capsys):
    folder = tmp_path / "w"
    folder.mkdir()
    cal = folder / "whatif.csv"  # an odd name for a profile, but the user's file all the same
    cal.write_text("constants: {nvlink_efficiency: 0.8}\n")
    code, _, err = run_cli(monkeypatch, capsys, "whatif", "--model", "llama2-7b", "--gpu", "h100-sxm5-80gb",
                           "--gpus", "8", "--global-batch", "64", "--vary", "gpus=8,16", "--calibration", str(cal),
                           "--out", str(folder))
    assert code == 2 and "out: its whatif.csv would replace the input" in err, err
    assert cal.read_text() == "constants: {nvlink_efficiency: 0.8}\n"


# ---- colour codes and byte-order marks are not content --------------------------------------------
def test_coloured_nccl_tests_and_megatron_arguments_read_as_plain(tmp_path, monkeypatch, capsys):
    def colour(line: str) -> str:
        return f"\x1b[32m{line}\x1b[0m" if line.strip() else line

    nccl = tmp_path / "coloured.txt"
    nccl.write_text("\n".join(colour(ln) for ln in POLARIS_N2.read_text().splitlines()) + "\n")
    code, out, err = run_cli(monkeypatch, capsys, "calibrate", "--gpu", "a100-sxm4-40gb", "--nccl-tests", str(nccl),
                             "--out", str(tmp_path / "n.yaml"))
    assert code == 0, err
    assert "1 table(s)" in out

    from perfmodel.calibrate.parsers.megatron_args import parse_megatron_arguments

    log = tmp_path / "coloured.log"
    log.write_text("\n".join(colour(ln) for ln in ARGS_LOG.read_text().splitlines()) + "\n")
    plain = parse_megatron_arguments(ARGS_LOG)
    assert plain is not None and dict(parse_megatron_arguments(log)) == dict(plain)


def test_a_kineto_trace_with_a_byte_order_mark_reads(tmp_path):
    from perfmodel.calibrate.parsers import parse_kineto_trace

    doc = {"traceEvents": [{"ph": "X", "cat": "kernel", "name": "sm90_xmma_gemm_bf16bf16", "ts": 1, "dur": 10.0}]}
    plain, marked = tmp_path / "t.json", tmp_path / "bom.json.gz"
    plain.write_text(json.dumps(doc))
    with gzip.open(marked, "wb") as fh:
        fh.write(b"\xef\xbb\xbf" + json.dumps(doc).encode())
    got, want = parse_kineto_trace(marked), parse_kineto_trace(plain)
    assert got.kernel_time_s == want.kernel_time_s and got.kernel_count == want.kernel_count


# ---- impossible throughputs and unknown stacks ---------------------------------------------------
@pytest.mark.parametrize("cells, column", [
    ({"tokens_per_s_per_gpu": 1e300}, "tokens_per_s_per_gpu"),
    ({"tokens_per_s_per_gpu": None, "iteration_time_s": 1e-12}, "iteration_time_s"),
])
def test_a_throughput_no_gpu_could_reach_is_not_a_measurement(tmp_path, monkeypatch, capsys, cells, column):
    """1e300 tokens/s/GPU crashed the report's plot; it needs 1e300 x 12 L h^2 FLOP/s, no GPU's peak."""
    from perfmodel.calibrate.parsers.runs_csv import read_runs_csv

    df = read_runs_csv(_runs_row(tmp_path, **cells))
    assert f"{column}: " in df["_row_errors"].iloc[0] and "not a per-GPU measurement" in df["_row_errors"].iloc[0]
    code, _, err = run_cli(monkeypatch, capsys, "report", "--model", "llama2-7b", "--gpu", "h100-sxm5-80gb",
                           "--gpus", "8", "--global-batch", "64", "--seq-len", "4096", "--top", "2",
                           "--out", str(tmp_path / "rep"), "--runs", str(_runs_row(tmp_path, name="r2.csv", **cells)))
    assert code == 0 and "Traceback" not in err, err


@pytest.mark.skipif(not RUNS.is_file(), reason="calibration runs absent")
def test_no_measured_run_is_refused_by_the_throughput_bound():
    from perfmodel.calibrate.parsers.runs_csv import read_runs_csv

    assert (read_runs_csv(RUNS)["_row_errors"] == "").all()


def test_a_framework_without_a_profile_is_named_with_the_closest_one(tmp_path, monkeypatch, capsys):
    runs = _runs_row(tmp_path, framework="megatron_lm")
    code, _, err = run_cli(monkeypatch, capsys, "validate", str(runs), "--out", str(tmp_path / "p.csv"))
    assert code == 0, err
    assert ("framework(s) with no profile, run with the generic one: 'megatron_lm' (1 row; did you mean "
            "'megatron-lm'?)") in err
    code, _, err = run_cli(monkeypatch, capsys, "validate", str(_runs_row(tmp_path, name="ok.csv")),
                           "--out", str(tmp_path / "q.csv"))
    assert code == 0 and "framework" not in err, err


# ---- stacks without flash attention ---------------------------------------------------------------
def test_a_stack_costed_with_unfused_attention_says_so_at_long_sequences(monkeypatch, capsys):
    """DeepSpeed's profile has no flash kernels (its measured runs): at 32K tokens it came out at 10% MFU or
    did not fit, with no word why. Said from 4K tokens on, on GPUs that could run flash kernels."""
    args = ["estimate", "--model", "llama3-8b", "--gpus", "8", "--global-batch", "8", "--zero-stage", "3", "--json"]
    notes = {}
    for fw, gpu, seq in (("deepspeed", "h100-sxm5-80gb", "32768"), ("deepspeed", "h100-sxm5-80gb", "2048"),
                         ("megatron-lm", "h100-sxm5-80gb", "32768"), ("deepspeed", "v100-sxm3-32gb", "32768")):
        code, out, err = run_cli(monkeypatch, capsys, *args, "--framework", fw, "--gpu", gpu, "--seq-len", seq,
                                 *(["--precision", "fp16"] if gpu.startswith("v100") else []))
        assert code == 0, err
        notes[fw, gpu, seq] = [n for n in json.loads(out)["notes"] if "unfused" in n]
    assert len(notes["deepspeed", "h100-sxm5-80gb", "32768"]) == 1
    assert "at 32,768 tokens" in notes["deepspeed", "h100-sxm5-80gb", "32768"][0]
    assert notes["deepspeed", "h100-sxm5-80gb", "2048"] == []
    assert notes["megatron-lm", "h100-sxm5-80gb", "32768"] == []
    # no flash kernels on Volta in any stack: said as the GPU's, not the stack's
    assert len(notes["deepspeed", "v100-sxm3-32gb", "32768"]) == 1
    assert notes["deepspeed", "v100-sxm3-32gb", "32768"][0].startswith("v100-sxm3-32gb has no flash kernels")


def test_a_stack_fitted_on_the_top_of_its_kernel_rate_is_said():
    """nanotron's and OneFlow's fitted kernel efficiency ends on the fit's upper bound (MAMF): their estimates
    lean on it (nanotron came out faster than Megatron-LM on the same job), so they say so."""
    import perfmodel as pm
    from perfmodel.calibration_profile import Calibration
    from perfmodel.limits import MAX_KERNEL_EFFICIENCY
    from perfmodel.notes import job_notes

    cluster = pm.ClusterSpec.build(pm.load_gpu("a100-sxm4-80gb"), n_gpus=8)

    def notes(fw, cal):
        job = pm.JobSpec(global_batch=64, seq_len=2048, framework=fw)
        return [n for n in job_notes(job, cluster, cal) if "top of its range" in n]

    at_top = Calibration(frameworks={"nanotron": {"kernel_efficiency": MAX_KERNEL_EFFICIENCY},
                                     "megatron-lm": {"kernel_efficiency": 0.9}})
    assert len(notes("nanotron", at_top)) == 1 and notes("megatron-lm", at_top) == []
    assert notes("nanotron", Calibration(frameworks={"nanotron": {"kernel_efficiency": 1.0}})) == []


def test_flash_attention_can_be_turned_on_or_off_for_the_job(monkeypatch, capsys):
    """--flash-attention costs a DeepSpeed build with FlashAttention (its profile has none): faster and
    smaller at 16K tokens, without the unfused-attention note; --no-flash-attention the other way round for
    Megatron-LM, whose Transformer Engine attention then has no context parallelism. A V100 has no flash
    kernels either way."""
    import perfmodel as pm
    from perfmodel.search.emit import megatron_flags

    def est(*extra, gpu="h100-sxm5-80gb", fw="deepspeed"):
        code, out, err = run_cli(monkeypatch, capsys, "estimate", "--model", "llama3-8b", "--gpu", gpu, "--gpus", "8",
                                 "--seq-len", "16384", "--global-batch", "8", "--framework", fw, "--json",
                                 *(["--precision", "fp16"] if gpu.startswith("v100") else []), *extra)
        assert code == 0, err
        return json.loads(out)

    base, on, off = est("--zero-stage", "3"), est("--zero-stage", "3", "--flash-attention"), \
        est("--zero-stage", "3", "--no-flash-attention")
    assert on["tokens_per_s_per_gpu"] > 1.5 * base["tokens_per_s_per_gpu"] and on["memory_gib"] < base["memory_gib"]
    assert off["tokens_per_s_per_gpu"] == base["tokens_per_s_per_gpu"]
    assert any("unfused attention" in n for n in base["notes"]) and on["notes"] == [] and off["notes"] == []
    mlm, mlm_off = est(fw="megatron-lm"), est("--no-flash-attention", fw="megatron-lm")
    assert mlm_off["tokens_per_s_per_gpu"] < mlm["tokens_per_s_per_gpu"]
    cp_off = est("--no-flash-attention", "--cp", "2", fw="megatron-lm")
    assert any("cannot run this configuration" in n and "fused attention" in n for n in cp_off["notes"])
    volta = [est("--zero-stage", "3", *f, gpu="v100-sxm3-32gb")["tokens_per_s_per_gpu"] for f in ([], ["--flash-attention"])]
    assert volta[0] == volta[1]
    row = dict(tp=1, pp=1, dp=8, cp=1, vpp=1, micro_batch=1, sp=False, zero_stage=1, zeropp="", recompute="full",
               cp_kind="ring")
    model = pm.load_model("llama3-8b")
    job = pm.JobSpec(global_batch=8, seq_len=16384, framework="megatron-deepspeed")
    assert "--use-flash-attn-v2" not in megatron_flags(model, job, row)
    assert "--use-flash-attn-v2" in megatron_flags(model, job.model_copy(update={"flash_attention": True}), row)


def test_a_refused_value_drops_its_fit_stage_and_those_on_top_not_the_ones_below():
    """The nccl-tests fit runs in stages: the intra-node values on single-node tables, then the inter-node
    ones with those fixed, then a collective's own on top. A refused inter-node value cannot have bent the
    intra-node values fitted before it: they are applied (a 1-node H100 file beside a 2-node one wrote
    nothing, where the 1-node file alone writes its NVLink efficiency)."""
    from perfmodel.calibrate.apply_collectives import drop_refused

    fitted = {"constants": {"nic_efficiency": 0.999},
              "gpus": {"h100": {"nvlink_efficiency": 1.06, "intra_node_latency_us": 147.0}},
              "networks": {"efa": {"scale_out_latency_us": 500.0, "ll_bandwidth_ratio": 0.0,
                                   "all_gather.nic_efficiency": 0.8}}}
    applied, dropped, others = drop_refused(fitted, tiers_apart=True)
    assert applied["gpus"]["h100"] == {"nvlink_efficiency": 1.06, "intra_node_latency_us": 147.0}
    assert applied["constants"] == {} and applied["networks"]["efa"] == {}
    assert dropped == {"nic_efficiency": 0.999}
    assert others == {"scale_out_latency_us": 500.0, "all_gather.nic_efficiency": 0.8}  # not the switched-off 0
    # the same values fitted in one stage (no single-node table apart): nothing is applied
    applied, _, others = drop_refused(fitted, tiers_apart=False)
    assert applied["gpus"]["h100"] == {} and "nvlink_efficiency" in others
    # a collective's own value on its bound drops that collective's values only
    own = {"constants": {}, "gpus": {"h100": {"nvlink_efficiency": 0.9}},
           "networks": {"efa": {"nic_efficiency": 0.7, "all_gather.nic_efficiency": 0.005,
                                "all_gather.scale_out_latency_us": 40.0}}}
    applied, dropped, others = drop_refused(own, tiers_apart=True)
    assert applied["networks"]["efa"] == {"nic_efficiency": 0.7} and applied["gpus"]["h100"] == {"nvlink_efficiency": 0.9}
    assert dropped == {"all_gather.nic_efficiency": 0.005} and others == {"all_gather.scale_out_latency_us": 40.0}


def test_validate_and_report_never_replace_a_gpu_profile_the_runs_csv_names(tmp_path, monkeypatch, capsys):
    gpu = tmp_path / "mygpu.yaml"
    gpu.write_text((ROOT / "hardware_profiles" / "h100-sxm5-80gb.yaml").read_text().replace(
        "name: h100-sxm5-80gb", "name: mygpu", 1))
    before = gpu.read_bytes()
    runs = _runs_row(tmp_path, gpu=str(gpu))
    code, _, err = run_cli(monkeypatch, capsys, "validate", str(runs), "--out", str(gpu))
    assert code == 2 and f"out: is the GPU profile {gpu} that the runs CSV names" in err, err
    folder = tmp_path / "rep"
    folder.mkdir()
    inside = folder / "scaling.csv"
    inside.write_bytes(before)
    runs = _runs_row(tmp_path, name="r2.csv", gpu=str(inside))
    code, _, err = run_cli(monkeypatch, capsys, "report", "--model", "llama2-7b", "--gpu", "h100-sxm5-80gb",
                           "--gpus", "8", "--global-batch", "64", "--seq-len", "4096", "--top", "2",
                           "--out", str(folder), "--runs", str(runs))
    assert code == 2 and "would replace the input" in err, err
    assert gpu.read_bytes() == before and inside.read_bytes() == before


def test_flash_attention_asked_for_on_a_volta_is_said_not_silently_dropped(monkeypatch, capsys):
    code, out, err = run_cli(monkeypatch, capsys, "estimate", "--model", "gpt3-1.3b", "--gpu", "v100-sxm3-32gb",
                             "--gpus", "16", "--seq-len", "2048", "--global-batch", "64", "--tp", "2",
                             "--framework", "megatron-deepspeed", "--flash-attention", "--json")
    assert code == 0, err
    assert [n for n in json.loads(out)["notes"] if n.startswith("--flash-attention does not apply on v100-sxm3-32gb")]


def test_a_sibling_gpu_takes_the_nvlink_efficiency_fitted_with_the_latency_it_takes(tmp_path, monkeypatch, capsys):
    """An H100 calibration (NVLink efficiency 1.06 fitted with a 147 us latency) made an H200, which takes
    the H100's latency (calibration_from), slower than the H100 and than no calibration: the two travel
    together."""
    cal = tmp_path / "h100.yaml"
    cal.write_text("gpus:\n  h100-sxm5-80gb:\n    nvlink_efficiency: 1.06\n    intra_node_latency_us: 147.0\n")
    busbw = {}
    for gpu in ("h100-sxm5-80gb", "h200-sxm-141gb"):
        code, out, err = run_cli(monkeypatch, capsys, "comm", "--op", "all_reduce", "--bytes", "268435456",
                                 "--gpus", "8", "--gpus-per-node", "8", "--gpu", gpu, "--calibration", str(cal),
                                 "--json")
        assert code == 0, err
        busbw[gpu] = json.loads(out)["busbw_gb_per_s"]
    assert busbw["h200-sxm-141gb"] == pytest.approx(busbw["h100-sxm5-80gb"])


def test_the_python_api_checks_what_the_cli_checks():
    import perfmodel as pm
    from perfmodel import InputError

    gpu = pm.load_gpu("h100-sxm5-80gb")
    with pytest.raises(InputError, match="^gpus_per_node: must be a positive number"):
        pm.ClusterSpec.build(gpu, 8, 0)
    cluster = pm.ClusterSpec.build(gpu, 8)
    job = pm.JobSpec(global_batch=8, seq_len=2048)
    for top in (0, -1):
        with pytest.raises(InputError, match="^top: must be a positive integer"):
            pm.search("llama3-8b", cluster, job, top=top)
    with pytest.raises(ValueError, match="flash_attention"):
        pm.JobSpec(global_batch=8, seq_len=2048, flash_attention="yes")
    by_name = pm.estimate("llama3-8b", cluster, pm.ParallelSpec(tp=8), job)
    assert by_name == pm.estimate(pm.load_model("llama3-8b"), cluster, pm.ParallelSpec(tp=8), job)
