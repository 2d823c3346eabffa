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


def test_a_node_size_the_rank_lines_contradict_is_refused(tmp_path, monkeypatch, capsys):
    """Polaris' run shows 4 ranks on each of 2 hosts: --gpus-per-node 8 would fit its cross-host table as one
    NVLink node (the review found it written silently); the matching 4 still fits."""
    out = tmp_path / "p.yaml"
    code, _, err = run_cli(monkeypatch, capsys, "calibrate", "--gpu", "a100-sxm4-40gb", "--gpus-per-node", "8",
                           "--nccl-tests", str(POLARIS_N2), "--out", str(out))
    assert code == 2 and not out.exists(), err
    assert err.strip().splitlines() == [
        f"error: gpus_per_node: 8 contradicts the nccl-tests Rank lines of {POLARIS_N2} (4 ranks on each of 2 "
        "hosts): give 4 or leave --gpus-per-node out to take it from them"]
    code, _, err = run_cli(monkeypatch, capsys, "calibrate", "--gpu", "a100-sxm4-40gb", "--gpus-per-node", "4",
                           "--nccl-tests", str(POLARIS_N2), "--out", str(out))
    assert code == 0 and out.is_file() and "contradicts" not in err, err


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
    """A fitted kernel efficiency on the fit's upper bound (MAMF; OneFlow's in the shipped profile, nanotron's
    until 2026-12-02, when it came out faster than Megatron-LM on the same job): the estimates lean on it, so
    they say so."""
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


# ---- contract review (2026-11-30): one error line, sources of hand-made run ids --------------------
def test_validate_refusing_its_output_prints_the_error_line_alone(tmp_path, monkeypatch, capsys):
    """A runs CSV with a framework perfmodel has no profile for, validated onto itself: the reading's
    note: line used to come before the error: line; a refused run prints one line."""
    runs = _runs_row(tmp_path, framework="my-own-stack")
    code, _, err = run_cli(monkeypatch, capsys, "validate", str(runs), "--out", str(runs))
    assert code == 2
    assert err.strip().count("\n") == 0 and err.startswith("error: ") and "out" in err
    code, _, err = run_cli(monkeypatch, capsys, "validate", str(runs), "--out", str(tmp_path / "pred.csv"))
    assert code == 0 and err.startswith("note: ") and "my-own-stack" in err


def test_every_command_refused_for_bad_input_prints_its_error_line_alone(tmp_path, monkeypatch, capsys):
    """The inputs' notes are held by the entry point, not by each command: report read the runs CSV (a
    note) and then refused a missing calibration, two lines."""
    runs = _runs_row(tmp_path, framework="my-own-stack")
    base = ["report", "--model", "llama3-8b", "--gpu", "h100-sxm5-80gb", "--gpus", "8", "--global-batch", "64",
            "--seq-len", "4096", "--runs", str(runs)]
    code, _, err = run_cli(monkeypatch, capsys, *base, "--calibration", str(tmp_path / "missing.yaml"),
                           "--out", str(tmp_path / "r1"))
    assert code == 2 and err.count("\n") == 1 and err.startswith("error: ") and "calibration" in err
    code, _, err = run_cli(monkeypatch, capsys, *base, "--out", str(tmp_path / "r2"))
    assert code == 0 and "note: " in err and "my-own-stack" in err


def test_validate_groups_run_ids_without_an_index_by_their_source_cell(tmp_path, monkeypatch, capsys):
    """Run ids in the schema's slug + index form group by slug; other ids by the source column, or
    each on its own where no source is given; the scored count is a count."""
    rows = [{"run_id": rid, "source": src, "n_layers": 32, "hidden_size": 4096, "seq_len": 4096,
             "gpu": "h100-sxm5-80gb", "n_gpus": 8, "tp": 1, "pp": 1, "dp": 8, "global_batch": 64,
             "tokens_per_s_per_gpu": tps}
            for rid, src, tps in (("r1", "lab A", 3000.0), ("r2", "lab A", 3100.0), ("x-001", "ignored", 2900.0),
                                  ("x-002", "", 2800.0), ("loose", "", float("nan")))]
    runs = tmp_path / "runs.csv"
    pd.DataFrame(rows).to_csv(runs, index=False)
    code, out, _ = run_cli(monkeypatch, capsys, "validate", str(runs), "--out", str(tmp_path / "pred.csv"))
    assert code == 0
    table = {line.split()[0] if not line.startswith("lab A") else "lab A": line.split()
             for line in out.splitlines()[3:] if line.strip() and not line.startswith("rows ")}
    assert set(table) == {"lab A", "x", "loose"}
    assert table["lab A"][2:5] == ["2", "2", "2"]      # rows, ok, scored
    assert table["x"][1:4] == ["2", "2", "2"]
    assert table["loose"][1:4] == ["1", "1", "0"]


# ---- nccl-tests rows checked against themselves and the collective (input audit 2026-11-30) -------
ALCF = ROOT / "calibration" / "data" / "collectives" / "collectives" / "alcf_polaris_A100_slingshot"
ALCF_ALLTOALL = ALCF / "nccl_2_21__n2.g4.2024-04-29-19-08-14__alltoall_output.dat.5.txt"
ALCF_ALLREDUCE = ALCF / "nccl_2_21__n2.g4.2024-04-29-19-08-14__all_reduce_output.dat.5.txt"
XXRJUN_G8 = ROOT / "calibration" / "data" / "collectives" / "collectives" / "xxrjun_cluster01_H100_10nodes" / \
    "nccl_N10_G8.log.txt"


def _data_rows(text: str) -> list[int]:
    return [i for i, ln in enumerate(text.splitlines()) if ln.strip() and not ln.lstrip().startswith("#")
            and ln.split()[0].isdigit()]


def _calibrate(monkeypatch, capsys, path, gpu="a100-sxm4-40gb"):
    return run_cli(monkeypatch, capsys, "calibrate", "--gpu", gpu, "--nccl-tests", str(path),
                   "--out", str(path.parent / "cal.yaml"))


def test_an_alltoall_table_under_an_all_reduce_name_is_refused(tmp_path, monkeypatch, capsys):
    """With its '_perf' mentions gone, the file name made ALCF's alltoall an all_reduce: fitted, the
    cluster's NIC efficiency came out 0.027 and a 64-GPU Llama-2 13B step 2.5x slower. Its redop
    'none' and size = count x 4 x ranks say otherwise."""
    text = "".join(ln for ln in ALCF_ALLTOALL.read_text().splitlines(keepends=True)
                   if not any(w in ln.lower() for w in ("perf", "collective test", "alltoall")))
    bad = tmp_path / "run3_all_reduce.txt"
    bad.write_text(text)
    code, _, err = _calibrate(monkeypatch, capsys, bad)
    assert code == 2 and err.count("\n") == 1 and err.startswith("error: ") and "redop" in err
    good = tmp_path / "run3_alltoall.txt"
    good.write_text(text)
    assert _calibrate(monkeypatch, capsys, good)[0] == 0


def test_a_time_that_contradicts_its_algbw_a_repeated_size_and_missing_rank_lines_are_refused(
        tmp_path, monkeypatch, capsys):
    lines = ALCF_ALLREDUCE.read_text().splitlines(keepends=True)
    rows = _data_rows("".join(lines))
    last = lines[rows[-1]].split()
    # the largest row's time divided by 10, its algbw left as printed
    slipped = list(lines)
    cells = list(last)
    cells[5] = f"{float(cells[5]) / 10:.1f}"
    slipped[rows[-1]] = "  " + "  ".join(cells) + "\n"
    path = tmp_path / "slip_all_reduce.txt"
    path.write_text("".join(slipped))
    code, _, err = _calibrate(monkeypatch, capsys, path)
    assert code == 2 and "time" in err and "algbw" in err and err.count("\n") == 1
    # the same size twice is read: -N run cycles repeat the sweep in one table, -r -1 every root
    doubled = list(lines)
    doubled[rows[-1] + 1:rows[-1] + 1] = [lines[i] for i in rows]
    path = tmp_path / "cycles_all_reduce.txt"
    path.write_text("".join(doubled))
    assert _calibrate(monkeypatch, capsys, path)[0] in (0, 1)
    # a time of 1e6 us or more prints as '%7.1e': two significant digits are not a contradiction
    big = list(lines)
    cells = list(last)
    size = int(cells[0]) * 64
    true_us = size / (float(cells[6]) * 1e3)
    cells[0], cells[1], cells[5], cells[8] = str(size), str(int(cells[1]) * 64), f"{true_us:.1e}", f"{true_us:.1e}"
    big.insert(rows[-1] + 1, "  " + "  ".join(cells) + "\n")
    path = tmp_path / "huge_all_reduce.txt"
    path.write_text("".join(big))
    assert true_us >= 1e6 and _calibrate(monkeypatch, capsys, path)[0] in (0, 1)
    # an all_gather table whose Rank lines stop half way: size / count says 80 ranks
    g8 = XXRJUN_G8.read_text().splitlines(keepends=True)
    first_ag = next(i for i, ln in enumerate(g8) if "all_gather_perf" in ln)
    table = next(i for i in _data_rows("".join(g8)) if i > first_ag)
    kept = [ln for i, ln in enumerate(g8)
            if not (first_ag < i < table and "#  Rank" in ln and int(ln.split()[2]) >= 40)]
    path = tmp_path / "half_ranks.txt"
    path.write_text("".join(kept))
    code, _, err = _calibrate(monkeypatch, capsys, path, gpu="h100-sxm5-80gb")
    assert code == 2 and "Rank" in err and "80" in err


def test_rank_lines_split_into_groups_count_one_group_s_ranks(tmp_path):
    """NCCL_TESTS_SPLIT_MASK: every process prints its Rank line, each Group is a communicator of its
    own: 16 Rank lines in two groups are an 8-rank all_gather (read as 16 before)."""
    from perfmodel.calibrate.parsers.nccl_tests import parse_nccl_tests_all

    text = ALCF_ALLTOALL.read_text()
    ranks = [ln for ln in text.splitlines() if "#  Rank" in ln]
    assert len(ranks) == 8 and "Group" in ranks[0]
    second = [ln.replace("Group  0", "Group  1").replace(f"Rank {ln.split()[2]:>2}", f"Rank {int(ln.split()[2]) + 8:>2}")
              for ln in ranks]
    path = tmp_path / "alltoall_split.txt"
    path.write_text(text.replace(ranks[-1] + "\n", ranks[-1] + "\n" + "\n".join(second) + "\n", 1))
    table = parse_nccl_tests_all(path)[0]
    assert table.op == "all_to_all" and table.n_ranks == 8


# ---- Megatron logs: one run per log, its own batch, switches that say True or False ---------------
def _megatron_log(tmp_path, name, edit) -> Path:
    path = tmp_path / name
    path.write_text(edit(ARGS_LOG.read_text()))
    return path


def _calibrate_log(monkeypatch, capsys, path):
    return run_cli(monkeypatch, capsys, "calibrate", "--gpu", "h100-sxm5-80gb", "--log", str(path),
                   "--out", str(path.parent / "cal.yaml"))


def test_a_log_with_two_runs_or_two_ranks_lines_is_refused(tmp_path, monkeypatch, capsys):
    """A restart appended with tp 2 (its lines 1.4x slower) was pooled with the first run's lines and
    fitted against the first block (kernel efficiency 0.648 instead of the run's own 0.915, as fitted then);
    the same lines from two ranks were pooled too."""
    text = ARGS_LOG.read_text()
    block = text[text.index("----"):text.index("end of arguments")]
    block_end = text.index("\n", text.index("end of arguments")) + 1
    restart = text[text.index("----"):block_end].replace(
        "tensor_model_parallel_size ...................... 1", "tensor_model_parallel_size ...................... 2")
    assert restart != text[text.index("----"):block_end] and block
    two_runs = _megatron_log(tmp_path, "two_runs.log", lambda t: t + restart + "".join(
        ln + "\n" for ln in t.splitlines() if "iteration " in ln and "elapsed" in ln))
    code, _, err = _calibrate_log(monkeypatch, capsys, two_runs)
    assert code == 2 and "tensor_model_parallel_size" in err and "two runs" in err
    same_again = _megatron_log(tmp_path, "restart.log", lambda t: t + t[t.index("----"):block_end])
    assert _calibrate_log(monkeypatch, capsys, same_again)[0] == 0   # a restart with the same arguments
    # resumed from a checkpoint: the restart re-runs iterations 4-6 after its block; the later lines count
    resumed = _megatron_log(tmp_path, "resumed.log", lambda t: t + t[t.index("----"):block_end] + "".join(
        ln + "\n" for ln in [x for x in t.splitlines() if "iteration " in x and "elapsed" in x][3:]))
    code, out, _ = _calibrate_log(monkeypatch, capsys, resumed)
    alone = _calibrate_log(monkeypatch, capsys, _megatron_log(tmp_path, "alone.log", lambda t: t))[1]
    fitted = alone[alone.index("kernel_efficiency = "):].split()[2]
    assert code == 0 and f"kernel_efficiency = {fitted}" in out   # as the run alone fits
    ranks = _megatron_log(tmp_path, "ranks.log", lambda t: t + "".join(
        "[rank1]: " + ln + "\n" for ln in t.splitlines() if "iteration " in ln and "elapsed" in ln))
    code, _, err = _calibrate_log(monkeypatch, capsys, ranks)
    assert code == 2 and "logged twice" in err


def test_ramp_up_lines_are_left_out_and_a_switch_that_is_not_true_or_false_is_refused(tmp_path, monkeypatch,
                                                                                      capsys):
    def ramp(t):
        lines = t.splitlines(keepends=True)
        its = [i for i, ln in enumerate(lines) if "iteration " in ln and "elapsed" in ln]
        for i in its[:3]:
            lines[i] = lines[i].replace("global batch size:   128", "global batch size:   112")
        return "".join(lines)
    code, _, err = _calibrate_log(monkeypatch, capsys, _megatron_log(tmp_path, "ramp.log", ramp))
    assert code == 0 and "3 of" in err and "ramp-up" in err
    every = _megatron_log(tmp_path, "all112.log", lambda t: t.replace("global batch size:   128",
                                                                      "global batch size:   112"))
    code, _, err = _calibrate_log(monkeypatch, capsys, every)
    assert code == 2 and "global_batch_size 128" in err
    typo = _megatron_log(tmp_path, "typo.log", lambda t: t.replace(
        "swiglu .......................................... True", "swiglu .......................................... Tru"))
    code, _, err = _calibrate_log(monkeypatch, capsys, typo)
    assert code == 2 and err.startswith("error: ") and "swiglu" in err and "'Tru'" in err


def test_a_refused_calibration_input_prints_its_error_line_alone(tmp_path, monkeypatch, capsys):
    """An nccl-tests file's note (no Rank lines: the node size is assumed) used to print before a later
    input's error."""
    nccl = tmp_path / "all_reduce_no_ranks.txt"
    nccl.write_text("".join(ln for ln in POLARIS_N2.read_text().splitlines(keepends=True) if "Rank" not in ln))
    gemm = tmp_path / "gemm.csv"
    gemm.write_text("m,n,k,dtype,time_us\n4096,4096,4096,bf16,200\n8192,8192,4k,bf16,1400\n")
    args = ["calibrate", "--gpu", "a100-sxm4-40gb", "--nccl-tests", str(nccl), "--out", str(tmp_path / "cal.yaml")]
    code, _, err = run_cli(monkeypatch, capsys, *args)
    assert code in (0, 1) and "note: " in err   # the note is said when every input was read
    code, _, err = run_cli(monkeypatch, capsys, *args, "--gemm", str(gemm))
    assert code == 2 and err.count("\n") == 1 and err.startswith("error: ") and "'4k'" in err


def test_a_gemm_csv_that_names_another_gpu_is_refused(tmp_path, monkeypatch, capsys):
    """Timed on an A100 (its gpu column says so) and fitted as --gpu h100: an H100 matmul efficiency of 0.28."""
    other = tmp_path / "a100.csv"
    other.write_text("m,n,k,dtype,time_us,gpu\n4096,4096,4096,bf16,400,a100-sxm4-80gb\n")
    code, _, err = run_cli(monkeypatch, capsys, "calibrate", "--gpu", "h100-sxm5-80gb", "--gemm", str(other),
                           "--out", str(tmp_path / "cal.yaml"))
    assert code == 2 and "a100-sxm4-80gb" in err and "gpu" in err
    same = tmp_path / "h100.csv"
    same.write_text("m,n,k,dtype,time_us,gpu_type\n4096,4096,4096,bf16,200,NVIDIA H100 SXM\n")
    code, _, _ = run_cli(monkeypatch, capsys, "calibrate", "--gpu", "h100-sxm5-80gb", "--gemm", str(same),
                         "--out", str(tmp_path / "cal.yaml"))
    assert code == 0


def test_a_whole_number_beyond_int64_is_not_read_as_a_negative_one(tmp_path):
    """99999999999999999999999 layers wrapped to -9.2e18 ('must be a whole number >= 1'); it is too many."""
    from perfmodel.calibrate.parsers.runs_csv import read_runs_csv
    from perfmodel.validate import predict_runs

    runs = _runs_row(tmp_path, n_layers="99999999999999999999999", tokens_per_s_per_gpu=None)
    df = read_runs_csv(runs)
    assert float(df["n_layers"].iloc[0]) > 9e22
    pred = predict_runs(df)
    assert pred["status"].iloc[0] == "invalid" and "n_layers: must be at most" in pred["reason"].iloc[0]


def test_a_json_file_given_as_a_csv_and_a_repeated_run_id_are_said(tmp_path, monkeypatch, capsys):
    """A trace passed as --runs read as 'csv row: expected 1 cells, got 2'; a pasted run row counted twice
    without a word."""
    trace = tmp_path / "trace.json"
    trace.write_text('{"traceEvents": [], "deviceProperties": []}\n')
    code, _, err = run_cli(monkeypatch, capsys, "validate", str(trace), "--out", str(tmp_path / "p.csv"))
    assert code == 2 and "JSON" in err and err.count("\n") == 1
    runs = _runs_row(tmp_path)
    text = runs.read_text().splitlines()
    runs.write_text("\n".join(text + [text[1]]) + "\n")
    code, _, err = run_cli(monkeypatch, capsys, "validate", str(runs), "--out", str(tmp_path / "p.csv"))
    assert code == 0 and "'r-001' (lines 2, 3)" in err


def test_sequence_parallelism_needs_tp_to_divide_the_sequence():
    """Megatron's sequence-parallel scatter asserts the sequence divides by tp: at 4,098 tokens the search
    recommended (and emitted) tp 4 with --sequence-parallel, which fails at its first forward."""
    import perfmodel as pm

    cluster = pm.ClusterSpec.build(pm.load_gpu("h100-sxm5-80gb"), 128)
    odd = pm.search("llama3-70b", cluster, pm.JobSpec(global_batch=128, seq_len=4098), top=200)
    on = odd[(odd["sp"].astype(bool)) & (odd["tp"] > 1)]
    assert len(odd) and ((4098 // odd.loc[on.index, "cp"]) % on["tp"] == 0).all()
    even = pm.search("llama3-70b", cluster, pm.JobSpec(global_batch=128, seq_len=4096), top=200)
    assert (even["sp"].astype(bool) & (even["tp"] == 4) & (even["cp"] == 1)).any()  # 4,096 tokens keep it
    est = pm.estimate("llama3-70b", cluster, pm.ParallelSpec(tp=4, pp=4, dp=8, vpp=10, sp=True),
                      pm.JobSpec(global_batch=128, seq_len=4098))
    assert any("seq_len / cp" in n for n in est.notes)


def test_a_gpu_range_says_which_counts_hold_no_feasible_configuration(monkeypatch, capsys):
    """48 and 96 GPUs hold no valid Llama-3 8B layout at global batch 256: they vanished from the front."""
    args = ["recommend", "--model", "llama3-8b", "--gpu", "h100-sxm5-80gb", "--gpus", "64", "--seq-len", "4096",
            "--global-batch", "256", "--gpus-range", "32,48,64,96,128"]
    code, out, _ = run_cli(monkeypatch, capsys, *args)
    assert code == 0 and "no feasible configuration at 48, 96 GPUs" in out
    code, out, _ = run_cli(monkeypatch, capsys, *args, "--json")
    doc = json.loads(out)
    assert doc["gpu_counts_without_feasible"] == [48, 96] and {r["n_gpus"] for r in doc["pareto"]} == {32, 64, 128}


def test_why_lines_show_no_difference_that_prints_as_zero():
    from perfmodel.search.explain import _delta_text
    from perfmodel.step import TIME_PARTS

    a = pd.Series({k: 1.0 for k in TIME_PARTS})
    b = a.copy()
    b["compute_s"], b["bubble_s"], b["recompute_s"] = 1.395, 1.0002, 1.0004
    text = _delta_text(a, b)
    assert text == "compute -0.395 s"
    assert _delta_text(a, a) == "no difference that rounds to 1 ms"


def test_a_part_filled_nvlink_domain_is_said(monkeypatch, capsys):
    """A review (2026-12-02): 512 GB200s (7 NVL72 racks and 8 GPUs of an eighth) ran at half the tokens/s/GPU of
    504 or 576 with no note: the groups reaching into the part-filled rack cross it through its 8 GPUs' NICs
    (the documented placement, ``costs.comm.group_layout``). Now said, and only where a domain is part-filled."""
    import perfmodel as pm
    from perfmodel.notes import partial_domain_note

    def note(gpu, n, gpn=None):
        return partial_domain_note(pm.ClusterSpec.build(pm.load_gpu(gpu), n, gpn) if gpn else
                                   pm.ClusterSpec.build(pm.load_gpu(gpu), n))

    said = note("gb200", 512)
    assert said and "7 NVLink domains of 72 and 8 GPUs" in said and "504 or 576" in said
    assert note("gb200", 576) is None and note("gb200", 64) is None  # whole racks, or within one
    assert "1 NVLink domain of 8 and 4 GPUs" in note("h100-sxm5-80gb", 12, 8)
    assert note("h100-sxm5-80gb", 512, 8) is None
    code, out, _ = run_cli(monkeypatch, capsys, "estimate", "--model", "llama3-8b", "--gpu", "gb200", "--gpus", "512",
                           "--seq-len", "2048", "--global-batch", "1024", "--tp", "2", "--json")
    assert code == 0 and any("NVLink domains of 72" in n for n in json.loads(out)["notes"])


def test_review_2026_12_02_bad_inputs(monkeypatch, capsys, tmp_path):
    """A CLI review (2026-12-02): --dp 0 beside a DeepSpeed config crashed with a ZeroDivisionError traceback
    (exit 1); a --dp that breaks tp*pp*dp*cp = gpus was blamed on the config's batch keys; an HF config of an
    unknown model_type without hidden_act was costed as a plain GELU MLP, a guess; a runs row with dp 0 printed
    numpy warnings on stderr."""
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({"train_batch_size": 256, "bf16": {"enabled": True}}))
    base = ["estimate", "--model", "llama3-8b", "--gpu", "h100-sxm5-80gb", "--gpus", "64", "--global-batch", "256",
            "--deepspeed-config", str(ds)]
    code, _, err = run_cli(monkeypatch, capsys, *base, "--dp", "0")
    assert code == 2 and err.strip().splitlines() == ["error: dp: must be a positive integer (got 0)"]
    code, _, err = run_cli(monkeypatch, capsys, *base, "--dp", "32")
    assert code == 2 and err.startswith("error: dp: tp*pp*dp*cp must equal gpus") and len(err.strip().splitlines()) == 1
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "foobar", "hidden_size": 4096, "intermediate_size": 14336,
                               "num_hidden_layers": 32, "num_attention_heads": 32, "vocab_size": 128256}))
    code, _, err = run_cli(monkeypatch, capsys, "estimate", "--model", str(cfg), "--gpu", "h100-sxm5-80gb",
                           "--gpus", "8", "--global-batch", "8")
    assert code == 2 and "model.hidden_act" in err and "foobar" in err
    rows = pd.read_csv(Path(__file__).resolve().parents[2] / "calibration" / "data" / "runs" / "calibration_runs.csv",
                       dtype=str, keep_default_na=False).head(3)
    rows.loc[0, "dp"] = "0"
    runs = tmp_path / "dp0.csv"
    rows.to_csv(runs, index=False)
    code, _, err = run_cli(monkeypatch, capsys, "validate", str(runs), "--out", str(tmp_path / "o.csv"))
    assert code == 0 and "RuntimeWarning" not in err
    assert pd.read_csv(tmp_path / "o.csv").status.iloc[0] == "invalid"


# ---- an API / what-if / report review (2026-12-02, second) ------------------------------------------
def test_whatif_refuses_an_empty_out_as_report_does(monkeypatch, capsys, tmp_path):
    """`whatif --out ''` wrote whatif.csv and .png into the current folder (Path('') is '.')."""
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli(monkeypatch, capsys, "whatif", "--model", "llama3-8b", "--gpu", "h100-sxm5-80gb",
                           "--gpus", "16", "--seq-len", "4096", "--global-batch", "64", "--vary", "gpus=8,16",
                           "--out", "")
    assert code == 2 and err.strip().splitlines() == ["error: out: must name a folder (got an empty value)"]
    assert not list(tmp_path.iterdir())


def test_cluster_build_rechecks_a_gpu_changed_with_model_copy():
    """model_copy skips pydantic's checks: an NVLink domain of 0 GPUs divided by zero inside build, and a
    latency of 1e12 us costed a 3,000,000 s step; both are InputErrors naming the field."""
    import perfmodel as pm
    from perfmodel.errors import InputError

    gpu = pm.load_gpu("h100-sxm5-80gb")
    for key in ("nvlink_domain_gpus", "default_gpus_per_node"):
        with pytest.raises(InputError, match=f"gpu.{key}"):
            pm.ClusterSpec.build(gpu.model_copy(update={key: 0}), 16)
    with pytest.raises(InputError, match="scale_out_latency_us: must be at most"):
        pm.ClusterSpec.build(gpu, 16, scale_out_latency_us=1e12)
    assert pm.ClusterSpec.build(gpu, 16, scale_out_latency_us=1e6).scale_out_latency_us == 1e6


@pytest.mark.parametrize("call,field", [
    (lambda pm, m, c, j: pm.whatif(m, c, j, {"gpus": [8, 16]}, gpu_precision="yes"), "gpu_precision"),
    (lambda pm, m, c, j: pm.whatif(m, c, j, {"gpus": [8, 16]}, gpu_precision=1), "gpu_precision"),
    (lambda pm, m, c, j: pm.whatif(m, c, j, {"zeropp_on": [1]}), "sweep.zeropp_on: values must be true or false"),
    (lambda pm, m, c, j: pm.whatif(m, c, j, {"gpus": {8: 1}}), "sweep.gpus: must be a list of values, not a mapping"),
    (lambda pm, m, c, j: pm.whatif(m, c, j, {"gpus": [8, 8]}), "sweep.gpus: lists 8 more than once"),
    (lambda pm, m, c, j: pm.whatif(m, c, j, {"gpu": ["h100-sxm5-80gb", "h100-sxm5-80gb"]}), "sweep.gpu: lists"),
    (lambda pm, m, c, j: pm.search(m, c, j, top=2, progress="yes"), "progress"),
    (lambda pm, m, c, j: pm.search(m, c, j, top=2, zeropp=1), "zeropp"),
])
def test_api_switches_and_sweeps_take_what_they_say(call, field):
    """The API read 'yes' and 1 as switches on, a dict as the list of its keys and a repeated value as two
    identical rows, where the CLI refuses each."""
    import perfmodel as pm
    from perfmodel.errors import InputError

    m, c = pm.load_model("llama3-8b"), pm.ClusterSpec.build(pm.load_gpu("h100-sxm5-80gb"), 16)
    j = pm.JobSpec(global_batch=64, seq_len=4096)
    with pytest.raises(InputError, match=field):
        call(pm, m, c, j)


def test_offload_fraction_is_a_number_not_text():
    from pydantic import ValidationError

    import perfmodel as pm

    with pytest.raises(ValidationError, match="offload_fraction"):
        pm.ParallelSpec(offload_fraction="0.5")
    assert pm.ParallelSpec(offload_fraction=0.5).offload_fraction == 0.5


def test_repeated_gpu_counts_are_refused_and_whatif_names_its_vary_option(monkeypatch, capsys, tmp_path):
    """`--scaling-gpus 8,8` was merged silently; `whatif --vary gpus=0,8` said `sweep.gpus` (the API's name)
    where `--vary gpus=1.5` said `vary.gpus`; a validator's '(got ...)' was printed twice."""
    base = ["--model", "llama3-8b", "--gpu", "h100-sxm5-80gb", "--gpus", "16", "--global-batch", "64"]
    code, _, err = run_cli(monkeypatch, capsys, "report", *base, "--scaling-gpus", "8,8", "--out", str(tmp_path / "r"))
    assert code == 2 and err.strip().splitlines() == ["error: scaling_gpus: lists 8 more than once"]
    code, _, err = run_cli(monkeypatch, capsys, "whatif", *base, "--vary", "gpus=0,8")
    assert code == 2 and err.startswith("error: vary.gpus: ") and len(err.strip().splitlines()) == 1
    from perfmodel.errors import from_validation_error
    from pydantic import ValidationError

    import perfmodel as pm

    with pytest.raises(ValidationError) as exc:
        pm.ParallelSpec(tp="8")
    assert str(from_validation_error(exc.value)).count("(got ") == 1


def test_a_report_leaves_a_file_changed_since_the_earlier_report_wrote_it(monkeypatch, capsys, tmp_path):
    """A report removes the earlier report's files it does not write (runs_predicted.csv without --runs): one
    the user changed since is theirs now and stays, with a note; an unchanged one still goes."""
    import os

    base = ["report", "--model", "llama3-8b", "--gpu", "h100-sxm5-80gb", "--gpus", "16", "--global-batch", "64",
            "--out", str(tmp_path / "st")]
    code, _, err = run_cli(monkeypatch, capsys, *base, "--runs", str(RUNS))
    assert code == 0, err
    mine = tmp_path / "st" / "runs_predicted.csv"
    mine.write_text("my own notes\n")
    later = (tmp_path / "st" / "report.html").stat().st_mtime + 5
    os.utime(mine, (later, later))
    code, _, err = run_cli(monkeypatch, capsys, *base)
    assert code == 0 and "changed since the earlier report wrote it" in err
    assert mine.read_text() == "my own notes\n"
    assert not (tmp_path / "st" / "predicted_vs_measured.png").exists()


def test_a_node_of_part_boards_is_said_in_one_readable_sentence():
    import perfmodel as pm
    from perfmodel.errors import InputError

    gpu = pm.load_gpu("h100-sxm5-80gb").model_copy(update={"nvlink_domain_gpus": 3, "default_gpus_per_node": 6})
    with pytest.raises(InputError) as exc:
        pm.ClusterSpec.build(gpu, 16, 4)
    assert str(exc.value) == ("gpus_per_node: must be a multiple of the h100-sxm5-80gb's 3-GPU NVLink board when "
                              "larger than one board: a node holds whole boards (got 4)")


def test_a_runner_up_on_another_gpu_count_at_equal_speed_is_said_as_such():
    """A review (2026-12-02): with --gpus-range, 128 vs 64 GPUs at equal tokens/s/GPU printed 'time no
    difference that rounds to 1 ms' beside step times of 1.968 and 3.935 s, and did not say the tie-break chose."""
    import perfmodel as pm
    from perfmodel.search.engine import run_search
    from perfmodel.search.explain import explain

    model, job = pm.load_model("llama3-8b"), pm.JobSpec(global_batch=256, seq_len=8192, framework="torchtitan")
    cluster = pm.ClusterSpec.build(pm.load_gpu("h200-sxm-141gb"), 128, 8)
    res = run_search(model, cluster, job, gpu_counts=[8, 16, 32, 64, 128], top=5)
    win, run = res.candidates.iloc[0], res.candidates.iloc[1]
    line = next(ln for ln in explain(res, 8) if ln.startswith("winner vs runner-up"))
    assert win["n_gpus"] != run["n_gpus"]
    assert f"step {win['iteration_time_s']:.3f} s vs {run['iteration_time_s']:.3f} s" in line
    assert "rounds to 1 ms" not in line
    if abs(win["tokens_per_s_per_gpu"] / run["tokens_per_s_per_gpu"] - 1.0) < 0.0005:
        assert "equal within 0.05%; equals are ranked by less activation offloading" in line
