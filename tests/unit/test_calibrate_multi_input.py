"""perfmodel calibrate given several inputs, or refining a profile: what one input fits does not undo
what another (or the base profile) fitted, each input is named in the provenance, and the same data is
not counted twice (findings of a multi-input audit)."""
from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml

from cli_helpers import run_cli

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "calibration" / "data"
P5_1NODE = DATA / "collectives" / "traces" / "nccl" / "aws_p5_1node_h100_allreduce.txt"
XX_10NODES = DATA / "collectives" / "collectives" / "xxrjun_cluster01_H100_10nodes" / "nccl_N10_G8.log.txt"
GH_2NODES = DATA / "collectives" / "collectives" / "github_H100_2nodes_16gpu_allreduce.txt"
H200_GEMM = DATA / "kernels_h200" / "gemm_llama3-8b_tp1.csv"
MEGATRON_LOG = ROOT / "tests" / "fixtures" / "parsers" / "megatron_args_llama2_7b.log"


def _calibrate(monkeypatch, capsys, out: Path, *args: str) -> tuple[int, dict | None, str, str]:
    code, stdout, err = run_cli(monkeypatch, capsys, "calibrate", *args, "--out", str(out))
    return code, (yaml.safe_load(out.read_text()) if out.is_file() else None), stdout, err


def test_refining_with_multi_node_tables_keeps_the_fitted_nvlink_tier(tmp_path, monkeypatch, capsys):
    """A profile whose NVLink tier was fitted on a one-node table, refined with ten-node tables alone: the
    NVLink efficiency stays (was: reset to the fit's starting value 0.8, which the ten-node tables do not
    move, so the one-node table's error tripled and the order of the refinements chose the profile)."""
    gpu = ["--gpu", "h100-sxm5-80gb"]
    one = tmp_path / "one.yaml"
    code, first, _, err = _calibrate(monkeypatch, capsys, one, *gpu, "--nccl-tests", str(P5_1NODE))
    assert code == 0, err
    nvlink = first["gpus"]["h100-sxm5-80gb"]["nvlink_efficiency"]
    assert abs(nvlink - 0.8) > 0.05  # a fitted value, not the start
    code, refined, out, err = _calibrate(monkeypatch, capsys, tmp_path / "two.yaml", *gpu, "--calibration", str(one),
                                         "--nccl-tests", str(XX_10NODES))
    assert code == 0, err
    assert "no single-node table, so the NVLink tier is not refitted" in out
    own = refined["gpus"]["h100-sxm5-80gb"]
    assert own["nvlink_efficiency"] == nvlink
    assert own["intra_node_latency_us"] == first["gpus"]["h100-sxm5-80gb"]["intra_node_latency_us"]
    # the ten-node tables fit the scale-out tier, which the one-node table could not
    assert "scale_out_latency_us" not in first["gpus"]["h100-sxm5-80gb"] and own["scale_out_latency_us"] > 0
    # given together, the one-node table fits the tier and the ten-node ones the rest: the same NVLink value
    code, both, _, err = _calibrate(monkeypatch, capsys, tmp_path / "both.yaml", *gpu, "--nccl-tests", str(P5_1NODE),
                                    "--nccl-tests", str(XX_10NODES))
    assert code == 0 and abs(both["gpus"]["h100-sxm5-80gb"]["nvlink_efficiency"] - nvlink) < 1e-6, err


def test_multi_node_tables_alone_keep_the_nvlink_tier_the_starting_profile_costs(tmp_path, monkeypatch, capsys):
    """An audit: a 2-node all_reduce of 0.5-8 GiB alone (no single-node table, and no NVLink value in the
    shipped profile's H100 entry) refitted NVLink efficiency, which those sizes trade against the NIC's: it
    ended on its bound, nothing was applied and calibrate exited 1. The NVLink tier is now kept as the
    starting profile costs this GPU (profile-wide constant, catalog latency); the inter-node tier is fitted."""
    from perfmodel.calibration_profile import load_calibration
    from perfmodel.catalog import load_gpu

    constants, gpu, _ = load_calibration(None).for_network(load_gpu("h100-sxm5-80gb"), None)
    for i, log in enumerate((GH_2NODES, XX_10NODES)):
        code, prof, out, err = _calibrate(monkeypatch, capsys, tmp_path / f"p{i}.yaml", "--gpu", "h100-sxm5-80gb",
                                          "--nccl-tests", str(log))
        assert code == 0, err
        assert "no single-node table, so the NVLink tier is not refitted" in out
        own = prof["gpus"]["h100-sxm5-80gb"]
        assert own["intra_node_latency_us"] == gpu.intra_node_latency_us
        assert own.get("nvlink_efficiency", constants.nvlink_efficiency) == constants.nvlink_efficiency
        assert prof["constants"]["nvlink_efficiency"] == constants.nvlink_efficiency
        assert own["scale_out_latency_us"] > 0 and 0.0 < prof["constants"]["nic_efficiency"] <= 1.0


def test_a_gemm_csv_measured_on_another_gpu_is_refused(tmp_path, monkeypatch, capsys):
    """The kit's '# source: ... device=NVIDIA H200' line names the GPU, as a trace's deviceProperties do."""
    code, prof, _, err = _calibrate(monkeypatch, capsys, tmp_path / "b.yaml", "--gpu", "b200", "--gemm", str(H200_GEMM))
    assert code == 2 and prof is None
    assert err.strip() == (f"error: {H200_GEMM}:1: gpu: --gpu b200 (B200) is not the GPU this file was measured on, "
                           "'NVIDIA H200' (H200): give the --gpu it ran on")
    code, prof, _, err = _calibrate(monkeypatch, capsys, tmp_path / "h.yaml", "--gpu", "h200-sxm-141gb",
                                    "--gemm", str(H200_GEMM))
    assert code == 0 and "matmul_efficiency_max" in prof["gpus"]["h200-sxm-141gb"], err


def test_a_copy_of_an_input_is_refused_like_the_same_file(tmp_path, monkeypatch, capsys):
    copy = tmp_path / "copy.csv"
    shutil.copy(H200_GEMM, copy)
    code, prof, _, err = _calibrate(monkeypatch, capsys, tmp_path / "p.yaml", "--gpu", "h200-sxm-141gb",
                                    "--gemm", str(H200_GEMM), "--gemm", str(copy))
    assert code == 2 and prof is None
    assert err.strip() == (f"error: {copy}: gemm: has the same content as {H200_GEMM}: its points would count "
                           "twice in the fit; give each file once")
    copy.write_text(H200_GEMM.read_text().replace("gemm_sweep.py", "gemm_sweep.py (copied)", 1))  # other bytes
    code, prof, _, err = _calibrate(monkeypatch, capsys, tmp_path / "p.yaml", "--gpu", "h200-sxm-141gb",
                                    "--gemm", str(H200_GEMM), "--gemm", str(copy))
    assert code == 0, err  # only the comment differs: two files (the user's call), one fit


def test_runs_without_a_scorable_row_are_still_in_the_provenance(tmp_path, monkeypatch, capsys):
    runs = pd.read_csv(DATA / "runs" / "calibration_runs.csv").head(5)
    measured = ["iteration_time_s", "tokens_per_s_per_gpu", "tflops_per_gpu", "mfu", "hfu"]
    path = tmp_path / "nomeas.csv"
    runs.drop(columns=measured).to_csv(path, index=False)
    code, prof, _, err = _calibrate(monkeypatch, capsys, tmp_path / "p.yaml", "--gpu", "h200-sxm-141gb",
                                    "--gemm", str(H200_GEMM), "--runs", str(path))
    assert code == 0 and "no runs parameter fitted" in err
    entry = [i for i in prof["provenance"]["inputs"] if i["kind"] == "runs"]
    assert len(entry) == 1 and entry[0]["points"] == 0 and entry[0]["path"].endswith("nomeas.csv")


def test_a_stack_efficiency_the_logs_replace_is_not_recorded_as_the_runs_fit(tmp_path, monkeypatch, capsys):
    runs = pd.read_csv(DATA / "runs" / "calibration_runs.csv")
    path = tmp_path / "sc21.csv"
    runs[runs.run_id.str.match(r"sc21-t[12]-")].to_csv(path, index=False)
    code, prof, _, err = _calibrate(monkeypatch, capsys, tmp_path / "p.yaml", "--gpu", "h100-sxm5-80gb",
                                    "--runs", str(path), "--log", str(MEGATRON_LOG))
    assert code == 0, err
    prov, value = prof["provenance"], prof["frameworks"]["megatron-lm"]["kernel_efficiency"]
    assert prov["logs_fit_params"] == {"megatron-lm.kernel_efficiency": value}
    assert "megatron-lm.kernel_efficiency" not in prov["runs_fit_params"]
    assert prov["runs_fit_params_replaced_by_logs"]["megatron-lm.kernel_efficiency"] != value


def test_an_input_outside_the_working_directory_is_recorded_by_its_absolute_path(tmp_path, monkeypatch, capsys):
    sub = tmp_path / "sub"
    sub.mkdir()
    shutil.copy(H200_GEMM, tmp_path / "g.csv")
    monkeypatch.chdir(sub)
    code, prof, _, err = _calibrate(monkeypatch, capsys, sub / "p.yaml", "--gpu", "h200-sxm-141gb",
                                    "--gemm", "../g.csv")
    assert code == 0, err
    assert prof["provenance"]["inputs"][0]["path"] == str((tmp_path / "g.csv").resolve())


def test_a_one_node_table_the_fit_drops_does_not_release_the_held_tier(tmp_path, monkeypatch, capsys):
    """A one-node table whose sizes all lie below the fit's 1 MiB floor is no single-node measurement:
    the NVLink tier stays held (was: counted as one, and the tier went back to the fit's start, 0.8)."""
    gpu = ["--gpu", "h100-sxm5-80gb"]
    one = tmp_path / "one.yaml"
    assert _calibrate(monkeypatch, capsys, one, *gpu, "--nccl-tests", str(P5_1NODE))[0] == 0
    small = tmp_path / "small_1node.txt"
    prefix = "[1,0]<stdout>:"  # the file's OpenMPI rank prefix

    def size(line: str) -> int | None:
        cells = line.removeprefix(prefix).split()
        return int(cells[0]) if cells and cells[0].isdigit() else None

    kept = [line for line in P5_1NODE.read_text().splitlines() if size(line) is None or size(line) < 2**20]
    assert 15 <= sum(size(line) is not None for line in kept) < 25  # the rows below 1 MiB, no more
    small.write_text("\n".join(kept) + "\n")
    code, refined, _, err = _calibrate(monkeypatch, capsys, tmp_path / "two.yaml", *gpu, "--calibration", str(one),
                                       "--nccl-tests", str(XX_10NODES), "--nccl-tests", str(small))
    assert code == 0, err
    nvlink = yaml.safe_load(one.read_text())["gpus"]["h100-sxm5-80gb"]["nvlink_efficiency"]
    assert refined["gpus"]["h100-sxm5-80gb"]["nvlink_efficiency"] == nvlink


def test_the_held_tier_stays_out_of_a_collectives_own_values(tmp_path, monkeypatch, capsys):
    """The held NVLink tier is the shared collectives' (all_reduce ...): a refinement with only an alltoall
    table fits that collective's own values on the default fabric, which every GPU reads, and must not copy
    the H100's held tier into them (was: all_to_all.nvlink_efficiency and .intra_node_latency_us = the
    H100's 0.977 and 37.5 us, for every GPU's all-to-all)."""
    gpu = ["--gpu", "h100-sxm5-80gb"]
    one = tmp_path / "one.yaml"
    assert _calibrate(monkeypatch, capsys, one, *gpu, "--nccl-tests", str(P5_1NODE))[0] == 0
    lines = XX_10NODES.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if "Collective test starting: alltoall_perf" in line)
    end = next(i for i, line in enumerate(lines) if "Collective test starting: sendrecv_perf" in line)
    a2a = tmp_path / "a2a_10nodes.txt"
    a2a.write_text("\n".join(lines[start:end]) + "\n")
    code, refined, _, err = _calibrate(monkeypatch, capsys, tmp_path / "two.yaml", *gpu, "--calibration", str(one),
                                       "--nccl-tests", str(a2a))
    assert code == 0, err
    held = yaml.safe_load(one.read_text())["gpus"]["h100-sxm5-80gb"]
    shared = refined["networks"].get("", {})
    assert any(k.startswith("all_to_all.") for k in shared)  # the op's own values were fitted ...
    for key in ("nvlink_efficiency", "intra_node_latency_us"):  # ... but the held tier is not among them
        assert shared.get(f"all_to_all.{key}") != held[key]


def test_a_bad_gemm_file_beside_a_good_one_is_left_out_not_averaged_in(tmp_path, monkeypatch, capsys):
    """Each GEMM file is checked by its own fit first: one whose fit ends on its bound (times 1000x too
    slow) is said and left out, and the good file's fit stands (was: one joint fit of both, 0.605, silent)."""
    slow = tmp_path / "slow.csv"
    lines = H200_GEMM.read_text().splitlines()
    rows = [",".join([*c[:4], f"{float(c[4]) * 1000:.9e}", *c[5:]]) for c in (line.split(",") for line in lines[2:])]
    slow.write_text("\n".join(lines[:2] + rows) + "\n")
    args = ["--gpu", "h200-sxm-141gb", "--gemm", str(H200_GEMM)]
    code, alone, _, _ = _calibrate(monkeypatch, capsys, tmp_path / "a.yaml", *args)
    code, both, out, err = _calibrate(monkeypatch, capsys, tmp_path / "b.yaml", *args, "--gemm", str(slow))
    assert code == 0 and err.count(f"warning: gemm {slow}:") == 2, err
    assert both["gpus"]["h200-sxm-141gb"] == alone["gpus"]["h200-sxm-141gb"]
    entry = {i["path"]: i for i in both["provenance"]["inputs"]}
    assert entry[str(slow)]["points"] == 0 and "matmul_efficiency_max" not in entry[str(slow)]


def test_an_fp32_only_gemm_file_is_refused_beside_another(tmp_path, monkeypatch, capsys):
    fp32 = tmp_path / "fp32.csv"
    fp32.write_text("m,n,k,dtype,time_s\n4096,4096,4096,fp32,0.005\n")
    code, prof, _, err = _calibrate(monkeypatch, capsys, tmp_path / "p.yaml", "--gpu", "h200-sxm-141gb",
                                    "--gemm", str(H200_GEMM), "--gemm", str(fp32))
    assert code == 2 and prof is None and err.startswith(f"error: {fp32}: dtype: no compute-bound bf16/fp16")


def test_two_empty_files_are_told_empty_not_duplicates(tmp_path, monkeypatch, capsys):
    e1, e2 = tmp_path / "e1.csv", tmp_path / "e2.csv"
    e1.write_text("")
    e2.write_text("")
    code, _, _, err = _calibrate(monkeypatch, capsys, tmp_path / "p.yaml", "--gpu", "h200-sxm-141gb",
                                 "--gemm", str(e1), "--gemm", str(e2))
    assert code == 2 and "same content" not in err and "empty" in err


H200_LAYER = DATA / "kernels_h200" / "layer_llama3-8b_s8192.json"


def test_a_trace_with_recorded_shapes_gives_its_matmuls_to_the_gemm_estimate(tmp_path, monkeypatch, capsys):
    """torch.profiler with record_shapes=True writes each aten::mm's Input Dims; its kernels carry the op's
    External id: the trace's matmuls are GEMM rows (the real H200 layer trace: 36, 12 per step), and calibrate
    estimates the best-shape rate from them as from a GEMM sweep (was: a trace fitted nothing)."""
    from perfmodel.calibrate.parsers import parse_kineto_trace

    g = parse_kineto_trace(H200_LAYER).gemm_ops
    assert len(g) == 36 and set(g.dtype) == {"bf16"} and (g.batch == 1).all()
    h, ffn, q, kv, d, tokens = 4096, 14336, 32, 8, 128, 8192
    fwd = [(tokens, (q + 2 * kv) * d, h), (tokens, h, q * d), (tokens, 2 * ffn, h), (tokens, h, ffn)]
    # forward y = x W^T, data gradient, weight gradient: each a GEMM of the same FLOPs, in some layout
    flops = sorted(2 * m * n * k for m, n, k in fwd for _ in range(3))
    per_step = sorted((2 * g.m * g.n * g.k).to_numpy())[::3]
    assert per_step == flops
    code, prof, out, err = _calibrate(monkeypatch, capsys, tmp_path / "p.yaml", "--gpu", "h200-sxm-141gb",
                                      "--trace", str(H200_LAYER))
    assert code == 0, err
    eff = prof["gpus"]["h200-sxm-141gb"]["matmul_efficiency_max"]
    assert 0.75 < eff < 0.9 and "36 matmuls with recorded shapes (11 distinct)" in out
    entry = prof["provenance"]["inputs"][0]  # one row per distinct shape, the median over the three steps
    assert entry["kind"] == "trace" and entry["points"] == 11 and entry["matmul_efficiency_max"] == eff


def test_a_malformed_recorded_shape_is_one_error_naming_the_event(tmp_path):
    import json

    from perfmodel.calibrate.parsers import parse_kineto_trace
    from perfmodel.errors import InputError

    doc = json.loads(H200_LAYER.read_text())
    i = next(i for i, e in enumerate(doc["traceEvents"])
             if e.get("cat") == "cpu_op" and e.get("name") == "aten::mm")
    doc["traceEvents"][i]["args"]["Input Dims"][1] = [4096, "x"]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    with pytest.raises(InputError, match=rf"traceEvents\[{i}\]\.args\.Input Dims\[1\]: must be 2 whole sizes"):
        parse_kineto_trace(bad)
    doc["traceEvents"][i]["args"]["Input Dims"][1] = [999, 14336]  # k does not match the first operand's
    bad.write_text(json.dumps(doc))
    with pytest.raises(InputError, match=r"do not multiply"):
        parse_kineto_trace(bad)


def test_a_trace_matmul_faster_than_the_gpu_names_the_trace_and_its_event(tmp_path, monkeypatch, capsys):
    import json

    bf = "c10::BFloat16"
    events = [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0.0, "dur": 5.0,
               "args": {"External id": 7, "Input Dims": [[8192, 8192], [8192, 8192]], "Input type": [bf, bf]}},
              {"ph": "X", "cat": "kernel", "name": "nvjet_sm90_tst_256x128", "ts": 10.0, "dur": 0.5,
               "args": {"External id": 7}}]
    trace = tmp_path / "fast.json"
    trace.write_text(json.dumps({"traceEvents": events}, indent=1))
    code, prof, _, err = _calibrate(monkeypatch, capsys, tmp_path / "p.yaml", "--gpu", "h200-sxm-141gb",
                                    "--trace", str(trace))
    assert code == 2 and prof is None and "Traceback" not in err
    assert err.startswith(f"error: {trace}:3 (aten::mm, timed by its kernels): time_s: implies ")


def test_one_impossible_call_among_a_shapes_steps_is_refused_at_its_event(tmp_path, monkeypatch, capsys):
    """Each recorded call is checked before the steps' calls of a shape are merged: a 0.001 us kernel in one
    of three steps is refused at its own op event (was: hidden by the median, exit 0)."""
    import json

    doc = json.loads(H200_LAYER.read_text())
    ops = [e for e in doc["traceEvents"] if e.get("cat") == "cpu_op" and e.get("name") == "aten::mm"
           and "Input Dims" in e.get("args", {})]
    target = ops[-1]["args"]["External id"]
    for e in doc["traceEvents"]:
        if e.get("cat") == "kernel" and e.get("args", {}).get("External id") == target:
            e["dur"] = 0.001
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc, indent=1))
    code, prof, _, err = _calibrate(monkeypatch, capsys, tmp_path / "p.yaml", "--gpu", "h200-sxm-141gb",
                                    "--trace", str(bad))
    assert code == 2 and prof is None and "(aten::mm, timed by its kernels): time_s: implies" in err


def test_a_gzipped_copy_of_a_trace_is_the_same_data(tmp_path, monkeypatch, capsys):
    import gzip

    gz = tmp_path / "layer.json.gz"
    gz.write_bytes(gzip.compress(H200_LAYER.read_bytes()))
    code, prof, _, err = _calibrate(monkeypatch, capsys, tmp_path / "p.yaml", "--gpu", "h200-sxm-141gb",
                                    "--trace", str(gz), "--trace", str(H200_LAYER))
    assert code == 2 and prof is None and f"has the same content as {gz}" in err


def test_a_runs_fit_says_when_a_kernel_efficiency_ends_on_its_top(tmp_path, monkeypatch, capsys):
    """An audit: OneFlow's runs fit its kernel efficiency to the top of its range (1.15) and calibrate wrote it
    without a word (estimate notes it; the GEMM and log fits report a bound): the runs fit now says so. Since
    the fixed 50 ms a step is gone (2026-12-02) all 13 OneFlow runs fit 1.135, just below the top; the five the
    model finds slowest (a single V100, DP 32 across 4 nodes, the 4-stage pipeline, TP 8 with DP 2 and 4)
    still end on it."""
    lines = (DATA / "runs" / "calibration_runs.csv").read_text().splitlines()
    runs = tmp_path / "of.csv"
    slowest = ("dlperf-of-004,", "dlperf-of-005,", "dlperf-of-013,", "dlperf-of-014,", "dlperf-of-015,")
    runs.write_text("\n".join([lines[0], *[ln for ln in lines[1:] if ln.startswith(slowest)]]) + "\n")
    code, prof, out, err = _calibrate(monkeypatch, capsys, tmp_path / "of.yaml", "--gpu", "v100-sxm2-16gb",
                                      "--runs", str(runs))
    assert code == 0, err
    value = prof["frameworks"]["oneflow"]["kernel_efficiency"]
    assert value >= 0.99 * 1.15
    assert f"runs: note: oneflow's fitted kernel efficiency {value:.3f} is at the top of its range" in out
