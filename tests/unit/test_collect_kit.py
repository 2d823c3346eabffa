"""calibration/collect/: the kit's files parse with perfmodel's own parsers and keep their numbers.

The output formats are pure functions (no torch), tested everywhere; the sweeps themselves run
on the CPU (gloo for the collectives) only where torch is installed, and skip otherwise.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from perfmodel.calibrate.parsers import (
    busbw_factor,
    parse_gemm_csv,
    parse_kineto_trace,
    parse_nccl_tests_all,
)

KIT = Path(__file__).resolve().parents[2] / "calibration" / "collect"
sys.path.insert(0, str(KIT))

import collect_common as cc  # noqa: E402
import gemm_sweep  # noqa: E402

OPS = cc.COLLECTIVES


# ----------------------------------------------------------------------------- GEMM CSV
def test_gemm_csv_round_trips_through_parse_gemm_csv(tmp_path):
    rows = [cc.GemmRow(8192, 6144, 4096, "bf16", 1.234567e-3, "qkv.fwd", 50),
            cc.GemmRow(4096, 4096, 4096, "fp8", 2.5e-4, "grid", 50),
            cc.GemmRow(64, 64, 64, "fp16", 7.0e-6, "grid", 3)]
    path = cc.write_gemm_csv(rows, tmp_path / "gemm.csv", cc.provenance_line("test", device="x"))
    assert path.read_text().startswith("# source: perfmodel calibration/collect/test")
    df = parse_gemm_csv(path)
    assert list(df[["m", "n", "k"]].itertuples(index=False, name=None)) == [
        (r.m, r.n, r.k) for r in rows]
    assert list(df["dtype"]) == ["bf16", "fp8", "fp16"]
    np.testing.assert_allclose(df["time_s"], [r.time_s for r in rows], rtol=1e-9)
    # the parser's TFLOP/s is 2mnk/t, the same as the kit's
    np.testing.assert_allclose(df["tflop_per_s"], [r.tflop_per_s for r in rows], rtol=1e-9)
    np.testing.assert_allclose(df["tflop_per_s"][0], 2 * 8192 * 6144 * 4096 / 1.234567e-3 / 1e12,
                               rtol=1e-9)


def test_call_times_and_rows_csv_without_torch(tmp_path):
    """The shared timing loop (its CPU path needs no torch) and the plain-table writer of the kit."""
    from types import SimpleNamespace

    calls = []
    times = cc.call_times_s(None, SimpleNamespace(type="cpu"), lambda: calls.append(1), warmup=2, iters=5)
    assert len(times) == 5 and len(calls) == 7 and all(t >= 0 for t in times)
    path = cc.write_rows_csv([{"a": 1, "b": "x"}, {"a": 2, "b": "y"}], ["a", "b"], tmp_path / "sub" / "t.csv",
                             cc.provenance_line("test", device="cpu"))
    assert path.read_text().splitlines()[0].startswith("# source: perfmodel calibration/collect/test")
    df = pd.read_csv(path, comment="#")
    assert list(df.columns) == ["a", "b"] and list(df.a) == [1, 2] and list(df.b) == ["x", "y"]


def test_layer_gemms_llama3_8b():
    """Llama 3 8B (h 4096, ffn 14336, 32 q / 8 kv heads, vocab 128256), 8192 tokens."""
    shapes = {op: (m, n, k) for op, m, n, k in gemm_sweep.layer_gemms(
        gemm_sweep.MODELS["llama3-8b"], tokens=8192)}
    assert shapes["qkv.fwd"] == (8192, (32 + 2 * 8) * 128, 4096)
    assert shapes["gate_up.fwd"] == (8192, 2 * 14336, 4096)
    assert shapes["down.fwd"] == (8192, 4096, 14336)
    assert shapes["lm_head.fwd"] == (8192, 128256, 4096)
    # backward: dgrad (T, k, n), wgrad (k, n, T): same FLOPs as the forward GEMM
    assert shapes["down.dgrad"] == (8192, 14336, 4096)
    assert shapes["down.wgrad"] == (14336, 4096, 8192)
    for name in ("qkv", "attn_out", "gate_up", "down", "lm_head"):
        flops = {np.prod(shapes[f"{name}.{p}"]) for p in ("fwd", "dgrad", "wgrad")}
        assert len(flops) == 1
    tp8 = {op: (m, n, k) for op, m, n, k in gemm_sweep.layer_gemms(
        gemm_sweep.MODELS["llama3-8b"], tokens=8192, tp=8)}
    assert tp8["gate_up.fwd"] == (8192, 2 * 14336 // 8, 4096)  # column-parallel: n split
    assert tp8["down.fwd"] == (8192, 4096, 14336 // 8)          # row-parallel: k split


def test_sweep_shapes_drops_duplicates():
    shapes = gemm_sweep.sweep_shapes(None, 0, 1, (128, 128, 256))
    assert [s[1:] for s in shapes] == [(128, 128, 128), (256, 256, 256)]


# ----------------------------------------------------------------------------- attention
def test_attention_flop_convention():
    # FlashAttention benchmark: fwd 4*b*s^2*h*d, halved when causal; fwd+bwd = 3.5 x fwd
    b, s, h, d = 2, 8192, 16, 128
    full = cc.attention_flop(b, s, h, d, False, "fwd")
    assert full == 4 * b * s**2 * h * d
    assert cc.attention_flop(b, s, h, d, True, "fwd") == full / 2
    assert cc.attention_flop(b, s, h, d, True, "fwd+bwd") == 3.5 * full / 2


def test_attention_csv_columns_and_tflops(tmp_path):
    rows = [cc.AttentionRow(1, 16384, 16, 128, True, "fwd+bwd", "bf16", 0.01234, "flash", 20),
            cc.AttentionRow(8, 2048, 32, 64, False, "fwd", "bf16", 0.000321, "auto", 20)]
    path = cc.write_attention_csv(rows, tmp_path / "attn.csv", cc.provenance_line("test"))
    df = pd.read_csv(path, comment=None, skiprows=1)
    assert list(df.columns) == cc.ATTENTION_COLUMNS
    assert list(df["causal"]) == ["yes", "no"] and list(df["direction"]) == ["fwd+bwd", "fwd"]
    expect = [cc.attention_flop(1, 16384, 16, 128, True, "fwd+bwd") / 0.01234 / 1e12,
              cc.attention_flop(8, 2048, 32, 64, False, "fwd") / 0.000321 / 1e12]
    np.testing.assert_allclose(df["tflop_per_s"], expect, rtol=1e-5)


# ----------------------------------------------------------------------------- nccl-tests
def _ranks(n: int, hosts: int = 1, name: str = "NVIDIA H100 80GB HBM3") -> list[cc.RankInfo]:
    per = n // hosts
    return [cc.RankInfo(r, f"node{r // per}", 1000 + r, r % per, f"0x{16 + r % per:02x}", name)
            for r in range(n)]


def _rows(op: str, n: int, busbw_gb_per_s: float = 300.0, latency_us: float = 20.0,
          typesize: int = 4) -> list[cc.NcclRow]:
    """alpha-beta times for sizes 8 B .. 1 GiB."""
    out = []
    for p in range(3, 31, 3):
        total, count = cc.nccl_tests_counts(op, 2**p, typesize, n)
        size = total * typesize
        t_us = latency_us + size * cc.busbw_factor(op, n) / (busbw_gb_per_s * 1e9) * 1e6
        out.append(cc.NcclRow(size, count, t_us, t_us * 0.99, 0, 0))
    return out


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("n", [2, 8, 5])
def test_busbw_factor_matches_perfmodel(op, n):
    assert cc.busbw_factor(op, n) == pytest.approx(busbw_factor(op, n), rel=1e-12)


@pytest.mark.parametrize("op", ["all_gather", "reduce_scatter", "all_to_all"])
def test_counts_total_is_a_multiple_of_ranks(op):
    total, count = cc.nccl_tests_counts(op, 1000, 4, 8)  # 250 elements -> 248
    assert (total, count) == (248, 31)
    assert cc.nccl_tests_counts("all_reduce", 1000, 4, 8) == (250, 250)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("n,hosts", [(8, 1), (16, 2), (2, 1)])
def test_nccl_tests_text_round_trips(tmp_path, op, n, hosts):
    rows = _rows(op, n)
    text = cc.format_nccl_tests(op, rows, ranks=_ranks(n, hosts), dtype="float",
                                nccl_version="2.21.5", source=cc.provenance_line("test"))
    path = tmp_path / "sweep.txt"  # a neutral name: the op must come from the text
    path.write_text(text)
    (t,) = parse_nccl_tests_all(path)
    assert (t.op, t.op_source) == (op, "text")
    assert (t.n_ranks, t.n_ranks_source, t.n_nodes) == (n, "rank_lines", hosts)
    assert t.device_name == "NVIDIA H100 80GB HBM3" and t.nccl_version == "2.21.5"
    df = t.rows
    assert list(df["size_bytes"]) == [r.size_bytes for r in rows]
    assert list(df["count"]) == [r.count for r in rows]
    assert set(df["dtype"]) == {"float"} and set(df["root"]) == {-1}
    assert set(df["redop"]) == {"sum" if op in ("all_reduce", "reduce_scatter") else "none"}
    gather_kind = op in ("all_gather", "reduce_scatter", "all_to_all")
    np.testing.assert_array_equal(df["size_bytes"], df["count"] * 4 * (n if gather_kind else 1))
    for side, attr in (("oop", "oop_time_us"), ("ip", "ip_time_us")):
        t_us = np.array([getattr(r, attr) for r in rows])
        # time printed as %7.2f / %7.1f / %7.0f: within half a unit of the last digit
        half_unit = np.where(t_us >= 1e4, 0.5, np.where(t_us >= 100, 0.05, 0.005)) + 1e-9
        assert (np.abs(df[f"{side}_time_us"] - t_us) <= half_unit).all()
        algbw = df["size_bytes"] / (t_us * 1e-6) / 1e9
        np.testing.assert_allclose(df[f"{side}_algbw_gb_per_s"], algbw, atol=0.0051)
        np.testing.assert_allclose(df[f"{side}_busbw_gb_per_s"], algbw * busbw_factor(op, n),
                                   atol=0.0051)
        assert (df[f"{side}_wrong"] == 0).all()
    big = df.iloc[-1]  # the model's busbw comes back at large sizes
    assert big["oop_busbw_gb_per_s"] == pytest.approx(300.0, rel=0.02)  # 20 us latency
    mean_busbw = np.mean([cc._bw_cells(r.size_bytes, x, busbw_factor(op, n))[1]
                          for r in rows for x in (r.oop_time_us, r.ip_time_us)])
    assert t.avg_busbw_gb_per_s == pytest.approx(mean_busbw, rel=1e-5)


def test_unchecked_rows_print_na(tmp_path):
    rows = [cc.NcclRow(1 << 20, 1 << 18, 50.0, 49.0)]
    path = tmp_path / "x.txt"
    path.write_text(cc.format_nccl_tests("all_reduce", rows, ranks=_ranks(4)))
    (t,) = parse_nccl_tests_all(path)
    assert t.rows[["oop_wrong", "ip_wrong"]].isna().all().all()
    assert "Out of bounds" not in path.read_text()


def test_several_ops_in_one_file_parse_as_separate_tables(tmp_path):
    text = "".join(cc.format_nccl_tests(op, _rows(op, 8), ranks=_ranks(8)) for op in OPS)
    path = tmp_path / "all_ops.txt"
    path.write_text(text)
    tables = parse_nccl_tests_all(path)
    assert [t.op for t in tables] == list(OPS)
    assert all(t.n_ranks == 8 and t.n_nodes == 1 for t in tables)


def test_a_file_name_in_the_preamble_does_not_name_the_tables(tmp_path):
    """The kit's provenance line quotes its command, --out included: an output called sendrecv_perf.txt must
    not label every block send_recv; each block's '# Collective test starting:' line names its collective."""
    source = "# source: collective_sweep.py cmd=collective_sweep.py -e 4K --out scratch/sendrecv_perf.txt"
    text = "".join(cc.format_nccl_tests(op, _rows(op, 8), ranks=_ranks(8), source=source) for op in OPS)
    path = tmp_path / "sendrecv_perf.txt"
    path.write_text(text)
    assert [t.op for t in parse_nccl_tests_all(path)] == list(OPS)


def test_bad_dtype_and_op_are_refused():
    with pytest.raises(ValueError, match="nccl-tests type name"):
        cc.format_nccl_tests("all_reduce", [], ranks=_ranks(2), dtype="bf16")
    with pytest.raises(ValueError, match="unknown collective"):
        cc.busbw_factor("broadcast", 2)


def test_perfmodel_calibrate_consumes_the_kit_files(tmp_path):
    """The files the kit writes are accepted by ``perfmodel calibrate`` end to end."""
    from perfmodel.calibrate.command import run_calibration

    nccl = tmp_path / "nccl.txt"
    nccl.write_text("".join(cc.format_nccl_tests(op, _rows(op, 8), ranks=_ranks(8))
                            for op in ("all_reduce", "all_gather", "reduce_scatter")))
    # GEMMs at 70% of the H100's 989 TFLOP/s bf16 peak
    gemm = cc.write_gemm_csv([cc.GemmRow(s, s, s, "bf16", 2 * s**3 / (0.7 * 989e12), "grid", 50)
                              for s in (2048, 4096, 8192, 16384)], tmp_path / "gemm.csv")
    out = tmp_path / "profile.yaml"
    cal = run_calibration(gpu="h100-sxm5-80gb", out=out, nccl_tests=[nccl], gemms=[gemm],
                          echo=lambda *_: None)
    assert out.is_file()
    kinds = [i["kind"] for i in cal.provenance["inputs"]]
    assert kinds.count("nccl-tests") == 1 and kinds.count("gemm") == 1
    g = next(i for i in cal.provenance["inputs"] if i["kind"] == "gemm")
    assert g["points"] == 4 and 0.05 < g["matmul_efficiency_max"] <= 1.0


# ----------------------------------------------------------------------------- real runs (torch)
@pytest.fixture
def torch():
    return pytest.importorskip("torch")


def test_gemm_sweep_cpu_run_parses(torch, tmp_path):
    out = tmp_path / "gemm_cpu.csv"
    rows = gemm_sweep.run(gemm_sweep.parse_args(["--device", "cpu", "--quick", "--out", str(out)]))
    df = parse_gemm_csv(out)
    assert len(df) == len(rows) > 0
    assert list(df[["m", "n", "k"]].itertuples(index=False, name=None)) == [
        (r.m, r.n, r.k) for r in rows]
    np.testing.assert_allclose(df["time_s"], [r.time_s for r in rows], rtol=1e-9)
    np.testing.assert_allclose(df["tflop_per_s"], 2.0 * df.m * df.n * df.k / df.time_s / 1e12)
    assert "device=cpu" in out.read_text().splitlines()[0]


def test_attention_sweep_cpu_run(torch, tmp_path):
    import attention_sweep

    out = tmp_path / "attn_cpu.csv"
    rows = attention_sweep.run(attention_sweep.parse_args(
        ["--device", "cpu", "--quick", "--out", str(out)]))
    df = pd.read_csv(out, skiprows=1)
    assert len(df) == len(rows) == 4 and set(df["direction"]) == {"fwd", "fwd+bwd"}
    flop = [cc.attention_flop(r.batch, r.seq_len, r.n_heads, r.head_dim, r.causal == "yes",
                              r.direction) for r in df.itertuples()]
    np.testing.assert_allclose(df["tflop_per_s"], np.array(flop) / df["time_s"] / 1e12, rtol=1e-5)


def test_profile_layer_cpu_trace_parses(torch, tmp_path):
    import profile_layer

    out = profile_layer.run(profile_layer.parse_args(
        ["--device", "cpu", "--quick", "--out", str(tmp_path / "layer.json")]))
    summary = parse_kineto_trace(out)
    assert len(summary.step_time_s) == 2 and all(t > 0 for t in summary.step_time_s.values())
    doc = json.loads(out.read_text())
    assert "profile_layer.py" in doc["perfmodelSource"]
    names = {e.get("name") for e in doc["traceEvents"]}
    assert {"layer_fwd", "layer_bwd"} <= names


def test_memory_sweep_cpu_run(torch, tmp_path):
    import memory_sweep

    out = tmp_path / "memory_cpu.csv"
    rows = memory_sweep.run(memory_sweep.parse_args(["--device", "cpu", "--quick", "--out", str(out)]))
    df = pd.read_csv(out, comment="#")
    assert list(df.columns) == memory_sweep.COLUMNS
    assert len(df) == len(rows) == 4 * len(memory_sweep.QUICK_SIZES_MIB)
    assert set(df.op) == {"copy", "add", "swiglu", "adamw"}
    adamw = df[df.op == "adamw"]
    assert (adamw.bytes_moved == memory_sweep.ADAMW_BYTES_PER_PARAM * adamw.n_elements).all()
    np.testing.assert_allclose(df.gb_per_s, df.bytes_moved / df.time_s / 1e9, rtol=1e-3)


def test_sustained_gemm_cpu_run(torch, tmp_path):
    import sustained_gemm

    out = tmp_path / "sustained_cpu.csv"
    rows = sustained_gemm.run(sustained_gemm.parse_args(["--device", "cpu", "--quick", "--out", str(out)]))
    df = pd.read_csv(out, comment="#")
    assert len(df) == len(rows) > 0 and df.t_s.is_monotonic_increasing
    assert (df.tflop_per_s >= 0).all() and df.sm_clock_mhz.isna().all()  # no NVML reading on a CPU


def test_train_step_sweep_cpu_run_is_a_runs_csv_validate_scores(torch, tmp_path):
    import train_step_sweep

    from perfmodel.calibrate.parsers import read_runs_csv
    from perfmodel.validate import predict_runs

    out = tmp_path / "steps_cpu.csv"
    rows = train_step_sweep.run(train_step_sweep.parse_args(
        ["--gpu", "h100-sxm5-80gb", "--device", "cpu", "--quick", "--out", str(out)]))
    assert len(rows) == len(train_step_sweep.QUICK_CONFIGS)
    assert out.read_text().splitlines()[1] == ",".join(train_step_sweep.RUNS_COLUMNS)
    runs = read_runs_csv(out)
    assert list(runs.global_batch.astype(int)) == [mb * n for _, mb, n, _ in train_step_sweep.QUICK_CONFIGS]
    pred = predict_runs(runs)
    assert (pred.status == "ok").all() and (pred.pred_iteration_time_s > 0).all()


def test_layer_matches_gemm_shapes(torch):
    import profile_layer

    shape = gemm_sweep.MODELS["tiny"]
    layer = profile_layer.build_layer(torch, shape)
    n_params = sum(p.numel() for p in layer.parameters())
    d = shape.hidden // shape.n_heads
    expect = (shape.hidden * (shape.n_heads + 2 * shape.n_kv_heads) * d
              + shape.n_heads * d * shape.hidden + 3 * shape.hidden * shape.ffn + 2 * shape.hidden)
    assert n_params == expect
    y = layer(torch.randn(2, 16, shape.hidden))
    assert y.shape == (2, 16, shape.hidden)


def test_collective_sweep_refuses_one_rank(torch, tmp_path):
    """A one-rank sweep measures no link, and its all_gather table is one perfmodel's parser refuses."""
    cmd = [sys.executable, str(KIT / "collective_sweep.py"), "--spawn", "1", "-e", "4K", "--out", str(tmp_path / "x.txt")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0 and "one rank moves nothing over a link" in proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "x.txt").exists()


@pytest.mark.parametrize("world_size", [2, 4])
def test_collective_sweep_gloo_run_parses(torch, tmp_path, world_size):
    out = tmp_path / "nccl_cpu.txt"
    cmd = [sys.executable, str(KIT / "collective_sweep.py"), "--spawn", str(world_size),
           "-b", "1K", "-e", "16K", "-f", "4", "-w", "1", "-n", "3", "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    tables = parse_nccl_tests_all(out)
    assert [t.op for t in tables] == list(OPS)
    for t in tables:
        assert (t.n_ranks, t.n_nodes) == (world_size, 1)
        df = t.rows
        assert list(df["size_bytes"]) == [1024, 4096, 16384]
        assert (df["oop_wrong"] == 0).all() and (df["ip_wrong"] == 0).all()
        for side in ("oop", "ip"):
            algbw = df["size_bytes"] / (df[f"{side}_time_us"] * 1e-6) / 1e9
            np.testing.assert_allclose(df[f"{side}_algbw_gb_per_s"], algbw, rtol=1e-3,
                                       atol=0.0051)
            np.testing.assert_allclose(df[f"{side}_busbw_gb_per_s"],
                                       df[f"{side}_algbw_gb_per_s"] * busbw_factor(t.op, world_size),
                                       atol=0.011)


def test_wrong_count_sees_a_bad_chunk(torch):
    import collective_sweep

    expected = torch.tensor([1.0, 2.0, 3.0])
    good = torch.tensor([1.0, 1.0, 2.0, 2.0, 3.0, 3.0])
    assert collective_sweep._wrong(torch, good, expected) == 0
    assert collective_sweep._wrong(torch, torch.tensor([1.0, 1.0, 2.0, 9.0, 3.0, 3.0]), expected) == 1
    assert collective_sweep._wrong(torch, torch.full((4,), 8.0), torch.tensor([8.0])) == 0
    assert collective_sweep.parse_size("128M") == 128 * 2**20
    assert collective_sweep.sizes(8, 64, 2) == [8, 16, 32, 64]
