"""Option types shared by the CLI commands (``perfmodel.cli`` and ``perfmodel.search.cli``)."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

ModelOpt = Annotated[str, typer.Option("--model", help="Catalog name, model YAML or HF config.json.")]
GpuOpt = Annotated[str, typer.Option("--gpu", help="Catalog GPU name or hardware-profile YAML.")]
GpusOpt = Annotated[int, typer.Option("--gpus", help="GPUs in the job.")]
BatchOpt = Annotated[int, typer.Option("--global-batch", help="Sequences per optimizer step.")]
SeqOpt = Annotated[int, typer.Option("--seq-len", help="Tokens per sequence.")]
GpnOpt = Annotated[Optional[int], typer.Option("--gpus-per-node", help="GPUs per node (default: the GPU's).")]
ScaleOutOpt = Annotated[
    Optional[float], typer.Option("--scale-out-gbit-per-s", help="Total NIC bandwidth per node, Gbit/s.")
]
NetworkOpt = Annotated[Optional[str], typer.Option("--network", help="Scale-out fabric name (e.g. 'IB NDR', 'EFA').")]
PrecisionOpt = Annotated[Optional[str], typer.Option(
    "--precision", help="bf16, fp16, fp8, mxfp8 or nvfp4 (default: bf16; fp16 on a GPU without bf16, e.g. V100).")]
FrameworkOpt = Annotated[str, typer.Option("--framework", help="Training stack (megatron-lm, nemo, torchtitan, ...).")]
FlashOpt = Annotated[Optional[bool], typer.Option(
    "--flash-attention/--no-flash-attention",
    help="Fused flash attention on or off whatever the stack's profile says (default: the stack's; DeepSpeed, "
    "Megatron-DeepSpeed, GPT-NeoX and OneFlow are profiled without it).")]
CalibrationOpt = Annotated[Optional[Path], typer.Option("--calibration", help="Calibrated profile YAML.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object.")]
OptionalGpusOpt = Annotated[Optional[int], typer.Option("--gpus", help="GPUs in the job (or give --gpus-range).")]


def check_zeropp_option(zeropp: str | None) -> None:
    """``--zeropp ''`` is refused like any other empty option value: leaving the option out means no ZeRO++."""
    if zeropp is not None and not zeropp.strip():
        from perfmodel.errors import InputError

        raise InputError("zeropp", "is empty: give a comma list of qwz, hpz, qgz, or leave --zeropp out for none")


def given_on_command_line(ctx: typer.Context, option: str) -> bool:
    """Whether the user typed ``option`` (a parameter name), not left it at its default. Compared by name:
    typer may bring its own copy of click, and with it its own ParameterSource enum."""
    return getattr(ctx.get_parameter_source(option), "name", "") == "COMMANDLINE"


def parse_gpu_counts(text: str | None, field: str) -> list[int] | None:
    """``"64,128,256"`` -> [64, 128, 256] (None when not given); each a positive integer of at most
    ``perfmodel.limits.MAX_GPUS``, else InputError naming ``field``."""
    from perfmodel.api_inputs import checked_gpu_counts
    from perfmodel.errors import InputError

    if text is None:
        return None
    if not text.strip():  # given but blank ("--gpus-range ''", an unset shell variable): not "not given"
        raise InputError(field, "is empty: give a comma list of GPU counts, e.g. 256,512,1024")
    parts = [p.strip() for p in text.split(",")]  # spaces around an item are fine; inside one ("8 16") not
    if not all(parts):  # "8,,16" or "8,": a count left out is a typo, not one count fewer
        raise InputError(field, f"has an empty item: give a comma list of GPU counts, e.g. 256,512,1024 (got {text!r})")
    try:
        vals = [int(p) for p in parts]
    except ValueError:
        raise InputError(field, f"must be a comma list of GPU counts, e.g. 256,512,1024 (got {text!r})") from None
    repeated = sorted({v for v in vals if vals.count(v) > 1})
    if repeated:  # a typo, as --vary says (the counts were silently merged)
        raise InputError(field, f"lists {', '.join(map(str, repeated))} more than once")
    return checked_gpu_counts(vals, field)
