"""The Python API's inputs, checked as the CLI's are (``estimate``, ``search``, ``whatif``).

A notebook varies a frozen spec with pydantic's ``model_copy(update=...)``, which skips the validators: a
``seq_len`` of 0 or a negative ``tp`` then reached the cost model and came back as NaN or a negative
throughput. Every spec is therefore rebuilt through its validators (the fields it was built with, so a field
left to its default stays unstated: ``JobSpec.precision_stated``, a ``ParallelSpec`` without a ZeRO stage),
and a model, GPU-less cluster or calibration given by name or path is loaded, as the CLI loads them.
"""
from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ValidationError

from perfmodel.errors import InputError, from_validation_error


def revalidated(spec, field: str, kind: type[BaseModel]):
    """``spec`` rebuilt through ``kind``'s validators; InputError naming ``field`` for a wrong type or value."""
    if not isinstance(spec, kind):
        raise InputError(field, f"must be a {kind.__name__} (got {type(spec).__name__})")
    try:
        # warnings=False: a model_copy(update={"tp": 8.0}) holds a value of the wrong type, which the dump would
        # warn about; the validators below refuse it or take it (8.0 is 8), as they would from the constructor
        return kind.model_validate(spec.model_dump(exclude_unset=True, warnings=False))
    except ValidationError as exc:
        raise from_validation_error(exc, field) from None


def api_model(model):
    """A ModelSpec, a catalog name or a model file (str or Path)."""
    from perfmodel.catalog import load_model
    from perfmodel.specs import ModelSpec

    if isinstance(model, (str, Path)):
        return load_model(str(model))
    return revalidated(model, "model", ModelSpec)


def api_calibration(calibration):
    """A Calibration, a calibration profile's path (str or Path), or None (the shipped profile)."""
    from perfmodel.calibration_profile import Calibration, load_calibration

    if calibration is None or isinstance(calibration, (str, Path)):
        return load_calibration(calibration)
    if not isinstance(calibration, Calibration):
        raise InputError("calibration", f"must be a Calibration or a profile path (got {type(calibration).__name__})")
    return calibration


def api_inputs(model, cluster, job, parallel=None, calibration=None):
    """(model, cluster, job, parallel, calibration) checked and loaded for the API's entry points."""
    from perfmodel.specs import ClusterSpec, JobSpec, ParallelSpec

    return (api_model(model), revalidated(cluster, "cluster", ClusterSpec), revalidated(job, "job", JobSpec),
            None if parallel is None else revalidated(parallel, "parallel", ParallelSpec), api_calibration(calibration))


def checked_gpu_counts(gpu_counts, field: str = "gpu_counts") -> list[int] | None:
    """None, or a non-empty list of whole GPU counts from 1 to ``MAX_GPUS`` (InputError naming ``field``); the
    CLI's ``--gpus-range`` text is read into such a list first (``cli_options.parse_gpu_counts``)."""
    import numpy as np

    from perfmodel.limits import MAX_GPUS

    if gpu_counts is None:
        return None
    if isinstance(gpu_counts, (str, bytes)) or not hasattr(gpu_counts, "__iter__"):
        raise InputError(field, f"must be a list of GPU counts (got {gpu_counts!r:.60})")
    counts = list(gpu_counts)
    if not counts:
        raise InputError(field, "needs at least one GPU count (None searches the cluster's)")
    for g in counts:
        whole = isinstance(g, (int, np.integer)) and not isinstance(g, bool)
        if not whole or not 1 <= g <= MAX_GPUS:
            raise InputError(field, f"must be whole numbers from 1 to {MAX_GPUS:,} (got {g!r:.40})")
    return [int(g) for g in counts]
