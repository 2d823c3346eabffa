"""Shared CSV reading for the parsers: keeps each row's file line for error messages.

Leading ``#`` lines (provenance headers) are skipped; the first other line is the header.
"""
from __future__ import annotations

import csv
import io
import re
from pathlib import Path

import numpy as np
import pandas as pd

from perfmodel.errors import InputError, read_text_file


def read_csv_text(path: str | Path) -> tuple[pd.DataFrame, list[int], int]:
    """(all cells as str, file line of each row, file line of the header)."""
    path = Path(path)
    text = read_text_file(path, "csv")
    head = text.lstrip()[:1]
    if head in ("{", "["):  # a JSON document (a profiler trace, a config) given where a CSV belongs
        raise InputError("csv", "the file is JSON, not a comma-separated table (a trace goes to --trace)", f"{path}:1")
    with io.StringIO(text, newline="") as fh:
        _refuse_open_quote(text, path)
        reader = csv.reader(fh)
        header: list[str] | None = None
        header_line = 0
        rows: list[list[str]] = []
        lines: list[int] = []
        for record in _records(reader, path):
            if header is None:
                if not record or record[0].lstrip().startswith("#"):
                    continue
                header, header_line = [c.strip() for c in record], reader.line_num
                continue
            if not any(c.strip() for c in record):
                continue
            if len(record) != len(header):
                raise InputError("csv row", f"expected {len(header)} cells, got {len(record)}",
                                 f"{path}:{reader.line_num}")
            rows.append(record)
            lines.append(reader.line_num)
    if header is None:
        raise InputError("csv header", "file is empty (no header line)", f"{path}:1")
    if len(header) == 1:
        for sep, name in ((";", "';'"), ("\t", "tab")):
            if sep in header[0]:  # a spreadsheet's export in a locale whose decimal mark is the comma
                raise InputError("csv header", f"one column named {header[0][:60]!r}: is it {name}-separated? "
                                 "perfmodel reads comma-separated CSV", f"{path}:{header_line}")
    require_unique_columns(header, path, header_line)
    return pd.DataFrame(rows, columns=header, dtype=object), lines, header_line


def _records(reader, path: Path):
    """The reader's records; a record the csv module refuses (a cell over its 131,072-character limit) is
    an InputError naming its line, not a traceback."""
    while True:
        try:
            yield next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            limit = "field larger than field limit" in str(exc)
            rule = (f"has a cell longer than {csv.field_size_limit():,} characters, the most a CSV cell may hold here"
                    if limit else f"cannot be read as CSV ({exc})")
            raise InputError("csv row", rule, f"{path}:{reader.line_num}") from None


_QUOTED_BODY = re.compile(r'(?:[^"]|"")*')
_UNQUOTED = re.compile(r"[^,\r\n]*")


def _refuse_open_quote(text: str, path: Path) -> None:
    """A file that ends inside a quoted cell (cut short) is refused: csv's reader would put the rest of
    the file in that cell. Only that: what else a strict reader refuses (a space padding a cell after its
    closing quote, as hand-aligned tables have) stays read as it was. The scan follows csv's reader: a
    quote opens a quoted cell only as a cell's first character, and two quotes inside one are a quote."""
    pos, n = 0, len(text)
    while pos < n:
        if text[pos] == '"':
            end = _QUOTED_BODY.match(text, pos + 1).end()
            if end >= n:
                line = text.count("\n", 0, pos) + 1
                raise InputError("csv", "a quoted cell is not closed before the end of the file (is the file "
                                 "cut short?)", f"{path}:{line}")
            pos = end + 1
        pos = _UNQUOTED.match(text, pos).end() + 1  # the rest of the cell, then its delimiter


def require_unique_columns(columns, path: str | Path, header_line: int) -> None:
    """A column named twice would make every later lookup ambiguous: refused, naming it."""
    names = list(columns)
    dup = sorted({c for c in names if names.count(c) > 1})
    if dup:
        raise InputError("csv columns", f"column(s) {dup} appear more than once in the header", f"{path}:{header_line}")


def require_columns(df: pd.DataFrame, required: list[str], path: str | Path,
                    header_line: int) -> None:
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise InputError("csv columns", f"missing required column(s) {missing}; "
                         f"found {list(df.columns)}", f"{path}:{header_line}")


def to_numeric(df: pd.DataFrame, columns: list[str], lines: list[int],
               path: str | Path, *, integer: bool = False, row_errors: list[str] | None = None) -> None:
    """Convert ``columns`` in place (blank -> NaN). A non-numeric cell raises InputError, or, when
    ``row_errors`` (one string per row) is given, becomes NaN and is noted in that row's entry."""
    for col in columns:
        cells = df[col].map(lambda v: "" if v is None or v != v else str(v).strip())
        values = pd.to_numeric(cells.where(cells != "", None), errors="coerce")
        bad = (values.isna() & (cells != "") & (cells.str.lower() != "nan")) | (
            values.notna() & ~np.isfinite(values.astype(float)))
        values = values.where(~bad)
        if bad.any() and row_errors is None:
            i = int(np.flatnonzero(bad.to_numpy())[0])
            raise InputError(col, f"not a number: {cells.iloc[i]!r}", f"{path}:{lines[i]}")
        for i in np.flatnonzero(bad.to_numpy()):
            note = f"{col}: not a finite number ({cells.iloc[i]!r})"
            row_errors[i] = f"{row_errors[i]}; {note}" if row_errors[i] else note
        # (a whole number beyond int64 stays a float: cast, it would wrap to a negative one)
        if integer and values.notna().all() and (values == values.round()).all() and (
                values.abs() < 2.0**63).all():
            values = values.astype("int64")
        df[col] = values
