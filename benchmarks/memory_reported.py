"""Predicted peak memory per GPU against the memory some sources report in their notes
(``perfmodel.memory_check``): per source, the median ratio predicted / reported and the share of
runs within 25%.

    python benchmarks/memory_reported.py
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from perfmodel.memory_check import memory_table

RUNS = Path(__file__).resolve().parents[1] / "calibration" / "data" / "runs" / "calibration_runs.csv"


def main() -> None:
    print(memory_table(pd.read_csv(RUNS)).round(2).to_string())


if __name__ == "__main__":
    main()
