"""Running the real ``perfmodel`` entry point in process, for tests (``tests`` is on sys.path: its
conftest.py puts it there)."""
from __future__ import annotations

import pytest

from perfmodel.cli import main


def run_cli(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of ``perfmodel ARGS``."""
    monkeypatch.setattr("sys.argv", ["perfmodel", *args])
    with pytest.raises(SystemExit) as exc:
        main()
    out, err = capsys.readouterr()
    return exc.value.code, out, err
