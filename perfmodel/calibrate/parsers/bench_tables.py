"""Small collective-benchmark summary tables that are not nccl-tests stdout.

- Markdown pipe tables (``| payload | busbw | algbw |`` from all_reduce_bench.py, the
  nccl-tests-cluster ``summary.md``): sizes like ``32KiB`` become ``<col>_bytes`` (binary
  prefixes) and ``1.20GBps`` cells become ``<col>_gb_per_s`` (GB = 1e9 bytes).
- Comment-headed CSV summaries (``# PROVENANCE`` line, then a header): ``read_summary_csv``.
- Hand-trimmed nccl-tests tables with only ``size time algbw busbw`` columns and ``_`` digit
  separators (stas00/ml-engineering): ``parse_size_bw_table``.
"""
from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from perfmodel.calibrate.parsers._csv_table import read_csv_text
from perfmodel.errors import InputError, read_text_file

_SIZE_RE = re.compile(r"^([\d.]+)\s*(B|KiB|MiB|GiB|TiB)$")
_SIZE_BYTES = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}
_GBPS_RE = re.compile(r"^([\d.]+)\s*GBps$")
_NUM_RE = re.compile(r"^-?[\d.]+(?:[eE][+-]?\d+)?$")


def _snake(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_") or "col"


def _convert_column(name: str, cells: list[str]) -> tuple[str, list]:
    """Rename and convert one column when every non-empty cell has the same unit."""
    filled = [c for c in cells if c]
    for regex, suffix, scale in ((_SIZE_RE, "_bytes", None), (_GBPS_RE, "_gb_per_s", 1.0)):
        if filled and all(regex.match(c) for c in filled):
            out = []
            for c in cells:
                m = regex.match(c)
                out.append(None if m is None else float(m.group(1)) * (
                    _SIZE_BYTES[m.group(2)] if scale is None else scale))
            return name + suffix, out
    if filled and all(_NUM_RE.match(c) for c in filled):
        return name, [float(c) if c else None for c in cells]
    return name, cells


def parse_markdown_tables(path: str | Path) -> list[pd.DataFrame]:
    """Every ``| a | b |`` table in the file (header, ``---`` rule, rows), in order."""
    path = Path(path)
    tables: list[pd.DataFrame] = []
    block: list[list[str]] = []
    for raw in read_text_file(path, "table", errors="replace").splitlines() + [""]:
        line = raw.strip()
        if line.startswith("|") and line.endswith("|"):
            block.append([c.strip() for c in line[1:-1].split("|")])
            continue
        if len(block) >= 3 and all(re.fullmatch(r":?-+:?", c) for c in block[1]):
            header = [_snake(c) for c in block[0]]
            body = [r for r in block[2:] if len(r) == len(header)]
            columns = {}
            for j, name in enumerate(header):
                new_name, values = _convert_column(name, [r[j] for r in body])
                columns[new_name] = values
            tables.append(pd.DataFrame(columns))
        block = []
    return tables


def read_summary_csv(path: str | Path) -> pd.DataFrame:
    """A CSV after optional ``#`` lines; columns whose filled cells are all numbers become
    float (blank -> NaN)."""
    df, _, _ = read_csv_text(path)
    for col in df.columns:
        cells = df[col].astype(str).str.strip()
        filled = cells[cells != ""]
        if len(filled) and filled.str.fullmatch(_NUM_RE.pattern).all():
            df[col] = pd.to_numeric(cells.where(cells != "", None))
    return df


def parse_size_bw_table(path: str | Path) -> pd.DataFrame:
    """A trimmed nccl-tests table: header ``size time algbw busbw`` (any subset, size
    first, no ``#``), an optional ``(B) (us) ...`` unit line, then numeric rows."""
    path = Path(path)
    names = {"size": "size_bytes", "time": "time_us", "algbw": "algbw_gb_per_s",
             "busbw": "busbw_gb_per_s"}
    columns: list[str] | None = None
    rows: list[list[float]] = []
    for lineno, raw in enumerate(read_text_file(path, "table", errors="replace").splitlines(), start=1):
        tokens = raw.split()
        if columns is None:
            if tokens and tokens[0] == "size" and set(tokens) <= set(names):
                columns = [names[t] for t in tokens]
            continue
        if tokens and all(t.startswith("(") for t in tokens):
            continue
        cells = [t.replace("_", "") for t in tokens]
        if len(cells) != len(columns) or not all(_NUM_RE.match(c) for c in cells):
            if rows:
                break
            raise InputError("size/bw table row", f"expected {len(columns)} numbers, got "
                             f"{raw.strip()!r}", f"{path}:{lineno}")
        rows.append([float(c) for c in cells])
    if not rows:
        raise InputError("size/bw table", "no 'size time algbw busbw' table found", f"{path}:1")
    return pd.DataFrame(rows, columns=columns).astype({"size_bytes": "int64"})
