"""Pydantic specs at the edges: what is trained (model), on what (hardware/cluster),
how it is run (parallel) and the job (batch, sequence, precision, framework)."""
from perfmodel.specs.model import ModelSpec
from perfmodel.specs.hardware import AcceleratorSpec, ClusterSpec
from perfmodel.specs.parallel import ParallelSpec
from perfmodel.specs.job import JobSpec

__all__ = ["ModelSpec", "AcceleratorSpec", "ClusterSpec", "ParallelSpec", "JobSpec"]
