"""calibration/refit.py rewrites the shipped profile only when asked to: an option it does not know, or
--help, must leave calibration/default_profile.yaml alone (it once ignored its arguments and refitted)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "calibration" / "refit.py"
PROFILE = ROOT / "calibration" / "default_profile.yaml"


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120)


def test_help_and_unknown_options_write_nothing():
    before = (PROFILE.stat().st_mtime_ns, PROFILE.read_bytes())
    shown = _run("--help")
    assert shown.returncode == 0 and "--loso" in shown.stdout
    refused = _run("--bogus")
    assert refused.returncode == 2 and "unrecognized arguments: --bogus" in refused.stderr
    assert (PROFILE.stat().st_mtime_ns, PROFILE.read_bytes()) == before
