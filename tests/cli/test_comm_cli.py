"""``perfmodel comm``: JSON keys, nccl-tests bandwidth definitions, monotonicity, bad input."""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from perfmodel.calibrate.fit_collectives import SHIPPED_PROFILE
from perfmodel.cli import app

runner = CliRunner()
BASE = ["comm", "--gpu", "h100-sxm5-80gb", "--gpus-per-node", "8"]


def run_json(*args):
    res = runner.invoke(app, [*BASE, *args, "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


@pytest.mark.parametrize("op, factor", [
    ("all_reduce", 2 * 31 / 32), ("all_gather", 31 / 32), ("reduce_scatter", 31 / 32),
    ("all_to_all", 31 / 32), ("send_recv", 1.0),
])
def test_json_keys_and_bus_factor(op, factor):
    out = run_json("--op", op, "--bytes", str(2**28), "--gpus", "32")
    assert set(out) == {"time_s", "algbw_gb_per_s", "busbw_gb_per_s"}
    assert out["algbw_gb_per_s"] == pytest.approx(2**28 / out["time_s"] / 1e9)
    assert out["busbw_gb_per_s"] == pytest.approx(out["algbw_gb_per_s"] * factor)


@pytest.mark.parametrize("op", ["all_reduce", "all_gather", "all_to_all", "send_recv"])
@pytest.mark.parametrize("cal", [[], ["--calibration", str(SHIPPED_PROFILE), "--network", "efa"]])
def test_more_scale_out_bandwidth_is_never_slower(op, cal):
    times = [run_json("--op", op, "--bytes", str(2**30), "--gpus", "64", "--scale-out-gbit-per-s", str(x), *cal)["time_s"]
             for x in (100, 400, 1600, 3200, 12800)]
    assert all(b <= a for a, b in zip(times, times[1:]))


def test_calibration_is_applied():
    plain = run_json("--op", "all_reduce", "--bytes", str(2**30), "--gpus", "16")
    fitted = run_json("--op", "all_reduce", "--bytes", str(2**30), "--gpus", "16",
                      "--calibration", str(SHIPPED_PROFILE), "--network", "efa")
    assert fitted["time_s"] != plain["time_s"]
    # measured p5 2-node all_reduce at 1 GiB: 4607.6 us (aws_p5_2node_h100_allreduce.txt)
    assert fitted["time_s"] == pytest.approx(4607.6e-6, rel=0.10)


def test_human_table():
    res = runner.invoke(app, [*BASE, "--op", "all_gather", "--bytes", "1048576", "--gpus", "8"])
    assert res.exit_code == 0 and "busbw" in res.stdout
    assert "protocol" not in res.stdout  # no fabric named: no fitted protocol switch


def test_human_table_names_the_protocol_on_a_fabric_with_a_switch():
    """EFA's fitted switch (AWS p5 logs): 1 MiB runs with the low-latency protocol, 256 MiB with Simple."""
    def protocol(size):
        res = runner.invoke(app, [*BASE, "--op", "all_reduce", "--bytes", str(size), "--gpus", "16", "--network", "EFA"])
        assert res.exit_code == 0, res.output
        return next(line.split(None, 1)[1] for line in res.stdout.splitlines() if line.split()[0] == "protocol")

    assert protocol(2**20).startswith("low-latency")
    assert protocol(2**28) == "Simple"
    # one node on the same fabric: the switch (across nodes) does not apply, so no protocol line
    res = runner.invoke(app, [*BASE, "--op", "all_reduce", "--bytes", "1048576", "--gpus", "8", "--network", "EFA"])
    assert res.exit_code == 0 and "protocol" not in res.stdout
    # point-to-point across nodes takes the switch too
    res = runner.invoke(app, [*BASE, "--op", "send_recv", "--bytes", "1024", "--gpus", "16", "--network", "EFA"])
    assert "low-latency" in res.stdout


@pytest.mark.parametrize("args, field", [
    (["--op", "all_reduce", "--bytes", "-1", "--gpus", "16"], "bytes"),
    (["--op", "all_reduce", "--bytes", "1024", "--gpus", "0"], "gpus"),
    (["--op", "broadcast", "--bytes", "1024", "--gpus", "16"], "op"),
])
def test_bad_input_exits_2_with_one_line(args, field):
    res = runner.invoke(app, [*BASE, *args])
    assert res.exit_code == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {field}:")


def test_unknown_gpu_exits_2():
    res = runner.invoke(app, ["comm", "--gpu", "nope", "--gpus-per-node", "8", "--op", "all_reduce",
                              "--bytes", "8", "--gpus", "16"])
    assert res.exit_code == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: gpu:")


def test_a_group_that_part_fills_its_last_node_is_costed():
    """12 GPUs on 8-GPU nodes (the second node half used) cost like any group that spans nodes."""
    inside = run_json("--op", "all_reduce", "--bytes", str(2**30), "--gpus", "8")["time_s"]
    slow, fast = (run_json("--op", "all_reduce", "--bytes", str(2**30), "--gpus", "12",
                           "--scale-out-gbit-per-s", str(x))["time_s"] for x in (400, 3200))
    assert slow > fast > inside
    table = runner.invoke(app, [*BASE, "--op", "all_reduce", "--bytes", str(2**30), "--gpus", "12"]).stdout
    assert "12 (2 nodes x 8)" in table


def test_a_user_refit_of_the_congestion_is_not_capped_by_the_shipped_range(tmp_path):
    """Logs from 2 to 256 EFA nodes refit efa.congestion_nodes; the shipped cap (the playbook's 64 nodes)
    no longer describes it and is dropped, so the profile predicts its own 256-node log."""
    import numpy as np
    import yaml

    from perfmodel.costs.comm import collective_time_s, op_factor

    paths = []
    for nodes in (2, 16, 64, 256):
        n = nodes * 8
        lines = ["# nThread 1 nGpus 1 minBytes 1048576 maxBytes 1073741824 step: 2(factor)",
                 *(f"#  Rank {r:4d} Group  0 Pid {1000 + r} on host{r // 8:04d} device  {r % 8} [0x00] "
                   "NVIDIA H100 80GB HBM3" for r in range(n)),
                 "#       size         count      type   redop    root     time   algbw   busbw #wrong"
                 "     time   algbw   busbw #wrong"]
        for p in range(20, 31):
            s = 2 ** p
            t = float(collective_time_s("all_reduce", s, n, 1, 8, 855e9, 40e9, 13e-6, 30e-6, congestion_nodes=20.0))
            alg = s / t / 1e9
            bus = alg * float(op_factor("all_reduce", n))
            lines.append(f"{s:12d} {s // 4:12d}     float     sum      -1 {t * 1e6:8.1f} {alg:7.2f} {bus:7.2f}      0"
                         f" {t * 1e6:8.1f} {alg:7.2f} {bus:7.2f}      0")
        path = tmp_path / f"all_reduce_n{nodes}.txt"
        path.write_text("\n".join(lines) + "\n")
        paths.append(path)
    out = tmp_path / "efa.yaml"
    args = ["calibrate", "--gpu", "h100-sxm5-80gb", "--network", "EFA", "--out", str(out)]
    res = runner.invoke(app, args + [a for p in paths for a in ("--nccl-tests", str(p))])
    assert res.exit_code == 0, res.output
    efa = yaml.safe_load(out.read_text())["networks"]["efa"]
    assert 10.0 < efa["congestion_nodes"] < 40.0 and "congestion_max_nodes" not in efa
    big = run_json("--op", "all_reduce", "--bytes", str(2**30), "--gpus", "2048", "--network", "EFA",
                   "--calibration", str(out))["time_s"]
    truth = float(collective_time_s("all_reduce", 2**30, 2048, 1, 8, 855e9, 40e9, 13e-6, 30e-6, congestion_nodes=20.0))
    assert big == pytest.approx(truth, rel=0.15)
    assert np.isfinite(big)
