"""``perfmodel calibrate`` on what a review found mishandled: Microsoft's Megatron-DeepSpeed log format,
nccl-tests Rank lines without a Group field and the -C / -S / per-iteration columns, collective fits on
their bounds or against another GPU, the provenance a profile keeps (its own fits, its base by name, the
cluster it assumed), the node size read from the Rank lines, per-GPU values of a fit without --network,
and the points each input's fit used. Fixtures: tests/fixtures/calibrate_review/README.md."""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
import yaml

from perfmodel.calibrate.parsers import parse_nccl_tests, parse_nccl_tests_all, parse_training_log
from perfmodel.calibration_profile import DEFAULT_PROFILE_PATH, load_calibration
from perfmodel.catalog import load_gpu
from perfmodel.errors import InputError

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures" / "calibrate_review"
COLL = ROOT / "calibration" / "data" / "collectives"
P5_1NODE = COLL / "traces" / "nccl" / "aws_p5_1node_h100_allreduce.txt"
POLARIS = COLL / "collectives" / "alcf_polaris_A100_slingshot"
POLARIS_N2 = POLARIS / "nccl_2_21__n2.g4.2024-04-29-19-08-14__all_reduce_output.dat.5.txt"
POLARIS_N8 = POLARIS / "nccl_2_21__n8.g4.2024-04-29-21-23-48__all_reduce_output.dat.5.txt"
from test_calibrate_fixes import run_cli  # noqa: E402  (the same CLI runner)

needs_shipped = pytest.mark.skipif(not (P5_1NODE.is_file() and POLARIS_N8.is_file()),
                                   reason="shipped nccl-tests logs missing")


def calibrate(monkeypatch, capsys, tmp_path, *args: str, gpu: str = "h100-sxm5-80gb", name: str = "p.yaml"):
    """(exit code, stderr, the written profile or None)."""
    out = tmp_path / name
    code, _, err = run_cli(monkeypatch, capsys, "calibrate", "--gpu", gpu, *args, "--out", str(out))
    return code, err, (yaml.safe_load(out.read_text()) if out.exists() else None)


def comm_s(monkeypatch, capsys, gpu: str, size: int, gpus: int = 8, gpn: int = 8, profile: Path | None = None) -> float:
    code, out, err = run_cli(monkeypatch, capsys, "comm", "--op", "all_reduce", "--bytes", str(size), "--gpus",
                             str(gpus), "--gpus-per-node", str(gpn), "--gpu", gpu, "--json",
                             *(["--calibration", str(profile)] if profile else []))
    assert code == 0, err
    return float(json.loads(out)["time_s"])


# ------------------------------------------------------------------ 1. Microsoft's Megatron-DeepSpeed logs
def test_microsoft_megatron_deepspeed_lines_are_that_stack():
    """``samples per second | tokens per gpu per second (tgs) | TFLOPs`` (microsoft/Megatron-DeepSpeed
    training_log) was read as a Megatron-LM line, so calibrate fitted Megatron-LM's kernel efficiency."""
    log = parse_training_log(FIX / "mds_microsoft.log")
    assert set(log["framework"]) == {"megatron-deepspeed"} and len(log) == 6
    row = log[log["iteration"] == 2].iloc[0]
    assert row["iteration_time_s"] == pytest.approx(5.902)
    assert row["tokens_per_s_per_gpu"] == pytest.approx(11104.033)
    assert row["samples_per_s"] == pytest.approx(21.688) and row["tflop_per_s_per_gpu"] == pytest.approx(150.0)


def test_an_arguments_block_saying_deepspeed_is_megatron_deepspeed(tmp_path):
    """Whatever its iteration lines look like (here Megatron-LM's), a block with ``deepspeed ... True`` is
    Megatron-DeepSpeed's."""
    from perfmodel.calibrate.command import _log_point

    text = re.sub(r" samples per second: .*\|$", "", (FIX / "mds_microsoft.log").read_text(), flags=re.M)
    path = tmp_path / "mlm_lines.log"
    path.write_text(text)
    log = parse_training_log(path)
    assert set(log["framework"]) == {"megatron-lm"}  # the lines alone say Megatron-LM
    point = _log_point(path, log, load_gpu("a100-sxm4-80gb"), None, None, None)
    assert point.framework == "megatron-deepspeed"
    path.write_text(text.replace("  deepspeed ....................................... True",
                                 "  deepspeed ....................................... False"))
    assert _log_point(path, parse_training_log(path), load_gpu("a100-sxm4-80gb"), None, None, None).framework \
        == "megatron-lm"


# ------------------------------------------------------------------ 2. Rank lines without a Group field
def test_rank_lines_without_group_count_ranks_and_hosts():
    """``#   Rank %2d Pid %6d on %10s device %2d [0x%02x] %s`` (nccl-tests before the Group field)."""
    polaris = parse_nccl_tests(FIX / "old_rank_all_reduce_polaris_n2.txt")
    assert (polaris.n_ranks, polaris.n_nodes, polaris.n_ranks_source) == (8, 2, "rank_lines")
    assert polaris.device_name == "NVIDIA A100-SXM4-40GB"
    old = parse_nccl_tests(FIX / "old128_all_reduce_perf.txt")
    assert (old.n_ranks, old.n_nodes, old.device_name) == (128, 16, "A100-SXM4-40GB")


def test_a_128_rank_file_of_the_older_layout_is_fitted(tmp_path, monkeypatch, capsys):
    """It was refused: without its Rank lines the rank count cannot be read from busbw / algbw."""
    code, err, prof = calibrate(monkeypatch, capsys, tmp_path, "--nccl-tests", str(FIX / "old128_all_reduce_perf.txt"),
                                gpu="a100-sxm4-40gb")
    assert code == 0, err
    assert prof["provenance"]["inputs"][0]["points"] == 11


# ------------------------------------------------------------------ 3. bounds and the GPU the file names
@needs_shipped
def test_an_nccl_fit_on_its_bound_is_reported_and_not_applied(tmp_path, monkeypatch, capsys):
    """The p5 H100 node read as A100s: NVLink efficiency 1.2, the top of its range, was written silently.
    The latency fitted with it compensates for it: none of that fit is applied (a 2 x 4-GPU run read as one
    8-GPU node pinned the efficiency at 0.5 and wrote a 3.7 ms latency)."""
    code, err, prof = calibrate(monkeypatch, capsys, tmp_path, "--nccl-tests", str(P5_1NODE), gpu="a100-sxm4-80gb")
    assert code == 1 and prof is None, err
    assert "nvlink_efficiency = 1.2" in err and "not applied" in err
    assert "nor the values of its fit stage and those fitted on top of it: intra_node_latency_us" in err
    assert err.rstrip().splitlines()[-1].startswith("error: nothing was fitted from")


def test_refused_bounds_are_the_ends_the_data_pushed_against():
    from perfmodel.calibrate.fit_collectives import BOUNDS, refused_bound

    assert refused_bound("nvlink_efficiency", 1.2) == "upper" and refused_bound("nic_efficiency", 0.01) == "lower"
    assert refused_bound("all_to_all.nic_efficiency", 1.0) == "upper"
    assert refused_bound("scale_out_latency_us", BOUNDS["scale_out_latency_us"][1]) == "upper"
    # a latency term at its floor is switched off, a congestion at its ceiling is none: results, applied
    assert refused_bound("ring_step_latency_us", 1e-3) is None and refused_bound("latency_log2_coeff", 1e-3) is None
    assert refused_bound("congestion_nodes", 1e6) is None and refused_bound("congestion_nodes", math.inf) is None
    assert refused_bound("ll_bandwidth_ratio", 0.0) is None and refused_bound("ring_inter_node", 1.0) is None
    assert refused_bound("nvlink_efficiency", 0.97) is None


@pytest.mark.parametrize("gpu, device", [
    ("a100-sxm4-80gb", "NVIDIA A100-SXM4-80GB"), ("a100-sxm4-40gb", "NVIDIA A100-SXM4-80GB"),
    ("a100-sxm4-40gb", "A100-SXM4-40GB"), ("h100-sxm5-80gb", "NVIDIA H100 80GB HBM3"),
    ("h100-sxm5-96gb", "NVIDIA H100 NVL"), ("v100-sxm2-16gb", "Tesla V100-SXM2-32GB"), ("gb200", "NVIDIA GB200"),
    ("h100-sxm5-80gb", None), ("h100-sxm5-80gb", ""), ("h100-sxm5-80gb", "NVIDIA GH200 480GB"),
    ("h200-sxm-141gb", "NVIDIA GH200 144G HBM3e"),
])
def test_a_device_of_the_same_family_or_unnamed_is_accepted(gpu, device):
    from perfmodel.calibrate.gpu_family import check_device_matches

    check_device_matches(gpu, device, "x.txt")


@pytest.mark.parametrize("gpu, device", [
    ("a100-sxm4-80gb", "NVIDIA H100 80GB HBM3"), ("h100-sxm5-80gb", "NVIDIA H800"), ("gb200", "NVIDIA B200"),
    ("h200-sxm-141gb", "NVIDIA H100 80GB HBM3"), ("v100-sxm2-16gb", "NVIDIA A100-SXM4-40GB"),
    # a device of no catalog family under a catalog GPU: rccl-tests' Rank lines of an MI300X, an L40S, an H20
    ("h100-sxm5-80gb", "AMD Instinct MI300X"), ("h100-sxm5-80gb", "NVIDIA L40S"), ("h100-sxm5-80gb", "NVIDIA H20"),
    ("h100-sxm5-80gb", "Some Accelerator"), ("a100-sxm4-80gb", "NVIDIA GH200 480GB"),
])
def test_a_device_of_another_family_is_refused(gpu, device):
    from perfmodel.calibrate.gpu_family import check_device_matches, gpu_families

    with pytest.raises(InputError, match="gpu") as exc:
        check_device_matches(gpu, device, "x.txt")
    assert device in str(exc.value) and "--gpu" in str(exc.value) and exc.value.where == "x.txt"
    assert gpu_families("NVIDIA GB200") == {"gb200"} and gpu_families("h100-sxm5-80gb") == {"h100"}


def test_calibrate_refuses_a_file_measured_on_another_gpu(tmp_path, monkeypatch, capsys):
    code, err, prof = calibrate(monkeypatch, capsys, tmp_path, "--nccl-tests", str(FIX / "ts_all_reduce.txt"),
                                gpu="a100-sxm4-80gb")
    assert code == 2 and prof is None and err.count("error:") == 1 and "Traceback" not in err
    assert "--gpu a100-sxm4-80gb" in err and "ts_all_reduce.txt" in err and "NVIDIA H100 80GB HBM3" in err
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps({"deviceProperties": [{"name": "NVIDIA H100 80GB HBM3"}], "traceEvents": [
        {"ph": "X", "cat": "kernel", "name": "ampere_bf16_s16816gemm_bf16_128x256_ldg8_f2f_stages_64x3_tn",
         "ts": 0, "dur": 10, "pid": 0, "tid": 7}]}))
    code, err, _ = calibrate(monkeypatch, capsys, tmp_path, "--trace", str(trace), gpu="a100-sxm4-80gb")
    assert code == 2 and "trace.json" in err and "NVIDIA H100 80GB HBM3" in err
    code, err, _ = calibrate(monkeypatch, capsys, tmp_path, "--trace", str(trace), gpu="h100-sxm5-80gb")
    assert code == 1, err  # the right GPU: summarised, nothing to fit


def test_calibrate_refuses_a_device_outside_the_catalog_families(tmp_path, monkeypatch, capsys):
    """rccl-tests on an MI300X prints the same table; under --gpu h100-sxm5-80gb it was fitted into the
    H100's profile (nvlink_efficiency 0.678, exit 0). Under a hardware profile of its own it is read."""
    amd = tmp_path / "rccl_all_reduce.txt"
    amd.write_text((FIX / "ts_all_reduce.txt").read_text().replace("NVIDIA H100 80GB HBM3", "AMD Instinct MI300X"))
    code, err, prof = calibrate(monkeypatch, capsys, tmp_path, "--nccl-tests", str(amd))
    assert code == 2 and prof is None and err.count("error:") == 1 and "Traceback" not in err
    assert "'AMD Instinct MI300X' (a GPU of none of the catalog's families)" in err and "--gpu FILE.yaml" in err
    own = tmp_path / "mi300x.yaml"
    own.write_text(yaml.safe_dump({**yaml.safe_load((ROOT / "hardware_profiles" / "h100-sxm5-80gb.yaml").read_text()),
                                   "name": "mi300x-like"}))
    code, err, _ = calibrate(monkeypatch, capsys, tmp_path, "--nccl-tests", str(amd), gpu=str(own), name="own.yaml")
    assert "error:" not in err and code in (0, 1), err


# ------------------------------------------------------------------ 4, 5. provenance
@needs_shipped
def test_a_profile_records_its_own_fits_its_base_by_name_and_its_cluster(tmp_path, monkeypatch, capsys):
    """From nccl-tests alone the profile claimed the shipped runs fit (runs_fit_params, its MAPE per
    source, the shipped collectives file) as its own."""
    from perfmodel.calibrate.provenance import sha256_of

    code, err, prof = calibrate(monkeypatch, capsys, tmp_path, "--nccl-tests", str(P5_1NODE))
    assert code == 0, err
    prov = prof["provenance"]
    assert not {"runs_fit_params", "runs_mape_pct_by_source", "logs_fit_params", "collectives"} & set(prov)
    assert Path(prov["base_profile"]["path"]).name == DEFAULT_PROFILE_PATH.name
    assert prov["base_profile"]["sha256"] == sha256_of(DEFAULT_PROFILE_PATH)
    assert prov["cluster"] == {"gpus_per_node": 8, "gpus_per_node_from": "catalog default",
                               "scale_out_gbit_per_s_per_node": 3200.0,
                               "scale_out_from": "h100-sxm5-80gb default for 8 GPUs per node", "network": None}


@needs_shipped
def test_the_node_size_comes_from_the_rank_lines_when_not_given(tmp_path, monkeypatch, capsys):
    """Polaris (4 A100 per node, 800 Gbit/s of NICs) read as 8-GPU nodes got half its NIC per GPU and twice
    the NIC efficiency; the Rank lines say 4 ranks per host."""
    args = ("--nccl-tests", str(POLARIS_N2), "--nccl-tests", str(POLARIS_N8), "--scale-out-gbit-per-s", "800",
            "--network", "polaris")
    code, err, read = calibrate(monkeypatch, capsys, tmp_path, *args, gpu="a100-sxm4-40gb")
    assert code == 0, err
    notes = [ln for ln in err.splitlines() if ln.startswith("note:")]
    assert len(notes) == 1 and "4 ranks per host" in notes[0]
    code, err, given = calibrate(monkeypatch, capsys, tmp_path, *args, "--gpus-per-node", "4", gpu="a100-sxm4-40gb",
                                 name="given.yaml")
    assert code == 0 and "note:" not in err
    assert read["networks"]["polaris"] == pytest.approx(given["networks"]["polaris"], rel=1e-9)
    assert read["networks"]["polaris"]["nic_efficiency"] < 0.5  # 800 Gbit/s over 4 GPUs: ~40% of it
    assert read["provenance"]["cluster"] == {
        "gpus_per_node": 4, "gpus_per_node_from": "nccl-tests Rank lines", "scale_out_gbit_per_s_per_node": 800.0,
        "scale_out_from": "--scale-out-gbit-per-s", "network": "polaris"}
    assert given["provenance"]["cluster"]["gpus_per_node_from"] == "--gpus-per-node"


def test_ranks_per_host_needs_every_multi_host_table_to_agree():
    from types import SimpleNamespace as T

    from perfmodel.calibrate.apply_collectives import ranks_per_host

    assert ranks_per_host([T(n_ranks=8, n_nodes=2), T(n_ranks=32, n_nodes=8), T(n_ranks=2, n_nodes=1)]) == 4
    assert ranks_per_host([T(n_ranks=8, n_nodes=2), T(n_ranks=64, n_nodes=8)]) is None
    assert ranks_per_host([T(n_ranks=20, n_nodes=3)]) is None and ranks_per_host([T(n_ranks=8, n_nodes=1)]) is None
    assert ranks_per_host([T(n_ranks=None, n_nodes=None)]) is None


# ------------------------------------------------------------------ 6. -C, -S and per-iteration columns
def test_cputime_tables_take_the_time_from_algbw():
    """-C 1 prints the CPU launch time; algbw and busbw come from the completed time (common.cu BenchTime)."""
    t = parse_nccl_tests(FIX / "cputime_all_reduce.txt")
    assert t.time_column == "cputime" and t.n_ranks == 8 and len(t.rows) == 4
    np.testing.assert_allclose(t.rows.oop_time_us, t.rows.size_bytes / (t.rows.oop_algbw_gb_per_s * 1e3), rtol=1e-12)
    assert t.rows.oop_time_us.iloc[0] == pytest.approx(30.0, rel=1e-3)  # not the 4.21 us printed
    assert list(t.rows.oop_busbw_gb_per_s) == [61.17, 104.86, 163.12, 244.67]


def test_timestamped_tables_parse():
    t = parse_nccl_tests(FIX / "ts_all_reduce.txt")
    assert t.time_column == "time" and list(t.rows.oop_time_us) == [30.0, 35.0, 45.0, 60.0]
    assert list(t.rows.ip_busbw_gb_per_s) == [62.2, 105.46, 164.94, 245.08]


HEAD = ("# nccl-tests version 2.17.6 nccl-headers=22807 nccl-library=22807\n"
        "# Collective test starting: all_reduce_perf\n")
RANKS = "".join(f"#  Rank {r:2d} Group  0 Pid  1234 on     node01 device {r:2d} [0000:18:00] NVIDIA H100 80GB HBM3\n"
                for r in range(8))
# src/util.cu writeResultHeader with per_iter_timing and bitwisecheck, and -S 1
PERITER = ("#  size  count  type  redop  root  time  algbw  busbw  #wrong  #bitdiff  i_min  i_max  i_p99  i_cv%"
           "  time  algbw  busbw  #wrong  #bitdiff  i_min  i_max  i_p99  i_cv%  timestamp\n")


def _row(size: int, t_us: float, stamp: str = "2025-06-01 12:00:00") -> str:
    algbw = size / t_us / 1e3
    side = f"{t_us:7.2f}  {algbw:6.2f}  {algbw * 1.75:6.2f}       0         0  {t_us * 0.9:7.2f}  {t_us * 1.2:7.2f}  " \
           f"{t_us * 1.1:7.2f}     3.10"
    return f"{size:12d}  {size // 4:12d}     float     sum      -1  {side}  {side}  {stamp}\n"


def test_per_iteration_and_bitwise_columns_are_read_past(tmp_path):
    f = tmp_path / "periter_all_reduce.txt"
    f.write_text(HEAD + RANKS + PERITER + _row(1 << 20, 30.0) + _row(1 << 21, 35.0)
                 + "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 80.1\n")
    t = parse_nccl_tests(f)
    assert list(t.rows.oop_time_us) == [30.0, 35.0] and list(t.rows.ip_time_us) == [30.0, 35.0]
    assert list(t.rows.oop_busbw_gb_per_s) == [61.17, 104.86] and t.n_ranks == 8


def test_a_bad_timestamp_or_a_short_row_is_an_error(tmp_path):
    f = tmp_path / "bad_all_reduce.txt"
    f.write_text(HEAD + RANKS + PERITER + _row(1 << 20, 30.0, stamp="yesterday noon"))
    with pytest.raises(InputError, match="timestamp") as exc:
        parse_nccl_tests_all(f)
    assert exc.value.where.endswith(":12")
    f.write_text(HEAD + RANKS + PERITER + " ".join(_row(1 << 20, 30.0).split()[:-1]) + "\n")  # time cut off
    with pytest.raises(InputError, match="expected 25 columns, got 24"):
        parse_nccl_tests_all(f)


# ------------------------------------------------------------------ 7. per-GPU values of an unnamed fit
@needs_shipped
def test_calibrating_one_gpu_leaves_another_gpus_collectives_alone(tmp_path, monkeypatch, capsys):
    """Without --network the fit wrote networks[''] with the H100's NVLink efficiency and latency, which every
    GPU without --network then used: a V100 node's all_reduce changed after calibrating on an H100 node."""
    code, err, prof = calibrate(monkeypatch, capsys, tmp_path, "--nccl-tests", str(P5_1NODE))
    assert code == 0, err
    profile = tmp_path / "p.yaml"
    assert "" not in prof["networks"]
    assert {"nvlink_efficiency", "intra_node_latency_us"} <= set(prof["gpus"]["h100-sxm5-80gb"])
    for size in (1 << 20, 1 << 28):
        assert comm_s(monkeypatch, capsys, "v100-sxm2-16gb", size, profile=profile) == \
            comm_s(monkeypatch, capsys, "v100-sxm2-16gb", size)
        assert comm_s(monkeypatch, capsys, "a100-sxm4-80gb", size, profile=profile) == \
            comm_s(monkeypatch, capsys, "a100-sxm4-80gb", size)
    # the H100 itself runs at the fit: the written profile reproduces the error calibrate reported
    table = parse_nccl_tests(P5_1NODE)
    rows = table.rows[table.rows.size_bytes >= 1 << 20]
    errs = [comm_s(monkeypatch, capsys, "h100-sxm5-80gb", int(r.size_bytes), profile=profile) / (r.oop_time_us * 1e-6)
            - 1.0 for r in rows.itertuples()]
    assert 100 * np.median(np.abs(errs)) == pytest.approx(prof["provenance"]["inputs"][0]["median_abs_err_pct_ge_1MiB"],
                                                          abs=0.01)


def test_a_gpus_own_nvlink_efficiency_applies_to_it_alone(tmp_path):
    path = tmp_path / "own.yaml"
    path.write_text("gpus:\n  h100-sxm5-80gb:\n    nvlink_efficiency: 0.95\n"
                    "networks:\n  ib:\n    nvlink_efficiency: 0.7\n")
    cal = load_calibration(path)
    h100, v100 = load_gpu("h100-sxm5-80gb"), load_gpu("v100-sxm2-16gb")
    assert cal.for_network(h100, None)[0].nvlink_efficiency == 0.95
    assert cal.for_network(v100, None)[0].nvlink_efficiency == cal.cost_constants().nvlink_efficiency
    assert cal.for_network(h100, "ib")[0].nvlink_efficiency == 0.7  # a fabric's own value wins
    assert cal.gpu(h100) == h100  # not a field of the GPU profile
    bad = tmp_path / "bad.yaml"
    bad.write_text("gpus:\n  h100-sxm5-80gb:\n    nvlink_efficiency: 3.0\n")
    with pytest.raises(InputError, match=r"calibration\.gpus\.h100-sxm5-80gb\.nvlink_efficiency"):
        load_calibration(bad)


# ------------------------------------------------------------------ 8. points: what each fit used
@needs_shipped
def test_points_are_the_rows_each_fit_used(tmp_path, monkeypatch, capsys):
    """nccl-tests counted every row (sizes < 1 MiB and tables the fit skips too), a GEMM file its fp32 rows,
    a trace its kernels and a log without a block its lines, though none of those was fitted."""
    two = tmp_path / "with_broadcast.txt"  # an all_reduce table the fit uses and a broadcast table it skips
    two.write_text(P5_1NODE.read_text() + "\n" + (ROOT / "tests" / "fixtures" / "valid" / "broadcast_perf_8ranks.txt")
                   .read_text())
    assert [t.op for t in parse_nccl_tests_all(two)] == ["all_reduce", "broadcast"]
    gemm = tmp_path / "gemm.csv"
    gemm.write_text("m,n,k,dtype,time_s\n" + "".join(f"{s},{s},{s},bf16,{2 * s**3 / (0.7 * 989e12)}\n"
                                                    for s in (4096, 8192)) + "4096,4096,4096,fp32,0.003\n")
    log = tmp_path / "run.log"
    log.write_text(" iteration 1/ 2 | elapsed time per iteration (ms): 5.0 |\n"
                   " iteration 2/ 2 | elapsed time per iteration (ms): 5.0 |\n")
    code, err, prof = calibrate(monkeypatch, capsys, tmp_path, "--nccl-tests", str(P5_1NODE), "--nccl-tests", str(two),
                                "--gemm", str(gemm), "--log", str(log))
    assert code == 0, err
    points = {(i["kind"], Path(i["path"]).name): i for i in prof["provenance"]["inputs"]}
    fitted_rows = int((parse_nccl_tests(P5_1NODE).rows.size_bytes >= 1 << 20).sum())
    assert fitted_rows == 15 and points["nccl-tests", P5_1NODE.name]["points"] == fitted_rows
    assert points["nccl-tests", "with_broadcast.txt"]["points"] == fitted_rows
    assert points["gemm", "gemm.csv"]["points"] == 2
    assert points["log", "run.log"]["points"] == 0 and points["log", "run.log"]["iteration_lines"] == 2


def test_a_base_handed_in_keeps_its_description_not_its_fit_records():
    """calibration/refit.py hands in a base assembled from the collectives fit and says so; fit records of an
    earlier calibrate run in a base are that run's, not the new profile's."""
    from perfmodel.calibrate.provenance import base_record
    from perfmodel.calibration_profile import Calibration

    base = Calibration(provenance={"collectives": "calibration/collectives_fit.yaml", "runs_fit_params": {"a": 1.0},
                                   "runs_mape_pct_by_source": {"s": 5.0}, "inputs": [], "created": "x", "gpu": "y"})
    assert base_record(base) == {"collectives": "calibration/collectives_fit.yaml"}


def test_a_table_of_unknown_op_is_refused_at_its_line(tmp_path, monkeypatch, capsys):
    """The refusal named the file only, and 'op and rank count' whichever of the two was missing."""
    f = tmp_path / "bench.txt"
    f.write_text("# some preamble\n#       size         count      type   redop    root     time   algbw   busbw  #wrong"
                 "     time   algbw   busbw  #wrong\n     1048576        131072     float    none      -1    20.00   "
                 "52.43   26.21       0    20.00   52.43   26.21       0\n")
    code, err, prof = calibrate(monkeypatch, capsys, tmp_path, "--nccl-tests", str(f))
    assert code == 2 and prof is None and err.count("error:") == 1
    assert f"{f}:3: nccl-tests: the table's op and rank count must be known" in err


@pytest.mark.parametrize("cell", ["cuda:0", "cuda", "0", "NVIDIA Graphics Device"])
def test_a_device_cell_naming_no_model_is_not_checked(cell):
    """A GEMM CSV's device column often holds a PyTorch device ('cuda:0') or an index: the stricter check
    refused them as 'a GPU of none of the catalog's families'."""
    from perfmodel.calibrate.gpu_family import check_device_matches

    check_device_matches("h100-sxm5-80gb", cell, "g.csv:2")
