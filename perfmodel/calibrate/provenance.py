"""What a calibrated profile says about itself: this calibrate run's fits, never its base's.

A calibrate run starts from a base profile (the shipped one, for the command) and overrides what it
fits. Its provenance records what this run did (its inputs with the points each fit used, the fitted
runs and log parameters with their residuals, the date, the GPU) and the cluster those fits assumed
(node size, NIC bandwidth per node, fabric, and where each came from), and names its base in one
entry (path and SHA-256) instead of copying the base's own records: a profile fitted from one
nccl-tests file does not claim the shipped runs fit's MAPE as its own.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

from perfmodel.calibration_profile import DEFAULT_PROFILE_PATH, Calibration

#: what a calibrate run records about its own fits; a base's are left to the base
RUN_RECORDS = frozenset({"created", "gpu", "cluster", "inputs", "base_profile", "runs_fit_params",
                         "runs_mape_pct_by_source", "logs_fit_params", "runs_fit_params_replaced_by_logs"})


_DIGESTS: dict[tuple[str, int, int], str] = {}


def sha256_of(path: Path) -> str:
    """SHA-256 of the file, read once per (path, size, modification time): calibrate's duplicate-input
    check and its provenance entries both ask for it, and a trace can be gigabytes."""
    st = Path(path).stat()
    key = (str(Path(path).resolve()), st.st_size, st.st_mtime_ns)
    if key not in _DIGESTS:
        h = hashlib.sha256()
        with open(path, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
        _DIGESTS[key] = h.hexdigest()
    return _DIGESTS[key]


def rel(path: Path) -> str:
    """The input's path relative to the working directory when it lies below it, else absolute (a
    ``../runs.csv`` would name nothing once the profile is read from another folder)."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(Path(path).resolve())


def base_record(base: Calibration | None, base_path=None) -> dict:
    """How the written profile names what it started from. The command's base, the shipped profile or
    the file given to ``--calibration`` (``base_path``), by path and SHA-256 (None when the checkout has
    no shipped profile: datasheet values); a base handed in as an object (``calibration/refit.py``
    assembles one from the collectives fit) by the description its caller gave it, less any fit
    records of an earlier calibrate run."""
    if base is None or base_path is not None:
        path = Path(base_path) if base_path is not None else DEFAULT_PROFILE_PATH
        return {"base_profile": {"path": rel(path), "sha256": sha256_of(path)} if path.is_file() else None}
    return {k: v for k, v in base.provenance.items() if k not in RUN_RECORDS}


def cluster_record(gpus_per_node: int, gpus_per_node_from: str, scale_out_gbit_per_s: float,
                   scale_out_from: str, network: str | None) -> dict:
    """The cluster the nccl-tests, log and trace fits assumed: a node size or NIC rate that is wrong
    moves every fitted efficiency, so the profile says which it took and where each came from."""
    return {"gpus_per_node": int(gpus_per_node), "gpus_per_node_from": gpus_per_node_from,
            "scale_out_gbit_per_s_per_node": float(scale_out_gbit_per_s), "scale_out_from": scale_out_from,
            "network": (network or "").strip() or None}
