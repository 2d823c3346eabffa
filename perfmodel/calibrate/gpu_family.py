"""Does a measurement's own GPU name match ``--gpu``?

nccl-tests prints the CUDA device name on every ``#  Rank`` line (``cudaDeviceProp.name``, e.g.
``NVIDIA H100 80GB HBM3``, ``NVIDIA A100-SXM4-80GB``, older drivers without the vendor:
``A100-SXM4-40GB``) and a PyTorch-profiler trace carries it as ``deviceProperties[0].name``. A fit of
those numbers against another GPU's datasheet ends on its bounds or, worse, inside them with values
that describe nothing (an H100's NVLink read as an A100's: efficiency 1.2). Only the family is
compared (the model number, matched as a whole word, case-insensitively): memory size, form factor
and marketing suffixes are not, so ``NVIDIA A100-SXM4-80GB`` suits ``a100-sxm4-40gb`` too (one
silicon), and a name with no known family (a new part, a GH200, no name) is not checked.
"""
from __future__ import annotations

import re

from perfmodel.errors import InputError

#: the GPU families a device name and a catalog name are compared by (whole words, lower case)
GPU_FAMILIES = ("v100", "a100", "a800", "h100", "h800", "h200", "b200", "b300", "gb200", "gb300")


def gpu_families(name: str | None) -> set[str]:
    """The families ``name`` names as whole words: ``'NVIDIA H100 80GB HBM3'`` -> {'h100'}."""
    words = set(re.split(r"[^a-z0-9]+", (name or "").lower()))
    return words & set(GPU_FAMILIES)


def check_device_matches(gpu_name: str, device_name: str | None, where: str) -> None:
    """InputError naming --gpu, the file and the device when ``device_name`` clearly names another
    family than ``gpu_name`` (both name one, and not the same)."""
    ours, theirs = gpu_families(gpu_name), gpu_families(device_name)
    if ours and theirs and not ours & theirs:
        raise InputError("gpu", f"--gpu {gpu_name} ({'/'.join(sorted(ours)).upper()}) is not the GPU this file was "
                         f"measured on, {device_name!r} ({'/'.join(sorted(theirs)).upper()}): give the --gpu it ran "
                         "on", where)
