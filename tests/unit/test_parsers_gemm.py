"""GEMM CSV parser (``perfmodel calibrate --gemm``): every bad row is one InputError naming the
file, the line and the column; nothing is guessed (unknown dtype) or rounded (fractional m)."""
from __future__ import annotations

import pytest

from perfmodel.calibrate.parsers import parse_gemm_csv
from perfmodel.calibrate.parsers.gemm_csv import GEMM_DTYPES, MAX_DIM
from perfmodel.errors import InputError

HEADER = "m,n,k,dtype,time_us\n"
GOOD = "8192,8192,8192,bf16,1500\n"


def _csv(tmp_path, text: str):
    path = tmp_path / "g.csv"
    path.write_text(text)
    return path


@pytest.mark.parametrize("row,field", [
    ("0,4096,4096,bf16,200", "m"),                         # was least_squares "not finite"
    ("-4096,4096,4096,bf16,200", "m"),
    ("99999999999999999999,4096,4096,bf16,200", "m"),      # 1e20: past MAX_DIM
    (f"{MAX_DIM + 1},4096,4096,bf16,200", "m"),
    ("4096.5,4096,4096,bf16,200", "m"),                    # was accepted as 4096.5
    ("4096,0,4096,bf16,200", "n"),
    ("4096,4096,0.5,bf16,200", "k"),
    ("4096,4096,4096,int3,200", "dtype"),                  # was costed as bf16
    ("4096,4096,4096,,200", "dtype"),                      # blank: was costed as bf16
    ("4096,4096,4096,bf16,nan", "time_us"),
    ("4096,4096,4096,bf16,inf", "time_us"),
    ("4096,4096,4096,bf16,0", "time_us"),
])
def test_bad_row_names_file_line_and_column(tmp_path, row, field):
    with pytest.raises(InputError, match=rf"g\.csv:3: {field}: ") as exc:
        parse_gemm_csv(_csv(tmp_path, HEADER + GOOD + row + "\n"))
    assert exc.value.field == field


def test_unknown_dtype_names_the_allowed_ones(tmp_path):
    with pytest.raises(InputError) as exc:
        parse_gemm_csv(_csv(tmp_path, HEADER + "4096,4096,4096,int3,200\n"))
    assert all(d in exc.value.rule for d in GEMM_DTYPES) and "'int3'" in exc.value.rule


def test_header_only_is_no_data_rows(tmp_path):
    # was a profile with "0 shapes, median |error| = nan%"
    with pytest.raises(InputError, match=r"g\.csv:1: csv: no data rows"):
        parse_gemm_csv(_csv(tmp_path, HEADER))


def test_two_time_columns_are_ambiguous(tmp_path):
    with pytest.raises(InputError, match=r"g\.csv:1: csv columns: more than one time column"):
        parse_gemm_csv(_csv(tmp_path, "m,n,k,dtype,time_us,time_ms\n4096,4096,4096,bf16,200,0.2\n"))


@pytest.mark.parametrize("given,canonical", [
    ("bf16", "bf16"), ("BFloat16", "bf16"), ("torch.bfloat16", "bf16"), ("float16", "fp16"),
    ("half", "fp16"), ("fp32", "fp32"), ("float32", "fp32"), ("FP8", "fp8"), ("float8_e4m3fn", "fp8"),
    ("FP8 e4m3", "fp8"), ("fp8_e4m3fn", "fp8"), ("e4m3fn", "fp8"), ("float8_e4m3fnuz", "fp8"), ("fp8e4m3", "fp8"),
    ("torch.float8_e5m2", "fp8"),
])
def test_dtype_spellings_become_canonical(tmp_path, given, canonical):
    df = parse_gemm_csv(_csv(tmp_path, f"m,n,k,dtype,time_us\n4096.0,4096,4096,{given},200\n"))
    assert df["dtype"].tolist() == [canonical] and df["m"].tolist() == [4096]
    assert str(df["m"].dtype) == "int64" and df.attrs["lines"] == [2] and df.attrs["time_column"] == "time_us"


@pytest.mark.parametrize("gzipped", [False, True])
def test_the_source_lines_device_is_read_from_a_gzipped_file_too(tmp_path, gzipped):
    """The ``# source: ...; device=NAME`` line above the header is read as the table is: a gzipped file is
    decompressed, not scanned as bytes (which found no device, and the --gpu check was skipped)."""
    import gzip

    text = "# source: my mamf sweep; device=NVIDIA A100-SXM4-80GB\nm,n,k,dtype,time_us\n4096,4096,4096,bf16,500\n"
    path = tmp_path / ("g.csv.gz" if gzipped else "g.csv")
    path.write_bytes(gzip.compress(text.encode()) if gzipped else text.encode())
    df = parse_gemm_csv(path)
    assert df.attrs["device"] == "NVIDIA A100-SXM4-80GB" and df.attrs["device_line"] == 1
