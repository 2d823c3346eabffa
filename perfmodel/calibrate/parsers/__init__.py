"""Readers for measured inputs to calibration: nccl-tests, Kineto traces, training logs,
GEMM timings, measured-runs CSVs and the small benchmark summary tables. Pure functions:
a path in, a frozen result or a DataFrame out, ``InputError`` (with ``file:line``) on garbage.
"""
from perfmodel.calibrate.parsers.bench_tables import parse_markdown_tables, parse_size_bw_table
from perfmodel.calibrate.parsers.gemm_csv import parse_gemm_csv
from perfmodel.calibrate.parsers.kineto import KinetoSummary, classify_kernel, parse_kineto_trace
from perfmodel.calibrate.parsers.nccl_tests import (
    NcclTestsResult,
    busbw_factor,
    parse_nccl_tests,
    parse_nccl_tests_all,
)
from perfmodel.calibrate.parsers.runs_csv import read_runs_csv
from perfmodel.calibrate.parsers.training_logs import parse_training_log

__all__ = [
    "KinetoSummary", "NcclTestsResult", "busbw_factor", "classify_kernel", "parse_gemm_csv",
    "parse_kineto_trace", "parse_markdown_tables", "parse_nccl_tests", "parse_nccl_tests_all",
    "parse_size_bw_table", "parse_training_log", "read_runs_csv",
]
