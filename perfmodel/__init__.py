"""perfmodel: an analytical performance model and parallelism tuner for LLM training.

Python API (see README): ``load_model``, ``load_gpu``, ``load_calibration``, ``ClusterSpec.build``,
``ParallelSpec``, ``JobSpec``, ``estimate``; ``search`` returns candidates as a DataFrame, best first; ``whatif``
sweeps one or two variables (GPU, GPU count, network, ...) into a tidy DataFrame.
"""
from perfmodel.calibration_profile import load_calibration
from perfmodel.catalog import load_gpu, load_model
from perfmodel.errors import InputError
from perfmodel.estimate import Estimate, estimate
from perfmodel.search import search
from perfmodel.specs import AcceleratorSpec, ClusterSpec, JobSpec, ModelSpec, ParallelSpec
from perfmodel.whatif import whatif

__all__ = [
    "load_model", "load_gpu", "load_calibration", "estimate", "Estimate", "search", "whatif", "InputError",
    "AcceleratorSpec", "ClusterSpec", "JobSpec", "ModelSpec", "ParallelSpec",
]
