"""``perfmodel calibrate`` on real-world inputs an audit found mishandled: a one-rank nccl-tests
table, a refit of a fabric the shipped profile already knows, logs of one collective only, a
Megatron-DeepSpeed log with DeepSpeed's timer lines, a GEMM fit stopped by its bound, and the runs
residuals recorded beside a log fit."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import yaml

from perfmodel.calibrate.parsers import parse_nccl_tests
from cli_helpers import run_cli

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "calibration" / "data"
P5_2NODE = DATA / "collectives" / "traces" / "nccl" / "aws_p5_2node_h100_allreduce.txt"
POLARIS_AG = (DATA / "collectives" / "collectives" / "alcf_polaris_A100_slingshot"
              / "nccl_2_21__n8.g4.2024-04-29-21-23-48__all_gather_output.dat.5.txt")
LOG = ROOT / "tests" / "fixtures" / "parsers" / "megatron_args_llama2_7b.log"
HEADER = ("#       size         count      type   redop    root     time   algbw   busbw #wrong"
          "     time   algbw   busbw #wrong\n")




def _comm_s(monkeypatch, capsys, op, size, gpus, gpn, gpu, bw, network, profile=None) -> float:
    import json

    args = ["comm", "--op", op, "--bytes", str(size), "--gpus", str(gpus), "--gpus-per-node", str(gpn), "--gpu", gpu,
            "--scale-out-gbit-per-s", str(bw), "--network", network, "--json"]
    code, out, err = run_cli(monkeypatch, capsys, *args, *(["--calibration", str(profile)] if profile else []))
    assert code == 0, err
    return float(json.loads(out)["time_s"])


def test_a_one_rank_table_is_nothing_to_fit_not_a_crash(tmp_path, monkeypatch, capsys):
    """all_reduce_perf -g 1: busbw 0, nothing of a fabric in it (was a scipy traceback)."""
    one = tmp_path / "one_rank.txt"
    one.write_text("# nccl-tests all_reduce_perf\n"
                   "#  Rank  0 Group  0 Pid 1 on host0 device  0 [0x1b] NVIDIA H100 80GB HBM3\n"
                   + HEADER + "     1048576        262144     float     sum      -1     8.10  129.45    0.00      0"
                   "     7.90  132.73    0.00      0\n")
    out = tmp_path / "p.yaml"
    code, _, err = run_cli(monkeypatch, capsys, "calibrate", "--gpu", "h100-sxm5-80gb", "--nccl-tests", str(one),
                           "--out", str(out))
    assert code == 1 and "Traceback" not in err and err.startswith("error: nccl-tests: no table in"), err
    assert not out.exists()


@pytest.mark.skipif(not P5_2NODE.is_file(), reason="shipped nccl-tests log missing")
def test_refitting_a_known_fabric_reproduces_its_own_log(tmp_path, monkeypatch, capsys):
    """--network efa keeps the shipped EFA congestion (fitted on 2-64 nodes): the 2-node fit holds it
    fixed, so the profile written reproduces the 2-node log (was 5.9% median error against the 2.8%
    the fit reported)."""
    out = tmp_path / "efa.yaml"
    code, stdout, err = run_cli(monkeypatch, capsys, "calibrate", "--gpu", "h100-sxm5-80gb", "--nccl-tests",
                                str(P5_2NODE), "--scale-out-gbit-per-s", "3200", "--network", "efa", "--out", str(out))
    assert code == 0, err
    efa = yaml.safe_load(out.read_text())["networks"]["efa"]
    assert efa["congestion_max_nodes"] == 64.0 and np.isfinite(efa["congestion_nodes"])
    table = parse_nccl_tests(P5_2NODE)
    rows = table.rows[table.rows.size_bytes >= 2**20]
    errs = [_comm_s(monkeypatch, capsys, "all_reduce", int(r.size_bytes), 16, 8, "h100-sxm5-80gb", 3200, "efa", out)
            / (r.oop_time_us * 1e-6) - 1.0 for r in rows.itertuples()]
    assert np.median(np.abs(errs)) <= 0.035


@pytest.mark.skipif(not POLARIS_AG.is_file(), reason="shipped nccl-tests log missing")
def test_a_log_of_one_collective_alone_is_fitted(tmp_path, monkeypatch, capsys):
    """An all_gather-only nccl-tests log was silently not fitted (exit 0, an empty network entry)."""
    out = tmp_path / "ag.yaml"
    code, stdout, err = run_cli(monkeypatch, capsys, "calibrate", "--gpu", "a100-sxm4-40gb", "--gpus-per-node", "4",
                                "--scale-out-gbit-per-s", "800", "--network", "slingshot-ag", "--nccl-tests",
                                str(POLARIS_AG), "--out", str(out))
    assert code == 0 and err == "", err
    fitted = yaml.safe_load(out.read_text())["networks"]["slingshot-ag"]
    assert any(k.startswith("all_gather.") for k in fitted)
    table = parse_nccl_tests(POLARIS_AG)
    big = table.rows[table.rows.size_bytes >= 2**28].iloc[0]
    measured = big.oop_time_us * 1e-6
    args = ("all_gather", int(big.size_bytes), 32, 4, "a100-sxm4-40gb", 800, "slingshot-ag")
    before = _comm_s(monkeypatch, capsys, *args) / measured - 1.0
    after = _comm_s(monkeypatch, capsys, *args, profile=out) / measured - 1.0
    assert abs(after) < 0.1 < abs(before)


def test_a_megatron_log_with_deepspeed_timer_lines_uses_its_arguments_block(tmp_path, monkeypatch, capsys):
    """Megatron-DeepSpeed prints DeepSpeed's timer lines beside its own (more of them, here): the
    arguments block and its iteration lines decide, not the most common line format."""
    lines = LOG.read_text().splitlines()
    timer = ("[2026-11-30 01:0{i}:00,000] [INFO] [timer.py:215:stop] epoch=0/micro_step={i}/global_step={i}, "
             "RunningAvgSamplesPerSec=21.6, CurrSamplesPerSec=21.7, MemAllocated=10.2GB, MaxMemAllocated=40.1GB")
    mixed = tmp_path / "mixed.log"
    mixed.write_text("\n".join(lines + [timer.format(i=i) for i in range(1, 9)]) + "\n")
    out = tmp_path / "p.yaml"
    code, stdout, err = run_cli(monkeypatch, capsys, "calibrate", "--gpu", "h100-sxm5-80gb", "--log", str(mixed),
                                "--out", str(out))
    assert code == 0, err
    assert "configuration from its arguments block" in stdout
    entry = next(i for i in yaml.safe_load(out.read_text())["provenance"]["inputs"] if i["kind"] == "log")
    iteration_lines = sum(bool(re.search(r"\biteration\s+\d+/", ln)) for ln in lines)
    assert iteration_lines > 0 and entry["points"] == iteration_lines  # the block's own lines, not the timer's


def test_a_gemm_fit_stopped_by_its_bound_is_not_applied(tmp_path, monkeypatch, capsys):
    """100 ms for an 8192^3 bf16 GEMM (a unit mistake): the fit would end at 0.05 and slow every
    estimate 14x; it is reported and refused."""
    slow = tmp_path / "slow.csv"
    slow.write_text("m,n,k,dtype,time_ms\n8192,8192,8192,bf16,100\n")
    out = tmp_path / "p.yaml"
    code, _, err = run_cli(monkeypatch, capsys, "calibrate", "--gpu", "h100-sxm5-80gb", "--gemm", str(slow),
                           "--out", str(out))
    assert code == 1 and "ends on its bound (0.050)" in err and "Traceback" not in err
    assert not out.exists()


def test_nccl_rank_count_without_rank_lines():
    """No '#  Rank' lines: all_gather / reduce_scatter / alltoall print count per rank and size over
    all ranks (exact); busbw / algbw gives a count only where its 2-decimal print singles one out."""
    import tempfile

    n = 2160

    def table(op, rows):
        path = Path(tempfile.mkdtemp()) / f"{op}_perf.txt"
        path.write_text(f"# nccl-tests {op}_perf\n" + HEADER + "\n".join(rows) + "\n")
        return parse_nccl_tests(path)

    def row(size, count, redop, algbw, busbw):
        t = size / algbw / 1e3
        return (f"  {size}  {count}  float  {redop}  -1  {t:.1f}  {algbw:.2f}  {busbw:.2f}  0  {t:.1f}  {algbw:.2f}  "
                f"{busbw:.2f}  0")

    ag = table("all_gather", [row(4 * 1024 * n, 1024, "none", 150.0, 150.0 * (n - 1) / n)])
    assert (ag.n_ranks, ag.n_ranks_source) == (n, "size_count")
    ar = table("all_reduce", [row(2**30, 2**28, "sum", 200.0, 200.0 * 2 * (n - 1) / n)])
    assert ar.n_ranks is None  # 2159, 2160 and 2161 print the same busbw
    small = table("all_reduce", [row(2**30, 2**28, "sum", 200.0, 200.0 * 2 * 15 / 16)])
    assert (small.n_ranks, small.n_ranks_source) == (16, "bw_ratio")


def test_refused_fits_together_write_no_profile(tmp_path, monkeypatch, capsys):
    """Two GEMM files whose fits both end on their bound: nothing was fitted, so no profile (was exit 0
    with a profile that only restated the shipped one)."""
    paths = []
    for name, slow in (("a.csv", 1), ("b.csv", 2)):  # two files, two contents (a copy is refused as one)
        p = tmp_path / name
        p.write_text(f"m,n,k,dtype,time_us\n4096,4096,4096,bf16,{200000 * slow}\n8192,8192,8192,bf16,{1600000 * slow}\n")
        paths += ["--gemm", str(p)]
    out = tmp_path / "p.yaml"
    code, stdout, err = run_cli(monkeypatch, capsys, "calibrate", "--gpu", "h100-sxm5-80gb", *paths, "--out", str(out))
    assert code == 1 and err.splitlines()[-1].startswith("error: nothing was fitted") and "Traceback" not in err
    assert "nothing applied" in stdout and not out.exists()


POLARIS_AR8 = (DATA / "collectives" / "collectives" / "alcf_polaris_A100_slingshot"
               / "nccl_2_21__n8.g4.2024-04-29-21-23-48__all_reduce_output.dat.5.txt")


@pytest.mark.skipif(not POLARIS_AR8.is_file(), reason="shipped nccl-tests log missing")
def test_a_refit_of_a_named_fabric_reproduces_what_it_reports_and_touches_no_other(tmp_path, monkeypatch, capsys):
    """The fit runs over the fabric's shipped entry (its latency growth with nodes, other ops' own
    values, which one node count cannot determine): the merged profile reproduces the error it
    reports; the shared constants that serve other fabrics stay as they were."""
    from perfmodel.calibration_profile import load_calibration

    out = tmp_path / "s.yaml"
    code, stdout, err = run_cli(monkeypatch, capsys, "calibrate", "--gpu", "a100-sxm4-40gb", "--gpus-per-node", "4",
                                "--scale-out-gbit-per-s", "400", "--network", "slingshot",
                                "--nccl-tests", str(POLARIS_AR8), "--out", str(out))
    assert code == 0, err
    reported = float(re.search(r"median \|error\| over sizes >= 1 MiB = ([0-9.]+)%", stdout).group(1))
    table = parse_nccl_tests(POLARIS_AR8)
    rows = table.rows[table.rows.size_bytes >= 2**20]
    errs = [_comm_s(monkeypatch, capsys, "all_reduce", int(r.size_bytes), table.n_ranks, 4, "a100-sxm4-40gb", 400,
                    "slingshot", out) / (r.oop_time_us * 1e-6) - 1.0 for r in rows.itertuples()]
    assert abs(100 * np.median(np.abs(errs)) - reported) < 0.1
    written, shipped = yaml.safe_load(out.read_text()), load_calibration(None)
    assert written["constants"]["nic_efficiency"] == shipped.constants["nic_efficiency"]
    assert written["networks"]["slingshot"]["all_to_all.congestion_nodes"] == \
        shipped.networks["slingshot"]["all_to_all.congestion_nodes"]


def test_several_gemm_files_are_one_fit_whatever_their_order(tmp_path, monkeypatch, capsys):
    """Two GEMM CSVs of one GPU refine one another: one fit over both (was: each file's fit replaced the
    last, so the order of --gemm chose the GPU's matmul efficiency)."""
    import pandas as pd

    from perfmodel.calibrate.command import fit_gemm
    from perfmodel.calibrate.parsers import parse_gemm_csv

    data = Path(__file__).resolve().parents[2] / "calibration" / "data" / "kernels_h200"
    a, b = data / "gemm_llama3-8b_tp1.csv", data / "gemm_llama3-405b_tp8.csv"
    got = []
    for order in ((a, b), (b, a)):
        out = tmp_path / f"{order[0].stem}.yaml"
        code, stdout, err = run_cli(monkeypatch, capsys, "calibrate", "--gpu", "h200-sxm-141gb", "--out", str(out),
                                    "--gemm", str(order[0]), "--gemm", str(order[1]))
        assert code == 0, err
        assert stdout.count("one estimate over 2 GEMM sources") == 2
        prof = yaml.safe_load(out.read_text())
        got.append(prof["gpus"]["h200-sxm-141gb"]["matmul_efficiency_max"])
        assert [i["points"] for i in prof["provenance"]["inputs"] if i["kind"] == "gemm"] == [
            len(parse_gemm_csv(p)) for p in order]
    joint, _ = fit_gemm(pd.concat([parse_gemm_csv(a), parse_gemm_csv(b)], ignore_index=True), "h200-sxm-141gb")
    alone = [fit_gemm(parse_gemm_csv(p), "h200-sxm-141gb")[0]["matmul_efficiency_max"] for p in (a, b)]
    assert got[0] == pytest.approx(got[1], rel=1e-9) == pytest.approx(joint["matmul_efficiency_max"], rel=1e-9)
    assert abs(alone[0] - alone[1]) > 0.005 and all(abs(got[0] - a) > 1e-4 for a in alone)  # neither file alone
