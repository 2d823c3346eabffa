"""The per-line labels launchers put before a process's output, and terminal colour codes, shared by
the log parsers (nccl-tests, Megatron arguments, training logs).

* torchrun ``--tee``/``--log-dir`` and Megatron's rank labels: ``[rank0]:``, ``[default0]:``;
* Slurm ``srun -l`` (padded: `` 0: ``) and similar ``N: `` labels;
* Open MPI ``mpirun --tag-output``: ``[1,0]<stdout>:`` / ``<stderr>:``;
* MPICH / Intel MPI ``-l`` / ``-prepend-rank``: ``[0] ``.

One whitespace character after the label is part of it; the line's own indentation is kept.
"""
from __future__ import annotations

import re

LAUNCHER_PREFIX = re.compile(
    r"^\s*(?:\[(?:rank|default)\d+\]:|\[\d+,\d+\]<std(?:out|err)>:|\[\d+\](?=\s)|\d+:(?=\s|#|$))\s?")


#: ANSI/VT100 colour and style codes (ESC [ ... letter): loggers colour their lines (torchtitan its
#: metrics, rich / colorlog handlers every line), and a colour code is not content
ANSI_CODE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def strip_launcher_prefix(line: str) -> str:
    """``line`` without terminal colour codes and a leading launcher label (and the one blank after it)."""
    return LAUNCHER_PREFIX.sub("", ANSI_CODE.sub("", line), count=1)
