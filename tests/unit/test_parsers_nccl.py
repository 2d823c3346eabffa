"""nccl-tests parser against the shipped logs (facts read from the files themselves)."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from perfmodel.calibrate.parsers import busbw_factor, parse_nccl_tests, parse_nccl_tests_all
from perfmodel.calibrate.parsers.bench_tables import (
    parse_markdown_tables,
    parse_size_bw_table,
    read_summary_csv,
)
from perfmodel.errors import InputError

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "parsers"
COLL = DATA / "collectives"
NCCL = DATA / "traces" / "nccl"
needs_data = pytest.mark.skipif(not DATA.is_dir(), reason="shared data folder absent")

# Files in the collectives folders that are not nccl-tests stdout (prose with markdown
# tables, a hand-trimmed 4-column table, CSV / markdown summaries, p2p matrices).
NOT_NCCL_TESTS = {
    "hf_playbook_H100_collective_bw_vs_nodes_256MB.csv", "mle_A100_1node_allreduce_ncclTests.txt",
    "mle_B200_1node_vs_4node_allreduce_torch.txt", "mle_H200_1node_allreduce_torch.txt",
    "mle_NVLS_SHARP_H200_B200_ncclTests.txt", "mle_p2p_A100_H100_GB200.txt",
    "mle_unspecified_allreduce_bench_example.txt", "summary.csv.txt", "summary.md.txt",
}


def _all_files() -> list[Path]:
    if not DATA.is_dir():
        return []
    return sorted(p for p in [*COLL.rglob("*"), *NCCL.glob("*")] if p.is_file())


def _nccl_files() -> list[Path]:
    return [p for p in _all_files() if p.name not in NOT_NCCL_TESTS]


@pytest.mark.parametrize("n,expected", [(2, 1.0), (8, 1.75), (16, 1.875)])
def test_busbw_factor_all_reduce(n, expected):
    assert busbw_factor("all_reduce", n) == pytest.approx(expected)


def test_busbw_factor_other_ops():
    assert busbw_factor("all_gather", 8) == pytest.approx(7 / 8)
    assert busbw_factor("reduce_scatter", 4) == pytest.approx(3 / 4)
    assert busbw_factor("all_to_all", 2) == pytest.approx(0.5)
    for op in ("broadcast", "reduce", "send_recv"):
        assert busbw_factor(op, 16) == 1.0
    with pytest.raises(InputError):
        busbw_factor("all_scatter", 8)


@needs_data
def test_every_nccl_tests_file_parses_and_others_are_rejected():
    files = _all_files()
    assert len(_nccl_files()) == 86  # 80 ALCF + 2 cluster00/01 sets (5) + 3 GitHub/CoreWeave + 6 AWS/OCI
    for path in files:
        if path.name in NOT_NCCL_TESTS:
            with pytest.raises(InputError, match=re.escape(path.name) + r":1: "):
                parse_nccl_tests_all(path)
        else:
            for result in parse_nccl_tests_all(path):
                assert len(result.rows) > 0 and result.op is not None, path


@needs_data
@pytest.mark.parametrize("path", _nccl_files(), ids=lambda p: p.name)
def test_busbw_over_algbw_is_the_nccl_tests_factor(path):
    for result in parse_nccl_tests_all(path):
        assert result.n_ranks is not None, path
        rows = result.rows
        for side in ("oop", "ip"):
            algbw, busbw = rows[f"{side}_algbw_gb_per_s"], rows[f"{side}_busbw_gb_per_s"]
            factor = busbw_factor(result.op, result.n_ranks)
            # both printed with 2 decimals
            assert np.all(np.abs(busbw - factor * algbw) <= 0.005 + 0.005 * factor + 1e-9)
            # algbw = S / t with S in bytes and t in µs (GB = 1e9 B)
            ok = (rows[f"{side}_time_us"] > 0) & (algbw >= 1.0)
            s_over_t = rows["size_bytes"][ok] / rows[f"{side}_time_us"][ok] / 1e3
            np.testing.assert_allclose(s_over_t, algbw[ok], rtol=2e-3, atol=0.006)


@needs_data
def test_aws_p5_one_node():
    r = parse_nccl_tests(NCCL / "aws_p5_1node_h100_allreduce.txt")
    assert r.op == "all_reduce" and len(r.rows) == 32
    last = r.rows.iloc[-1]
    assert last["size_bytes"] == 17179869184 and last["count"] == 4294967296
    assert last["oop_busbw_gb_per_s"] == 483.05 and last["oop_algbw_gb_per_s"] == 276.03
    assert last["ip_busbw_gb_per_s"] == 483.35 and last["oop_time_us"] == 62239
    assert (r.n_ranks, r.n_ranks_source) == (8, "bw_ratio")  # no Rank lines in the excerpt
    assert r.avg_busbw_gb_per_s == 156.742 and r.rows["dtype"].eq("float").all()


@needs_data
def test_aws_two_node_files():
    r = parse_nccl_tests(NCCL / "aws_p5_2node_h100_allreduce.txt")
    assert r.n_ranks == 16 and r.rows["oop_busbw_gb_per_s"].iloc[-1] == 487.09
    r = parse_nccl_tests(NCCL / "aws_p4de_2node_a100_allreduce.txt")
    assert r.n_ranks == 16 and len(r.rows) == 29 and r.rows["oop_busbw_gb_per_s"].max() == 78.33
    r = parse_nccl_tests(NCCL / "aws_p5_2node_h100_eks_allreduce_partial.txt")  # '...' elided
    assert len(r.rows) == 7 and r.rows["size_bytes"].iloc[0] == 0
    assert r.rows.set_index("size_bytes").loc[2147483648, "oop_busbw_gb_per_s"] == 437.79


@needs_data
def test_oci_two_runs_in_one_file():
    one, two = parse_nccl_tests_all(NCCL / "oci_bm_gpu4_8_a100_1node_and_2node_10GiB.txt")
    assert (one.n_ranks, one.n_nodes, one.n_ranks_source) == (8, 1, "rank_lines")
    assert (two.n_ranks, two.n_nodes) == (16, 2)
    assert one.rows["oop_busbw_gb_per_s"].item() == 235.43
    assert two.rows["oop_busbw_gb_per_s"].item() == 164.07
    assert one.device_name == "NVIDIA A100-SXM4-40GB" and one.first_line == 22
    assert parse_nccl_tests(NCCL / "oci_bm_gpu4_8_a100_1node_and_2node_10GiB.txt").rows.equals(one.rows)


@needs_data
def test_cluster01_ten_nodes_five_collectives_match_summary():
    summary = parse_markdown_tables(COLL / "xxrjun_cluster01_H100_10nodes" / "summary.md.txt")[0]
    ops = {"all_reduce": "all_reduce_perf", "all_gather": "all_gather_perf",
           "reduce_scatter": "reduce_scatter_perf", "all_to_all": "alltoall_perf",
           "send_recv": "sendrecv_perf"}
    for g in (1, 2, 4, 8):
        results = parse_nccl_tests_all(COLL / "xxrjun_cluster01_H100_10nodes" / f"nccl_N10_G{g}.log.txt")
        assert [r.op for r in results] == list(ops)
        for r in results:
            assert (r.n_ranks, r.n_nodes, r.nccl_version) == (10 * g, 10, "2.29.2")
            row = summary[(summary["file"] == f"nccl_N10_G{g}.log") & (summary["test"] == ops[r.op])]
            assert r.avg_busbw_gb_per_s == pytest.approx(row["avgbusbw_gb_s"].item(), abs=6e-4)
            peak = r.rows[["oop_busbw_gb_per_s", "ip_busbw_gb_per_s"]].to_numpy().max()
            assert peak == pytest.approx(row["peakbusbw_gb_s"].item())
    sendrecv = results[-1].rows
    assert sendrecv["ip_wrong"].isna().all() and (sendrecv["oop_wrong"] == 0).all()


@needs_data
def test_cluster00_pairwise_matches_summary_csv():
    summary = read_summary_csv(COLL / "xxrjun_cluster00_H100_pairwise" / "summary.csv.txt")
    a2a, sr = parse_nccl_tests_all(COLL / "xxrjun_cluster00_H100_pairwise"
                                   / "nccl_N2_G1_cnode2-001_cnode2-002.log.txt")
    assert (a2a.op, sr.op, a2a.n_ranks, a2a.n_nodes) == ("all_to_all", "send_recv", 2, 2)
    assert a2a.rows["redop"].eq("none").all() and a2a.rows["root"].eq(-1).all()
    row = summary[(summary["file"] == "nccl_N2_G1_cnode2-001_cnode2-002.log")
                  & (summary["test"] == "alltoall_perf")]
    assert a2a.avg_busbw_gb_per_s == pytest.approx(row["avg_bus_bw_GBs"].item(), abs=1e-4)


@needs_data
def test_alcf_ranks_and_nodes_match_file_names():
    for path in sorted((COLL / "alcf_polaris_A100_slingshot").glob("*.txt")):
        n_nodes = int(re.search(r"__n(\d+)\.g4", path.name).group(1))
        r = parse_nccl_tests(path)
        assert (r.n_nodes, r.n_ranks) == (n_nodes, 4 * n_nodes), path.name
        named = re.search(r"(all_reduce|all_gather|alltoall)_output", path.name)
        expected = {"all_reduce": "all_reduce", "all_gather": "all_gather",
                    "alltoall": "all_to_all", None: "all_reduce"}[named and named.group(1)]
        assert r.op == expected, path.name  # unnamed output.dat files: sum + per-rank size


@needs_data
def test_coreweave_rank_count_from_bandwidth_ratio():
    r = parse_nccl_tests(COLL / "coreweave_H100_64gpu_SHARP_allreduce.txt")
    # busbw/algbw = 1.9792 in every row = 2*95/96: the numbers say 96 ranks, although the
    # provenance line says 64 GPUs (64 would give 1.96875).
    assert (r.n_ranks, r.n_ranks_source, len(r.rows)) == (96, "bw_ratio", 5)


@needs_data
def test_trimmed_and_markdown_tables():
    a100 = parse_size_bw_table(COLL / "mle_A100_1node_allreduce_ncclTests.txt")
    assert len(a100) == 20 and a100["size_bytes"].iloc[0] == 32768
    assert a100["busbw_gb_per_s"].iloc[-1] == 234.89
    np.testing.assert_allclose(a100["busbw_gb_per_s"] / a100["algbw_gb_per_s"], 1.75, atol=0.01)
    h200 = parse_markdown_tables(COLL / "mle_H200_1node_allreduce_torch.txt")[0]
    assert h200["payload_bytes"].iloc[-1] == 16 * 2**30 and h200["busbw_gb_per_s"].iloc[-1] == 482.26
    hf = read_summary_csv(COLL / "hf_playbook_H100_collective_bw_vs_nodes_256MB.csv")
    assert len(hf) == 21 and hf.loc[0, "median_bw_GBps"] == 435.967


def test_prefixed_lines_parse_like_the_original():
    plain = parse_nccl_tests(FIXTURES / "nccl_error_header.txt")
    for name in ("nccl_openmpi_prefixed.txt", "nccl_srun_prefixed.txt"):
        r = parse_nccl_tests(FIXTURES / name)
        assert (r.op, r.n_ranks, r.n_nodes, len(r.rows)) == ("all_reduce", 16, 2, 5)
        assert r.rows["oop_busbw_gb_per_s"].iloc[-1] == 464.57
        assert r.rows.drop(columns=["oop_wrong", "ip_wrong"]).equals(
            plain.rows.drop(columns=["oop_wrong", "ip_wrong"]))


def test_old_error_header():
    r = parse_nccl_tests(FIXTURES / "nccl_error_header.txt")
    assert (r.rows["oop_wrong"] == 0).all() and r.rows["ip_busbw_gb_per_s"].iloc[0] == 445.32


def test_truncated_row_names_file_and_line():
    with pytest.raises(InputError, match=r"nccl_truncated\.txt:28: nccl-tests row: .*truncated"):
        parse_nccl_tests(FIXTURES / "nccl_truncated.txt")


def test_non_numeric_row(tmp_path):
    bad = tmp_path / "bad.txt"
    lines = (FIXTURES / "nccl_error_header.txt").read_text().splitlines()
    lines[25] = lines[25].replace("4511.2", "45x1.2")
    bad.write_text("\n".join(lines))
    with pytest.raises(InputError, match=r"bad\.txt:26: .*oop_time_us"):
        parse_nccl_tests(bad)


def test_no_rows(tmp_path):
    empty = tmp_path / "empty.log"
    empty.write_text("# nThread 1 nGpus 8\n#  size count type\n")
    with pytest.raises(InputError, match=r"empty\.log:1: .*no data rows"):
        parse_nccl_tests(empty)


# ---- bad cells: one InputError naming file, line and column (robustness probe) --------------
def _fixture_with_cell(tmp_path, column: int, value: str, line: int = 26) -> Path:
    """nccl_error_header.txt with data line ``line`` (1-based) cell ``column`` (0-based) set to
    ``value``; columns: size count type redop root time algbw busbw error time algbw busbw error."""
    lines = (FIXTURES / "nccl_error_header.txt").read_text().splitlines()
    cells = lines[line - 1].split()
    cells[column] = value
    lines[line - 1] = "  ".join(cells)
    bad = tmp_path / "bad.txt"
    bad.write_text("\n".join(lines) + "\n")
    return bad


@pytest.mark.parametrize("column,value,field", [
    (1, "N/A", "count"),                                  # was IntCastingNaNError
    (4, "N/A", "root"),                                   # was IntCastingNaNError
    (6, "N/A", "oop_algbw_gb_per_s"),                     # all-N/A algbw was an idxmax crash
    (7, "N/A", "oop_busbw_gb_per_s"),
    (5, "N/A", "oop_time_us"),
    (5, "inf", "oop_time_us"),                            # was least_squares "not finite"
    (5, "nan", "oop_time_us"),                            # row was dropped silently
    (5, "0", "oop_time_us"),                              # all-zero times wrote an "n/a" profile
    (5, "-5", "oop_time_us"),                             # row was dropped silently
    (9, "0", "ip_time_us"),
    (7, "-100", "oop_busbw_gb_per_s"),
    (6, "inf", "oop_algbw_gb_per_s"),
    (1, "2.5", "count"),
    (4, "x", "root"),
    (4, "-2", "root"),
    (0, "99999999999999999999999", "size_bytes"),         # was cast to int64 garbage, exit 0
])
def test_bad_cell_names_file_line_and_column(tmp_path, column, value, field):
    bad = _fixture_with_cell(tmp_path, column, value, line=27)
    with pytest.raises(InputError, match=rf"bad\.txt:27: {field}: ") as exc:
        parse_nccl_tests_all(bad)
    assert exc.value.field == field


@pytest.mark.parametrize("column", [8, 9, 10, 11, 12])
def test_na_allowed_in_in_place_and_wrong_columns(tmp_path, column):
    r = parse_nccl_tests(_fixture_with_cell(tmp_path, column, "N/A", line=27))
    assert len(r.rows) == 5 and r.rows.iloc[1].isna().sum() == 1
    assert r.rows["size_bytes"].dtype == np.int64 and r.rows["oop_time_us"].notna().all()


def test_srun_labels_padded_with_spaces_are_stripped():
    """Slurm right-aligns `srun -l` task labels (' 0: ') once there are 10 or more tasks."""
    path = Path(__file__).resolve().parents[1] / "fixtures" / "valid" / "srun_padded_all_reduce.txt"
    res = parse_nccl_tests(path)
    assert res.op == "all_reduce" and len(res.rows) > 10 and (res.rows["size_bytes"] >= 2**20).any()


_MPI_ALL_GATHER = """# nccl-tests version 2.18.0 nccl-headers=22907 nccl-library=22907
# Collective test starting: all_gather_perf_mpi
# nThread 1 nGpus 1 minBytes 1048576 maxBytes 2097152 step: 2(factor) warmup iters: 10 iters: 50
#
# Using devices
#  Rank  0 Group  0 Pid 100 on      node1 device  0 [0000:02:00] NVIDIA H100 80GB HBM3
#  Rank  1 Group  0 Pid 101 on      node1 device  1 [0000:03:00] NVIDIA H100 80GB HBM3
#
#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)
     1048576        131072     float    none      -1    20.00   52.43   26.21       0    20.00   52.43   26.21       0
     2097152        262144     float    none      -1    30.00   69.91   34.95       0    30.00   69.91   34.95       0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 30.58
"""


def test_an_mpi_builds_binary_names_its_collective(tmp_path):
    """nccl-tests built with MPI announce 'all_gather_perf_mpi': the op was not read from it, and an
    all_gather table (which its rows cannot tell from alltoall) was refused."""
    f = tmp_path / "rep1.log"
    f.write_text(_MPI_ALL_GATHER)
    r = parse_nccl_tests(f)
    assert (r.op, r.op_source, r.n_ranks, r.avg_busbw_gb_per_s) == ("all_gather", "text", 2, 30.58)


def test_a_table_of_every_type_reads_its_bfloat16_rows(tmp_path, capsys):
    """'-d all' prints each size once per type, and the types reduce at different rates (a public 16-H200
    table: int8 390, bfloat16 484 GB/s busbw): all the rows were fitted as one collective. One training type
    is read, said in a note; a table of no training type is refused."""
    head = _MPI_ALL_GATHER.split("     1048576")[0].replace("all_gather_perf_mpi", "all_reduce_perf")

    def table(types):
        rows = []
        for size in (1048576, 2097152):
            for dtype, width, bus in types:
                t = size / (bus * 1e9) * 1e6  # all_reduce over 2 ranks: busbw = algbw
                bw = size / t / 1e3
                rows.append(f"{size:12d} {size // width:12d} {dtype:>9} sum -1 {t:8.2f} {bw:7.2f} {bw:7.2f} 0 "
                            f"{t:8.2f} {bw:7.2f} {bw:7.2f} 0")
        return head + "\n".join(rows) + "\n# Out of bounds values : 0 OK\n"

    f = tmp_path / "all_reduce_dall.txt"
    f.write_text(table([("int8", 1, 300.0), ("bfloat16", 2, 480.0), ("float", 4, 482.0)]))
    r = parse_nccl_tests(f)
    assert r.op == "all_reduce" and r.rows.dtype.tolist() == ["bfloat16", "bfloat16"]
    assert r.rows.oop_busbw_gb_per_s.tolist() == pytest.approx([480.0, 480.0], abs=0.01)
    err = capsys.readouterr().err
    assert err.count("note:") == 1 and "3 data types (int8, bfloat16, float)" in err and "4 left out" in err
    ints = tmp_path / "all_reduce_ints.txt"
    ints.write_text(table([("int8", 1, 300.0), ("int32", 4, 450.0)]))
    with pytest.raises(InputError, match=r"none a training step reduces in .*-d bfloat16"):
        parse_nccl_tests(ints)
    one = tmp_path / "all_reduce_int8.txt"  # one type, whatever it is, is read as before
    one.write_text(table([("int8", 1, 300.0)]))
    assert parse_nccl_tests(one).rows.dtype.tolist() == ["int8", "int8"]


def test_rccl_tests_trailer_keeps_the_average(tmp_path):
    """rccl-tests prints '# Errors with asterisks ...' before the trailer: the table ended there and the
    '# Avg bus bandwidth' it prints was lost."""
    f = tmp_path / "rccl_all_gather.txt"
    f.write_text(_MPI_ALL_GATHER.replace("# Out of bounds", "# Errors with asterisks indicate errors that have "
                                         "exceeded the maximum threshold.\n# Out of bounds"))
    assert parse_nccl_tests(f).avg_busbw_gb_per_s == 30.58
