"""What the outputs say beside their numbers: notes on inputs that change the answer without an
error (a stack or fabric perfmodel has no profile for, a stack that borrows its kernel efficiency,
a configuration the stack cannot run), and which peak MFU is relative to.

One list of notes serves every output: the Python API (``Estimate.notes``, ``df.attrs["notes"]`` of
``search`` and ``whatif``), the ``notes`` list of every ``--json`` object, and the ``note:`` lines of
the text output. A note is one sentence without the ``note:`` prefix, which only the text output adds.
"""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from perfmodel.specs import AcceleratorSpec, ClusterSpec, JobSpec, ModelSpec, ParallelSpec


def framework_note(framework: str | None, cal=None) -> str | None:
    """A stack name perfmodel has no profile for runs with the generic one: say so (a typo in
    'megatron-lm' would otherwise change the answer silently). A known stack that takes fitted values
    (kernel efficiency, per-micro-batch cost) from the stack it is built on, where ``cal`` fits none of its
    own, says which."""
    from perfmodel.frameworks import PROFILES

    if framework is None:
        return None
    name = framework.strip().lower()
    if name not in PROFILES:
        known = ", ".join(sorted(k for k in PROFILES if k != "generic"))
        return (f"framework {framework!r} has no profile: it runs with the generic one (no stack-specific "
                f"overlap; known: {known})")
    typical = cal.typical_kernel_efficiency(name) if cal is not None else {}
    if typical:
        return (f"{name} has no fitted kernel efficiency: it runs at the typical calibrated one, "
                f"{typical['kernel_efficiency']:.3f} (the generic profile's, the median over the calibrated stacks)")
    taken = cal.borrowed(name) if cal is not None else {}
    if not taken:
        return None
    values = ", ".join(f"{k} {v:.3f}" for k, v in sorted(taken.items()))
    return (f"{name} has no fit of its own for these: it runs at {PROFILES[name].calibration_from}'s fitted "
            f"{values} (the stack it is built on)")


def kernel_bound_note(framework: str | None, cal) -> str | None:
    """A stack whose fitted kernel efficiency ends on the top of its range (every kernel at the best-shape
    matmul rate) runs, measured, faster than the cost model explains by kernel speed: its estimates lean on
    that fit, and a comparison with other stacks should say so (none in the shipped profile since 2026-12-02:
    nanotron was there until its host time per layer became a floor under its kernels, OneFlow until the fixed
    50 ms a step went)."""
    from perfmodel.limits import MAX_KERNEL_EFFICIENCY

    if cal is None or not framework:
        return None
    name = framework.strip().lower()
    value = cal.frameworks.get(name, {}).get("kernel_efficiency")
    if value is None or value < 0.99 * MAX_KERNEL_EFFICIENCY:
        return None
    return (f"{name}'s fitted kernel efficiency {value:.3f} is at the top of its range ({MAX_KERNEL_EFFICIENCY}: "
            "every kernel at the best measured matmul rate): its measured runs are faster than the model explains "
            "by kernel speed, so its estimates lean on that fit; compare it with other stacks with care")


def network_note(network: str | None, cal) -> str | None:
    """A fabric named but absent from the calibration runs at datasheet rates: say so (a typo in
    'efa' would otherwise change the answer silently)."""
    key = (network or "").strip().lower()
    if not key or key in cal.networks:
        return None
    known = ", ".join(sorted(cal.networks)) or "none"
    return (f"network {network!r} has no calibration entry: its collectives run at the datasheet "
            f"NIC/NVLink rates with the shared efficiencies (calibrated fabrics: {known})")


def job_notes(job: JobSpec, cluster: ClusterSpec, cal, model: ModelSpec | None = None) -> list[str]:
    """The notes of a job on a cluster, whatever its configuration: what its model's source states that is
    not modelled (``ModelSpec.notes``), its stack, its fabric, its attention kernel and a sequence beyond
    the model's learned position table."""
    return list(model.notes if model is not None else ()) + [
        n for n in (framework_note(job.framework, cal), kernel_bound_note(job.framework, cal),
                    network_note(cluster.network, cal), unfused_attention_note(job, cluster, cal),
                    position_table_note(job, model), partial_domain_note(cluster)) if n]


def partial_domain_note(cluster: ClusterSpec) -> str | None:
    """A GPU count that leaves the last NVLink domain part-filled (504 + 8 GPUs of NVL72 racks for 512, or 12
    on 8-GPU nodes): the process groups are placed on the GPUs the job holds (``costs.comm.group_layout``), so a
    group reaching into the part-filled domain crosses it through those few GPUs' NICs, which paces the whole
    collective; said, since it can halve a step's throughput against the nearest whole number of domains."""
    dom = int(cluster.nvlink_domain_gpus)
    n = int(cluster.n_gpus)
    if n <= dom or n % dom == 0:
        return None
    full, rest = divmod(n, dom)
    return (f"{n} GPUs fill {full} NVLink domain{'s' if full > 1 else ''} of {dom} and {rest} GPUs of another: "
            f"a collective group reaching into that one crosses it through those {rest} GPUs' NICs, which pace it; "
            f"{full * dom} or {(full + 1) * dom} GPUs avoid it")


def position_table_note(job: JobSpec, model: ModelSpec | None) -> str | None:
    """A sequence longer than a learned position table (GPT-2/3, BLOOM-style absolute embeddings) is not a
    run of that model: it needs a larger table (Megatron's --max-position-embeddings), a model of its own."""
    if model is None or not model.learned_pos_emb or not model.max_seq_len or job.seq_len <= model.max_seq_len:
        return None
    return (f"{model.name} learned position embeddings for {model.max_seq_len:,} positions: sequences of "
            f"{job.seq_len:,} tokens need a table of {job.seq_len:,} rows (--max-position-embeddings {job.seq_len}), "
            f"a model it was not trained as; costed with its {model.max_seq_len:,}-row table")


#: from this sequence length on, unfused attention's s x s scores are said (they dominate time and memory)
UNFUSED_NOTE_SEQ_LEN = 4096


def unfused_attention_note(job: JobSpec, cluster: ClusterSpec, cal) -> str | None:
    """Attention costed unfused where it dominates, or against the user's word: on a pre-Ampere GPU
    (no flash kernels in any stack) a --flash-attention that cannot apply, or a sequence of 4K tokens or
    more; on newer GPUs a stack whose profile has no flash attention (DeepSpeed, Megatron-DeepSpeed,
    GPT-NeoX and OneFlow as measured: SC'21, BLOOM, the ZeRO++ blog) at 4K tokens or more."""
    from perfmodel.frameworks import framework_profile, gpu_runs_fused_attention

    long = job.seq_len >= UNFUSED_NOTE_SEQ_LEN
    if not gpu_runs_fused_attention(cluster.gpu):
        if job.flash_attention:
            return (f"--flash-attention does not apply on {cluster.gpu.name}: flash kernels need an Ampere or newer "
                    "GPU, so attention is costed unfused")
        if long and job.flash_attention is None:
            return (f"{cluster.gpu.name} has no flash kernels (they need Ampere or newer): attention is costed "
                    f"unfused, and at {job.seq_len:,} tokens its s x s scores dominate the time and memory")
        return None
    if not job.framework or not long:
        return None
    profile = cal.framework(job.framework) if cal is not None else framework_profile(job.framework)
    if job.flash_attention is not None or profile.flash_attention:  # the user's choice is not a surprise
        return None
    return (f"{job.framework} is costed with unfused attention (its profile has no flash kernels, as in the runs it "
            f"was measured on): at {job.seq_len:,} tokens the s x s scores dominate its time and memory; "
            "--flash-attention costs a build with FlashAttention")


def capability_notes(model: ModelSpec, cluster: ClusterSpec, par: ParallelSpec, job: JobSpec) -> list[str]:
    """What the named stack cannot run (``rules.CAPABILITY_RULES``): estimate and a fixed what-if
    still cost such a configuration, and say so; the search never recommends it."""
    from perfmodel.estimate import config_arrays

    return capability_notes_many([config_arrays(model, cluster, par, job)], job.framework)[0]


def capability_notes_many(configs: Sequence[Mapping], stack: str | None) -> list[list[str]]:
    """``capability_notes`` of many configurations of one stack (each ``estimate.config_arrays``), every
    rule evaluated once over them all, as the search applies them (a fixed what-if's points)."""
    from perfmodel import rules

    if not configs:
        return []
    x: dict = {k: np.array([c[k] for c in configs]) for k in configs[0] if k != "framework"}
    x["framework"] = configs[0]["framework"]
    broken = [(r, np.broadcast_to(r.broken(x), (len(configs),))) for r in rules.CAPABILITY_RULES]
    return [[f"{stack or 'generic'} cannot run this configuration ({r.reason}); it is costed as a what-if"
             for r, b in broken if b[i]] for i in range(len(configs))]


def mfu_peak(gpu: AcceleratorSpec) -> tuple[str, float]:
    """The peak MFU is relative to: the GPU's dense 16-bit tensor-core peak whatever the training
    precision (``step.py``: PaLM model FLOPs / ``bf16_peak_flop_per_s``), as (its 16-bit format, TFLOP/s):
    bf16, or fp16 on a GPU without bf16 tensor cores (V100, whose profile's 16-bit base is its fp16 peak)."""
    return gpu.default_precision, gpu.peak_flop_per_s("bf16") / 1e12


def mfu_peak_text(gpu: AcceleratorSpec) -> str:
    """``dense 16-bit (bf16) peak, 989 TFLOP/s``."""
    precision, tflop = mfu_peak(gpu)
    return f"dense 16-bit ({precision}) peak, {tflop:,.0f} TFLOP/s"
