"""Does a measurement's own GPU name match ``--gpu``?

nccl-tests prints the CUDA device name on every ``#  Rank`` line (``cudaDeviceProp.name``, e.g.
``NVIDIA H100 80GB HBM3``, ``NVIDIA A100-SXM4-80GB``, older drivers without the vendor:
``A100-SXM4-40GB``) and a PyTorch-profiler trace carries it as ``deviceProperties[0].name``. A fit of
those numbers against another GPU's datasheet ends on its bounds or, worse, inside them with values
that describe nothing (an H100's NVLink read as an A100's: efficiency 1.2). Only the family is
compared (the model number, matched as a whole word, case-insensitively): memory size, form factor
and marketing suffixes are not, so ``NVIDIA A100-SXM4-80GB`` suits ``a100-sxm4-40gb`` too (one
silicon); a Grace Hopper superchip (``NVIDIA GH200 480GB``) is of the H100 and H200 families (its GPU
is one or the other). A device name of no known family (an AMD Instinct, an L40S, an H20) is not the
silicon of a catalog GPU either, so under a catalog ``--gpu`` it is refused too: measure it under a
hardware profile of its own (``--gpu FILE.yaml``, whose name need not name a family). Only a file that
names no device, or a cell that names none (``cuda:0``, an index), is not checked.
"""
from __future__ import annotations

import re

from perfmodel.errors import InputError

#: the GPU families a device name and a catalog name are compared by (whole words, lower case)
GPU_FAMILIES = ("v100", "a100", "a800", "h100", "h800", "h200", "b200", "b300", "gb200", "gb300")
#: device-name words that stand for catalog families: the GH200 superchip's GPU is an H100 (96 GB HBM3)
#: or an H200 (144 GB HBM3e), NVIDIA GH200 Grace Hopper Superchip datasheet
FAMILY_ALIASES = {"gh200": {"h100", "h200"}}


def gpu_families(name: str | None) -> set[str]:
    """The families ``name`` names as whole words: ``'NVIDIA H100 80GB HBM3'`` -> {'h100'}."""
    words = set(re.split(r"[^a-z0-9]+", (name or "").lower()))
    return (words & set(GPU_FAMILIES)).union(*(FAMILY_ALIASES[w] for w in words & set(FAMILY_ALIASES)))


#: device cells that name no GPU model: a PyTorch device (``cuda``, ``cuda:0``), an index, or the driver's
#: name for a board it does not know yet (``NVIDIA Graphics Device``)
NO_MODEL_RE = re.compile(r"\s*(cuda(:\d+)?|\d+|(nvidia )?graphics device)\s*", re.I)


def check_device_matches(gpu_name: str, device_name: str | None, where: str) -> None:
    """InputError naming --gpu, the file and the device when ``gpu_name`` names a family and the file's
    ``device_name`` names another one, or none (a device outside the catalog's families). A cell that names no
    model (``NO_MODEL_RE``) is not checked."""
    ours, theirs = gpu_families(gpu_name), gpu_families(device_name)
    if not ours or not (device_name or "").strip() or ours & theirs or NO_MODEL_RE.fullmatch(device_name or ""):
        return
    family = "/".join(sorted(theirs)).upper() if theirs else "a GPU of none of the catalog's families"
    raise InputError("gpu", f"--gpu {gpu_name} ({'/'.join(sorted(ours)).upper()}) is not the GPU this file was "
                     f"measured on, {device_name!r} ({family}): give the --gpu it ran on"
                     + ("" if theirs else ", or a hardware-profile YAML of that GPU (--gpu FILE.yaml)"), where)
