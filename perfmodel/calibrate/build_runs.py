"""Shared ends of the scripts that convert a published table into the runs schema
(``calibration/build_outofsample.py``, ``calibration/build_dgxc.py``): the rows as a frame in the
schema's column order, and the write that refuses a table whose rows disagree with themselves."""
from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd


def runs_frame(rows: list[dict], prefix: str, header_from: Path) -> pd.DataFrame:
    """``rows`` with run ids ``prefix-001``... in the columns (and order) of ``header_from``'s header."""
    frame = pd.DataFrame(rows)
    frame.insert(0, "run_id", [f"{prefix}-{i + 1:03d}" for i in range(len(frame))])
    header = header_from.read_text().splitlines()[0].split(",")
    return frame.reindex(columns=header)


def write_runs(frame: pd.DataFrame, problems: list[str], out: Path, root: Path) -> int:
    """Exit code 2 with one ``error:`` line per problem, else the CSV written and 0."""
    for p in problems:
        print(f"error: {p}", file=sys.stderr)
    if problems:
        return 2
    frame.to_csv(out, index=False)
    print(f"wrote {out.relative_to(root)}: {len(frame)} runs")
    return 0
