"""Measured runs (the runs schema of shared/data/README.md) -> cost-model inputs, in one batch.

Only a row's configuration columns are read: never its measured columns (iteration time,
throughput, TFLOP/s, MFU; the runs CSV reader, ``parsers.runs_csv``, judges those). Blank cells mean
"not stated by the source" and get documented defaults (``DEFAULTS_DOC``); a row that cannot be costed
gets status ``invalid`` (the row is inconsistent or lacks a required input) or ``unsupported`` (a feature
the model lacks).
"""
from __future__ import annotations

from typing import get_args

import numpy as np
import pandas as pd

from perfmodel.calibration_profile import Calibration, load_calibration
from perfmodel.catalog import load_gpu
from perfmodel.costs.compute import HEAD_DIM_ALIGN
from perfmodel.errors import InputError, UnknownName
from perfmodel.estimate import check_precision, cluster_arrays, constant_arrays, framework_arrays, op_network_arrays
from perfmodel.frameworks import uses_flash_attention
from perfmodel.limits import MAX_COUNT, MAX_GBIT_PER_S, MAX_GPUS, MIN_GBIT_PER_S
from perfmodel.rules import CP_SEQ, KV_HEADS_PER_RANK, PP_LAYERS, RUN_RULES, VPP_LAYERS, ZERO23_NO_PP, ZERO_0_3_ONLY
from perfmodel.specs.hardware import ClusterSpec, check_node_boards, nvlink_domain
from perfmodel.specs.job import Precision
from perfmodel.specs.model import MAX_HEADS, MAX_LAYERS, MAX_SEQ_LEN, MAX_VOCAB, MAX_WIDTH, MLP_MATRICES
from perfmodel.specs.parallel import RECOMPUTE_CODES, ZEROPP_ORDER
from perfmodel.step import op_value, step_costs

MEASURED_COLUMNS = ("iteration_time_s", "tokens_per_s_per_gpu", "tflops_per_gpu", "mfu", "hfu")

#: Megatron-family stacks with sequence parallelism (Korthikanti et al. 2022); not Megatron-DeepSpeed
#: as the data use it (BLOOM era): the BigScience fork's megatron/mpu/mappings.py has no sequence-
#: parallel regions, only the all-reduce / split / gather of tensor parallelism. torchtitan's TP plan
#: (``apply_tp`` of its Llama parallelize module: ``"attention_norm": SequenceParallel()``, likewise
#: ffn_norm) always shards the norms over the sequence and gathers / scatters around the linears.
SP_FRAMEWORKS = {"megatron-lm", "nemo", "megatron-bridge", "megascale", "megatron-kwai",
                 "gpt-neox", "nanotron", "torchtitan", "meta-internal"}
#: stacks that split a step's local batch into one micro-batch per pipeline stage by default
#: (torchtitan 2024 config_manager.py: --experimental.pipeline_parallel_microbatches "The default
#: value will be the number of pipeline stages, if unspecified")
PP_MICROBATCHES_PER_STAGE = {"torchtitan"}
#: stacks whose runs put tensor parallelism inside the node first (Megatron's and its descendants'
#: practice, Narayanan et al. 2021 Sec. 3.3: tp up to the GPUs of a node, then pp); the others (DeepSpeed
#: ZeRO, the flash-attention scripts' DDP, torchtitan's FSDP2, an unknown stack) scale data parallelism first
TENSOR_PARALLEL_FIRST = {"megatron-lm", "nemo", "megatron-bridge", "megascale", "megatron-kwai", "meta-internal",
                         "megatron-deepspeed", "gpt-neox", "nanotron"}
#: the runs schema's ``[tflops convention: NAME]`` tag in ``notes``: the names validate converts, the
#: first being Megatron's eq. 3 (which assumes full activation recomputation)
CONVENTION_EQ3 = "Megatron eq.3 (counts recompute)"
CONVENTION_MODEL_X3_4 = "model FLOPs (Megatron formula x3/4)"
#: stacks that shard the optimizer states by default: the Megatron-Core recipes' distributed optimizer, and
#: Meta's Llama 3 stack (Dubey et al. 2024 Sec. 3.3.2: FSDP sharding the optimizer states and gradients,
#: the weights kept after forward)
DISTRIBUTED_OPTIMIZER_DEFAULT = {"nemo", "megatron-bridge", "megascale", "megatron-kwai", "meta-internal"}
FSDP_DEFAULT = set(ZERO_0_3_ONLY)
NO_RECOMPUTE_DEFAULT = {"megatron-bridge"}

DEFAULTS_DOC = {
    "precision": "the GPU's default: bf16, fp16 where it has no bf16 tensor cores (V100)",
    "vpp": "1 (not interleaved), as the interface contract states (shared/CONTRACT.md), though the schema reads a "
    "blank as 'interleaving on or unknown': a Megatron-family run that interleaved without stating the chunk "
    "count is costed with the plain 1F1B bubble, (pp - 1) / micro-batches, and comes out slow by it",
    "sp": "on when tp > 1 for Megatron-family frameworks with sequence parallelism (Megatron-LM, NeMo, "
    "Megatron-Bridge, MegaScale, Megatron-Kwai, GPT-NeoX, nanotron's reduce-scatter TP mode, torchtitan "
    "(its TP plan applies SequenceParallel to the norms), Meta's Llama 3 stack (meta-internal)), else off (Megatron-DeepSpeed of the BLOOM era "
    "has none)",
    "recompute": "full where the row's TFLOP/s follow Megatron's eq. 3 (notes tag '[tflops convention: Megatron "
    "eq.3 (counts recompute)]': the formula assumes activation recomputation); none for Megatron-Bridge "
    "(its performance presets default to no recompute; the few that recompute some layers or offload "
    "activations to the CPU are costed without it, and may not fit the modelled memory); else the least "
    "recomputation that fits: none, else selective, else full; where no mode fits (the run ran, so the modelled "
    "memory is short for it), the least recomputation whose modelled memory comes within "
    "RECOMPUTE_MEMORY_PRECISION (5%) of the lowest: a mode that would save less than that is no evidence that "
    "the run recomputed",
    "micro_batch": "1; for torchtitan with pp > 1 the local batch over pp (one micro-batch per stage, its "
    "2024 default for --experimental.pipeline_parallel_microbatches); with ZeRO-3 / FSDP and pp = 1 the whole "
    "local batch (global_batch / dp): such a stack gathers the parameters every micro-batch, so its runs take "
    "the local batch in one (torchtitan's local_batch_size, FSDP training loops)",
    "zero_stage": "3 where zeropp names ZeRO++ parts (a ZeRO-3 feature); 1 for NeMo / Megatron-Bridge / MegaScale / "
    "Megatron-Kwai (distributed optimizer in their recipes) and Meta's Llama 3 stack (optimizer states and "
    "gradients sharded), 3 for torchtitan (FSDP2), else 0 (Megatron-LM's and DeepSpeed's own defaults)",
    "vocab_size": "nanotron: 131072 (VOCAB_SIZES in nanotron scripts/scaling_benchmarks.py, the generator "
    "of its published benchmarks); else the vocabulary of the catalog model with the same layers, hidden, "
    "ffn, heads and MLP kind when the catalog names exactly one (GPT-3 175B 51200, Nemotron-3 8B 256000); "
    "else 32000 (Llama-2 tokenizer)",
    "mlp": "gelu (the GPT-family two-matrix MLP; the schema's own default convention); 'relu' (OPT) is costed as "
    "the same two-matrix MLP",
    "tied_embeddings": "nanotron: tied when ffn_hidden_size < 10000 (scripts/scaling_benchmarks.py); "
    "else yes for GELU (GPT-family) models, no otherwise",
    "gpus_per_node": "the GPU profile's default_gpus_per_node",
    "scale_out_gbit_per_s_per_node": "the GPU profile's NICs per GPU times the row's GPUs per node "
    "(default_scale_out_gbit_per_s_per_node x gpus_per_node / default_gpus_per_node)",
    "n_kv_heads": "n_heads (multi-head attention)",
    "n_heads": "of the head counts that divide hidden_size and that tp divides, the one whose head dimension is "
    "a multiple of 8 and nearest 128 (GPT-3 175B, Llama, Mistral); attention FLOPs do not depend on it, the "
    "attention kernels' speed does (flash attention's head-dimension efficiency; a head dimension that is not a "
    "multiple of 8 runs at the misaligned rate) and so do the layout rules",
    "ffn_hidden_size": "4 x hidden_size for GELU and squared-ReLU MLPs; for SwiGLU Llama's 2/3 of that, rounded up "
    "to a multiple of 256 (4096 -> 11008)",
    "tp, pp, dp": "where one of them is blank and the GPU count is stated, n_gpus over the other two and cp (when "
    "whole); tp and pp both blank with dp stated: tp the largest size, at most 8 and within the NVLink domain, "
    "that divides n_gpus / (dp x cp) and n_heads and n_kv_heads (a multiple of n_kv_heads too for a stack not "
    "named in the schema, which may replicate them), pp the rest "
    "(a split estimate accepts: pp divides n_layers or n_layers + 2, and the stated vpp each stage's layers); "
    "tp, pp and dp all blank: the first layout whose data-parallel size divides the batch (global_batch / "
    "micro_batch): for the Megatron family (Megatron-LM, NeMo, Megatron-Bridge, MegaScale, Megatron-Kwai, Meta's "
    "stack, Megatron-DeepSpeed, GPT-NeoX, nanotron) tp the largest size as above and the fewest pipeline stages; "
    "for the others, or with ZeRO-3 stated, data parallelism alone where the batch allows, else the smallest tp "
    "and pipeline stages only where the stack runs them with its ZeRO stage; "
    "else tp and pp 1 and dp = n_gpus / (tp x pp x cp); n_gpus blank: tp x pp x dp x cp",
    "cp": "n_gpus / (tp x pp x dp) where tp, pp and dp are stated, that is whole and ring CP of that size splits "
    "the sequence (seq_len divisible by 2 cp); else 1",
    "global_batch": "micro_batch x dp: one micro-batch per step (no gradient accumulation); with pp > 1, "
    "micro_batch x dp x 4 pp (a pipeline needs many more micro-batches than stages: its bubble (pp - 1) / "
    "(vpp m) is then under a quarter, Narayanan et al. 2021; torchtitan then splits that local batch into "
    "its default pp micro-batches, see micro_batch)",
    "cp variant / activation offload": "not in the schema: ring context parallelism, no offloading",
    "recompute for megatron-kwai": "'selective' is Kuaishou's balanced checkpointing (norms + MLP activation)",
}


def _catalog_vocab(df: pd.DataFrame, mlp: np.ndarray) -> np.ndarray:
    """Vocabulary of the catalog model with the row's (layers, hidden, ffn, heads, MLP kind), where the
    catalog names one vocabulary for that shape (Llama-2 and Llama-3 70B share a shape: no answer); NaN
    where it names none."""
    from perfmodel.catalog import load_model, model_names

    vocabs: dict[tuple, set] = {}
    for name in model_names():
        m = load_model(name)
        key = (float(m.n_layers), float(m.hidden_size), float(m.ffn_hidden_size), float(m.n_heads), m.mlp)
        vocabs.setdefault(key, set()).add(float(m.vocab_size))
    shape = np.stack([_num(df, c) for c in ("n_layers", "hidden_size", "ffn_hidden_size", "n_heads")], axis=1)
    out = np.full(len(df), np.nan)
    for i, (row, kind) in enumerate(zip(shape.tolist(), mlp)):
        found = vocabs.get((*row, kind), set())
        if len(found) == 1:
            out[i] = next(iter(found))
    return out


def tflops_convention(df: pd.DataFrame) -> np.ndarray:
    """The FLOP convention each row's TFLOP/s follow: NAME of the ``[tflops convention: NAME]`` tag in
    ``notes``, '' where none is given."""
    notes = df["notes"] if "notes" in df else pd.Series([""] * len(df), index=df.index)
    return notes.fillna("").astype(str).str.extract(r"\[tflops convention:([^\]]*)\]")[0].fillna(
        "").str.strip().to_numpy()


#: what no default can stand in for: a row without one of these is invalid
REQUIRED = ("run_id", "n_layers", "hidden_size", "seq_len", "gpu")
#: zeropp cells that say "no ZeRO++ part" in words
NO_ZEROPP = frozenset({"none", "no", "off", "false", "0"})
#: recompute cells that say "no recomputation" in other words than the schema's `none`
NO_RECOMPUTE_WORDS = frozenset({"no", "off", "false", "0"})
#: the largest stated size a run may have: the model specs' own bounds (perfmodel/specs/model.py) and the
#: search's array limits (perfmodel/limits.py)
SIZE_LIMITS = {
    "n_layers": MAX_LAYERS, "hidden_size": MAX_WIDTH, "ffn_hidden_size": MAX_WIDTH, "n_heads": MAX_HEADS,
    "n_kv_heads": MAX_HEADS, "vocab_size": MAX_VOCAB, "seq_len": MAX_SEQ_LEN, "n_gpus": MAX_GPUS, "tp": MAX_GPUS,
    "pp": MAX_GPUS, "dp": MAX_GPUS, "cp": MAX_GPUS, "gpus_per_node": MAX_GPUS, "global_batch": MAX_COUNT,
    "micro_batch": MAX_COUNT, "vpp": MAX_COUNT, "ep": MAX_GPUS,
}
#: head dimension a blank head count aims at (GPT-3 175B, Llama, Mistral, Qwen: 128)
DEFAULT_HEAD_DIM = 128
#: Llama's SwiGLU width: 2/3 of 4h, rounded up to a multiple of 256 (meta-llama model.py ``multiple_of``)
SWIGLU_MULTIPLE_OF = 256


def default_heads(hidden_size: int, tp: int, kv_heads: int | None = None) -> int | None:
    """A blank head count: of the counts that divide the width, that tp divides and that a given key/value
    head count divides, the one whose head dimension is a multiple of 8 (HEAD_DIM_ALIGN: models are
    built so; attention kernels need it) and nearest DEFAULT_HEAD_DIM (the smaller count on a tie); a
    misaligned head dimension only where no aligned one exists; None if no head dimension from 16 to
    1024 gives one."""
    best = None
    for d in range(16, 1025):
        if hidden_size % d:
            continue
        a = hidden_size // d
        if a % tp or (kv_heads and a % kv_heads):
            continue
        key = (d % HEAD_DIM_ALIGN != 0, abs(d - DEFAULT_HEAD_DIM), a)
        best = key if best is None or key < best else best
    return None if best is None else int(best[2])


def default_ffn(hidden_size, mlp):
    """A blank MLP width: 4h (GPT's GELU, Nemotron's squared ReLU), Llama's 8h/3 rounded up to a multiple
    of 256 for SwiGLU (4096 -> 11008)."""
    h = np.asarray(hidden_size, dtype=float)
    swiglu = np.ceil(np.floor(8.0 * h / 3.0) / SWIGLU_MULTIPLE_OF) * SWIGLU_MULTIPLE_OF
    return np.where(np.asarray(mlp) == "swiglu", swiglu, 4.0 * h)


def _blank(df: pd.DataFrame, col: str) -> np.ndarray:
    """Cells not stated: NaN / None or only spaces (a column the CSV lacks is all blank)."""
    if col not in df:
        return np.ones(len(df), dtype=bool)
    return df[col].isna().to_numpy() | (df[col].astype(str).str.strip() == "").to_numpy()


def _whole(x) -> np.ndarray:
    x = np.asarray(x, dtype=float)
    with np.errstate(invalid="ignore"):
        return np.isfinite(x) & (x >= 1) & (np.mod(x, 1) == 0)


def _fill_blank_layout(df: pd.DataFrame) -> pd.DataFrame:
    """A copy of ``df`` with the blank model-shape and layout cells that DEFAULTS_DOC settles filled in
    (tp, pp and dp from tp*pp*dp*cp = n_gpus where the others are stated, else tp and pp 1; n_gpus from
    the product; one micro-batch's global batch; the MLP width; the head count). Only blank cells are
    filled, and only from stated values that are whole numbers >= 1: a bad stated cell is reported as
    itself, never hidden behind a default."""
    out = df.copy()

    def num(name):
        return _num(out, name).copy()

    blank = {c: _blank(df, c) for c in ("tp", "pp", "dp", "cp", "n_gpus", "global_batch", "ffn_hidden_size",
                                        "n_heads")}
    tp, pp, dp, gpus, cp = num("tp"), num("pp"), num("dp"), num("n_gpus"), num("cp")
    with np.errstate(invalid="ignore", divide="ignore"):
        # a blank cp where tp, pp and dp are stated: the GPUs they leave over (1 when they use them all),
        # where ring CP of that size can split the sequence (seq_len divisible by 2 cp, load-balanced)
        q = gpus / (tp * pp * dp)
        seq = num("seq_len")
        fill = blank["cp"] & ~blank["tp"] & ~blank["pp"] & ~blank["dp"] & _whole(gpus) & _whole(tp) & _whole(
            pp) & _whole(dp) & _whole(q) & ((q == 1) | (_whole(seq) & (np.mod(seq, 2 * q) == 0)))
        cp[fill] = q[fill]
        cp[blank["cp"] & np.isnan(cp)] = 1.0
        # one blank size among tp, pp, dp that the stated others and the GPU count determine
        for name, x, others in (("tp", tp, (pp, dp)), ("pp", pp, (tp, dp)), ("dp", dp, (tp, pp))):
            q = gpus / (others[0] * others[1] * cp)
            known = _whole(gpus) & _whole(others[0]) & _whole(others[1]) & _whole(cp)
            fill = blank[name] & ~blank["n_gpus"] & known & _whole(q)
            x[fill] = q[fill]
        # tp and pp both blank, dp stated: tensor parallelism inside the NVLink domain first (the largest
        # size, at most 8, that divides the GPUs left and the head count and keeps whole key/value heads on a
        # rank), the rest in pipeline stages that split the layers as estimate accepts
        rest = gpus / (dp * cp)
        two = blank["tp"] & blank["pp"] & np.isnan(tp) & np.isnan(pp) & _whole(rest) & _whole(dp) & _whole(cp)
        for i in np.flatnonzero(two & (rest <= SIZE_LIMITS["n_gpus"])):
            sizes = [d for d in _tp_sizes(out, i, int(rest[i])) if _stages_ok(_split(out, i), int(rest[i]) // d)]
            if sizes:
                tp[i], pp[i] = float(sizes[-1]), rest[i] / sizes[-1]
        # tp, pp and dp all blank: a layout whose data-parallel size divides the batch (global_batch /
        # micro_batch). The Megatron family: tp as above, the largest first, then the fewest pipeline stages;
        # the others (or ZeRO-3 stated): data parallelism alone where the batch allows, else the smallest tp,
        # and pipeline stages only where the stack composes them with its ZeRO stage
        gpus_rest = gpus / cp
        three = blank["tp"] & blank["pp"] & blank["dp"] & _whole(gpus_rest) & _whole(cp)
        zero_col, fw = _num(out, "zero_stage"), _text(out, "framework")
        mb_col, gb_col = _num(out, "micro_batch"), _num(out, "global_batch")
        for i in np.flatnonzero(three & (gpus_rest <= SIZE_LIMITS["n_gpus"])):
            n = int(gpus_rest[i])
            per_dp = (gb_col[i] / (mb_col[i] if _whole(mb_col[i]) else 1.0)) if _whole(gb_col[i]) else None
            split = _split(out, i)
            sizes = _tp_sizes(out, i, n)
            data_first = zero_col[i] == 3 or fw[i] not in TENSOR_PARALLEL_FIRST
            no_pp = data_first and fw[i] in ZERO23_NO_PP and (zero_col[i] >= 2 or fw[i] in FSDP_DEFAULT)
            stages = [p for p in range(1, n + 1) if n % p == 0]  # n <= the GPU limit: a short loop
            order = ([(d, p) for p in stages for d in sizes] if data_first
                     else [(d, p) for d in reversed(sizes) for p in stages])
            for d, p in order:
                if (n // d) % p or (p > 1 and no_pp) or not _stages_ok(split, p):
                    continue
                if per_dp is None or per_dp % (n // d // p) == 0:
                    tp[i], pp[i], dp[i] = float(d), float(p), float(n // d // p)
                    break
        tp[blank["tp"] & np.isnan(tp)] = 1.0
        pp[blank["pp"] & np.isnan(pp)] = 1.0
        q = gpus / (tp * pp * cp)
        fill = blank["dp"] & np.isnan(dp) & _whole(gpus) & _whole(tp) & _whole(pp) & _whole(cp) & _whole(q)
        dp[fill] = q[fill]
        prod = tp * pp * dp * cp
        fill = blank["n_gpus"] & _whole(prod)
        gpus[fill] = prod[fill]
        mb = np.where(_blank(df, "micro_batch"), 1.0, num("micro_batch"))
        gb = num("global_batch")
        fill = blank["global_batch"] & _whole(mb) & _whole(dp)
        # one micro-batch per step without pipelining; a pipeline runs 4 pp of them (the bubble
        # (p - 1) / (v m) of Narayanan et al. 2021 stays under a quarter: m >> p, as pipelined runs do)
        per_step = np.where(_whole(pp) & (pp > 1), 4.0 * pp, 1.0)
        gb[fill] = (mb * dp * per_step)[fill]
    h = num("hidden_size")
    ffn = num("ffn_hidden_size")
    fill = blank["ffn_hidden_size"] & _whole(h)
    ffn[fill] = default_ffn(h, _text(out, "mlp"))[fill]
    heads = num("n_heads")
    kv = num("n_kv_heads")
    for i in np.flatnonzero(blank["n_heads"] & _whole(h) & (h <= MAX_WIDTH) & _whole(tp)):
        a = default_heads(int(h[i]), int(tp[i]), int(kv[i]) if _whole(kv[i]) else None)
        heads[i] = np.nan if a is None else float(a)
    for name, x in (("tp", tp), ("pp", pp), ("dp", dp), ("cp", cp), ("n_gpus", gpus), ("global_batch", gb),
                    ("ffn_hidden_size", ffn), ("n_heads", heads)):
        out[name] = np.where(blank[name], x, df[name].to_numpy(dtype=object) if name in df else x)
    return out


def _split(df: pd.DataFrame, i: int) -> dict:
    """Row ``i``'s layer count and stated vpp: what a pipeline split must respect (``_stages_ok``)."""
    layers, vpp = _num(df, "n_layers")[i], _num(df, "vpp")[i]
    return {"n_layers": int(layers) if _whole(layers) else None, "vpp": int(vpp) if _whole(vpp) else 1,
            "framework": _text(df, "framework")[i]}


def _tp_sizes(df: pd.DataFrame, i: int, gpus: int) -> list[int]:
    """Tensor-parallel sizes row ``i`` can take, ascending: at most 8 and within its NVLink domain, dividing
    ``gpus`` and its head count, and keeping whole key/value heads on a rank (every named stack needs it,
    ``rules.TP_KV_STACK``; a generic one may replicate them: tp a multiple of the key/value heads)."""
    gpn = _num(df, "gpus_per_node")[i]
    cap = _tp_cap(str(_gpu_names(df)[i]), int(gpn) if _whole(gpn) else None)
    heads = _num(df, "n_heads")[i]
    heads = int(heads) if _whole(heads) else None
    kv = _num(df, "n_kv_heads")[i]
    kv = int(kv) if _whole(kv) else heads
    replicate = _text(df, "framework")[i] not in KV_HEADS_PER_RANK
    return [d for d in range(1, min(cap, gpus) + 1)
            if gpus % d == 0 and (heads is None or heads % d == 0)
            and (kv is None or kv % d == 0 or (replicate and d % kv == 0))]


def _stages_ok(split: dict, pp: int) -> bool:
    """pp stages split the layers as the row's stack can (estimate's PP_LAYERS: evenly, unless the stack splits
    them unevenly), and a stated vpp > 1, which needs a pipeline, divides each stage's."""
    if split["vpp"] > 1 and pp == 1:
        return False
    if split["n_layers"] is None:
        return True
    x = {"n_layers": split["n_layers"], "pp": pp, "vpp": split["vpp"], "framework": split["framework"]}
    return not bool(PP_LAYERS.broken(x)) and not (pp > 1 and bool(VPP_LAYERS.broken(x)))


#: the largest tensor-parallel size a blank tp is given: one HGX board, as the published recipes use
MAX_DEFAULT_TP = 8


def _tp_cap(gpu_name: str, gpus_per_node: int | None) -> int:
    """The largest TP a blank tp may take: the GPUs of one NVLink domain (the GPU profile's, for the row's
    GPUs per node), at most MAX_DEFAULT_TP; a GPU the catalog does not know: its node, at most 8."""
    try:
        spec = load_gpu(gpu_name)
        domain = nvlink_domain(spec, gpus_per_node or spec.default_gpus_per_node)
    except (UnknownName, InputError):
        domain = gpus_per_node or MAX_DEFAULT_TP
    return max(1, min(domain, MAX_DEFAULT_TP))


def _num(df: pd.DataFrame, col: str, default=np.nan) -> np.ndarray:
    if col not in df:
        return np.full(len(df), default, dtype=float)
    return pd.to_numeric(df[col], errors="coerce").to_numpy(dtype=float)


def _text(df: pd.DataFrame, col: str) -> np.ndarray:
    if col not in df:
        return np.full(len(df), "", dtype=object)
    cells = df[col].astype(object).where(df[col].notna(), "")
    return cells.astype(str).str.strip().str.lower().to_numpy(dtype=object)


def _precision_error(spec, precision: str) -> str:
    """``estimate.check_precision``'s one line for a run in a precision its GPU lacks."""
    try:
        check_precision(spec, precision)
    except InputError as exc:
        return str(exc)
    return ""


def _default_precision(gpu_name: str) -> str:
    """The blank-precision default of a run on ``gpu_name`` (bf16 where the GPU is unknown: the
    row is unsupported anyway)."""
    try:
        return load_gpu(gpu_name).default_precision
    except InputError:
        return "bf16"


def runs_to_inputs(df: pd.DataFrame, calibration: Calibration | None = None):
    """Return (inputs, status, reason, recompute_given) for every row of a runs DataFrame.

    ``inputs`` maps each ``STEP_INPUTS`` name to an array of len(df); rows whose status is not
    ``ok`` hold harmless placeholder values. ``recompute_given`` is False where the row left
    recompute blank and no documented default settles it (Megatron's eq. 3 convention: full;
    Megatron-Bridge: none); the caller then picks the least recompute that fits (``least_recompute_that_fits``).
    """
    cal = calibration if calibration is not None else load_calibration(None)
    constants = cal.cost_constants()
    for col in REQUIRED:
        if col not in df:
            raise InputError(col, "required column missing from the runs CSV")
    stated = df
    df = _fill_blank_layout(stated)
    n = len(df)
    status = np.full(n, "ok", dtype=object)
    reason = np.full(n, "", dtype=object)

    def mark(mask, st, why):
        sel = mask & (status == "ok")
        status[sel] = st
        reason[sel] = why

    for col in REQUIRED:
        if col not in df:
            raise InputError(col, "required column missing from the runs CSV")
    if "_row_errors" in df:  # cells the CSV reader could not read as numbers
        errs = df["_row_errors"].fillna("").astype(str).to_numpy()
        for i in np.flatnonzero(errs != ""):
            mark(np.arange(n) == i, "invalid", errs[i])
    for col in REQUIRED:
        mark(_blank(stated, col), "invalid", f"{col}: blank (required)")
    # stated sizes: whole numbers >= 1 (checked as stated, before any blank is filled from them)
    sizes = ("n_layers", "hidden_size", "ffn_hidden_size", "n_heads", "seq_len", "n_gpus", "tp", "pp", "dp",
             "global_batch", "cp", "vpp", "micro_batch", "n_kv_heads", "vocab_size", "gpus_per_node", "ep")
    for col in sizes:
        if col not in stated:
            continue
        x = _num(stated, col)
        text = ~_blank(stated, col) & np.isnan(x)  # a DataFrame cell that is not a number (the CSV reader flags these)
        mark(text, "invalid", f"{col}: must be a number")
        mark(~np.isnan(x) & ~_whole(x), "invalid", f"{col}: must be a whole number >= 1")
        mark(~np.isnan(x) & (x > SIZE_LIMITS[col]), "invalid", f"{col}: must be at most {SIZE_LIMITS[col]:,}")
    # blanks no default could fill
    mark(np.isnan(_num(df, "n_heads")), "invalid",
         "n_heads: blank, and no head count divides hidden_size with tp (and n_kv_heads) dividing it")
    mark(np.isnan(_num(df, "dp")) & _blank(stated, "n_gpus"), "invalid", "dp: blank, and n_gpus blank too")
    mark(np.isnan(_num(df, "dp")), "invalid", "dp: blank, and n_gpus / (tp x pp x cp) is not a whole number")
    for col in ("scale_out_gbit_per_s_per_node",):
        x = _num(df, col)
        mark(~np.isnan(x) & ~((x >= MIN_GBIT_PER_S) & (x <= MAX_GBIT_PER_S)), "invalid",
             f"{col}: must be a number from {MIN_GBIT_PER_S:g} to {MAX_GBIT_PER_S:,.0f} (as --scale-out-gbit-per-s)")
    for col, allowed in (("zero_stage", (0, 1, 2, 3)), ("sp", (0, 1)), ("tied_embeddings", (0, 1))):
        x = _num(df, col)
        mark(~np.isnan(x) & ~np.isin(x, allowed), "invalid", f"{col}: must be one of {allowed}")

    framework = _text(df, "framework")
    network = _text(df, "network")
    gpu_name = _gpu_names(df)
    mlp = _text(df, "mlp")
    # a blank MLP is GPT's GELU; plain ReLU (OPT) costs as a two-matrix MLP like GELU (as transformers'
    # relu in a config.json, perfmodel.catalog.HF_ACTIVATIONS)
    mlp = np.where((mlp == "") | (mlp == "relu"), "gelu", mlp)
    mark(~np.isin(mlp, list(MLP_MATRICES)), "invalid", f"mlp: must be one of {', '.join(MLP_MATRICES)}")
    n_experts = _num(df, "n_experts")
    mark(n_experts < 0, "invalid", "n_experts: must be >= 0 (blank, 0 or 1 for a dense model)")
    mark(np.nan_to_num(n_experts) > 1, "unsupported", "n_experts: mixture-of-experts not modelled")
    # expert parallelism splits the experts (data/README.md: "1 for dense models"): beside a dense model an
    # ep > 1 says the row's model columns left its experts out
    mark((np.nan_to_num(_num(df, "ep"), nan=1.0) > 1) & ~(np.nan_to_num(n_experts) > 1), "invalid",
         "ep: expert parallelism needs a mixture-of-experts model (n_experts > 1); 1 or blank for a dense one")
    # ZeRO++ parts as a comma list (qwz, hpz, qgz; hpZ over one NVLink domain, a node on DGX-style machines,
    # as the tutorial recommends)
    zpp_sets = [frozenset(t.strip() for t in z.replace(";", ",").replace("+", ",").split(",") if t.strip())
                if z not in NO_ZEROPP else frozenset() for z in _text(df, "zeropp")]
    mark(np.array([bool(z - set(ZEROPP_ORDER)) for z in zpp_sets], dtype=bool), "invalid",
         f"zeropp: must be a comma list of {', '.join(ZEROPP_ORDER)}")
    zpp_flags = {k: np.array([float(k in z) for z in zpp_sets]) for k in ZEROPP_ORDER}

    tp, pp, dp, cp = (_num(df, c, 1.0) for c in ("tp", "pp", "dp", "cp"))
    cp = np.nan_to_num(cp, nan=1.0)
    n_gpus = _num(df, "n_gpus")
    gb = _num(df, "global_batch")
    mb_col = _num(df, "micro_batch")
    # torchtitan (2024) splits the local batch into as many micro-batches as pipeline stages unless
    # told otherwise (--experimental.pipeline_parallel_microbatches, default: the number of stages)
    with np.errstate(invalid="ignore", divide="ignore"):  # (a dp or pp of 0 is marked invalid elsewhere)
        per_stage = gb / (dp * pp)
        stages_split = np.isin(framework, list(PP_MICROBATCHES_PER_STAGE)) & (pp > 1) & (per_stage >= 1) & (
            np.mod(per_stage, 1) == 0)
    zero = _num(df, "zero_stage")
    zero_default = np.where(np.isin(framework, list(DISTRIBUTED_OPTIMIZER_DEFAULT)), 1.0,
                            np.where(np.isin(framework, list(FSDP_DEFAULT)), 3.0, 0.0))
    # ZeRO++ is a ZeRO-3 feature: a row that names its parts but not the stage ran stage 3
    zero_default = np.where(np.array([bool(z) for z in zpp_sets]), 3.0, zero_default)
    zero = np.where(np.isnan(zero), zero_default, zero)
    # ZeRO-3 / FSDP without pipelining gathers the parameters every micro-batch: the local batch in one
    with np.errstate(invalid="ignore", divide="ignore"):
        local = gb / dp
        sharded_whole = (zero >= 3) & (pp == 1) & (local >= 1) & (np.mod(local, 1) == 0)
    mb = np.where(np.isnan(mb_col), np.where(stages_split, per_stage, np.where(sharded_whole, local, 1.0)), mb_col)
    heads = _num(df, "n_heads")
    kv = _num(df, "n_kv_heads")
    kv = np.where(np.isnan(kv), heads, kv)
    vpp = np.nan_to_num(_num(df, "vpp"), nan=1.0)
    # the layout rules shared with estimate and the search (perfmodel.rules.RUN_RULES); pp need not
    # divide n_layers here: measured runs with uneven stages (nanotron) are costed with their busiest
    # stage (perfmodel.costs.pipeline_split)
    layout = {"tp": tp, "pp": pp, "dp": dp, "cp": cp, "vpp": vpp, "micro_batch": mb, "global_batch": gb,
              "n_gpus": n_gpus, "n_heads": heads}
    with np.errstate(invalid="ignore"):
        for rule in RUN_RULES:
            mark(np.asarray(rule.broken(layout), dtype=bool), "invalid", f"{rule.field}: {rule.rule}")
        # every stack splits the sequence into cp equal parts (estimate refuses it too): no run had it otherwise
        seq = _num(df, "seq_len")
        mark(np.isfinite(seq) & np.asarray(CP_SEQ.broken({"seq_len": seq, "cp": cp}), dtype=bool), "invalid",
             f"{CP_SEQ.field}: {CP_SEQ.rule}")
    with np.errstate(invalid="ignore", divide="ignore"):  # zero sizes are already marked invalid above
        mark(np.mod(_num(df, "hidden_size"), heads) != 0, "invalid", "n_heads: must divide hidden_size")
        mark(np.mod(heads, kv) != 0, "invalid", "n_kv_heads: must divide n_heads")

    precision = _text(df, "precision")
    # a blank cell is the GPU's default (bf16; fp16 without bf16 tensor cores), never an error
    defaults = {g: _default_precision(g) for g in set(gpu_name[precision == ""].tolist())}
    precision = np.array([defaults[g] if p == "" else p for g, p in zip(gpu_name, precision)], dtype=object)
    known = list(get_args(Precision))
    mark(~np.isin(precision, known), "unsupported", f"precision: not one of {', '.join(known)}")
    sp_col = _num(df, "sp")
    has_sp = np.isin(framework, list(SP_FRAMEWORKS))
    sp = np.where(np.isnan(sp_col), has_sp, sp_col > 0) & (tp > 1)
    mark(np.array([bool(z) for z in zpp_sets]) & (zero != 3), "invalid", "zeropp: requires zero_stage 3")
    rc_text = _text(df, "recompute")
    rc_text = np.where(np.isin(rc_text, list(NO_RECOMPUTE_WORDS)), "none", rc_text)
    # a blank mode under Megatron's eq. 3 FLOP convention is full recompute: the convention counts
    # the recompute forward pass (Narayanan et al. 2021, eq. 3 assumes activation recomputation)
    rc_text = np.where((rc_text == "") & (tflops_convention(df) == CONVENTION_EQ3), "full", rc_text)
    # Megatron-Bridge's performance summary states no recompute mode; its workload presets default to
    # none (NVIDIA-NeMo/Megatron-Bridge scripts/performance/utils/utils.py WorkloadBaseConfig:
    # recompute_num_layers and recompute_modules default to None) and most of its Llama presets keep
    # that. Some recompute a few layers, or shard with Megatron-FSDP and offload activations to the
    # CPU (cpu_offloading_num_layers), which the runs schema cannot state: those rows are costed
    # without recompute and may exceed the modelled memory (fits False) though they ran; in the
    # shipped data 23 of 66 do, 13 of them by 0.5-2% (the memory model's precision)
    rc_text = np.where((rc_text == "") & np.isin(framework, list(NO_RECOMPUTE_DEFAULT)), "none", rc_text)
    recompute_given = rc_text != ""
    mark(recompute_given & ~np.isin(rc_text, list(RECOMPUTE_CODES)), "invalid",
         f"recompute: must be one of {', '.join(RECOMPUTE_CODES)}")
    recompute = np.array([RECOMPUTE_CODES.get(r, 0) for r in rc_text], dtype=float)
    # the data set files Kuaishou's "ours" under selective: for megatron-kwai it is balanced recompute
    recompute = np.where((framework == "megatron-kwai") & (rc_text == "selective"), RECOMPUTE_CODES["balanced"], recompute)

    nanotron = framework == "nanotron"
    vocab = _num(df, "vocab_size")
    vocab = np.where(np.isnan(vocab) & nanotron, 131072.0, vocab)
    blank = np.isnan(vocab)
    if blank.any():
        vocab[blank] = _catalog_vocab(df[blank], mlp[blank])
    vocab = np.where(np.isnan(vocab), 32000.0, vocab)
    tied = _num(df, "tied_embeddings")
    tied_default = np.where(nanotron, _num(df, "ffn_hidden_size") < 10000, mlp == "gelu")
    tied = np.where(np.isnan(tied), tied_default, tied > 0)
    gpn = _num(df, "gpus_per_node")
    scale_out = _num(df, "scale_out_gbit_per_s_per_node")

    # hardware (with the row's fabric applied) and framework arrays: built once per distinct
    # (gpu, fabric, GPUs per node, GPUs, bandwidth, precision, framework), then gathered per row
    def key_col(x):  # blank -> -1, so blank cells compare equal (NaN != NaN)
        return np.nan_to_num(x, nan=-1.0, posinf=-1.0, neginf=-1.0).tolist()

    keys = list(zip(gpu_name, network, key_col(gpn), key_col(n_gpus), key_col(scale_out), precision, framework))
    uniq: dict[tuple, int] = {}
    index = np.array([uniq.setdefault(k, len(uniq)) for k in keys], dtype=np.int64)
    hw_rows: list[dict] = []
    fw_rows: list[dict] = []
    no_profile: set[str] = set()
    broken_profile: dict[str, str] = {}
    no_tensor_cores: dict[tuple[str, str], str] = {}
    bad_node: dict[tuple[str, float], str] = {}
    for gpu_i, net_i, gpn_i, n_i, bw_i, prec_i, fw_i in uniq:
        try:
            spec = load_gpu(gpu_i)
        except UnknownName:  # a GPU the model has no profile for
            no_profile.add(gpu_i)
            spec = load_gpu("h100-sxm5-80gb")
        except InputError as exc:  # a profile path that is missing or broken: the row is invalid
            broken_profile[gpu_i] = str(exc)
            no_profile.add(gpu_i)
            spec = load_gpu("h100-sxm5-80gb")
        if gpu_i not in no_profile and not spec.supports_precision(prec_i):
            no_tensor_cores[(gpu_i, prec_i)] = _precision_error(spec, prec_i)
        net_constants, gpu, shape = cal.for_network(spec, net_i)
        g = int(gpn_i) if np.isfinite(gpn_i) and gpn_i > 0 else gpu.default_gpus_per_node
        n_g = int(n_i) if np.isfinite(n_i) and n_i > 0 else g
        g = min(g, n_g)
        try:  # a node of a board and a half (12 H100s): NVLink islands the model could only guess
            check_node_boards(gpu, g)
        except InputError as exc:
            bad_node[(gpu_i, gpn_i)] = str(exc)
        cluster = ClusterSpec.model_construct(
            gpu=gpu, n_gpus=n_g, gpus_per_node=g,
            nvlink_domain_gpus=nvlink_domain(gpu, g),
            scale_out_gbit_per_s_per_node=(
                bw_i if np.isfinite(bw_i) and bw_i > 0 else gpu.default_scale_out_gbit_per_s(g)
            ),
            scale_out_latency_us=gpu.scale_out_latency_us,
        )
        hw = cluster_arrays(cluster, prec_i, net_constants, cal.congestion_nodes(net_i), shape)
        hw.update(op_network_arrays(cal, spec, cluster.model_copy(update={"network": net_i}), prec_i, hw))
        # a fabric's own cross-node TP efficiency (networks.<fabric>.tp_internode_efficiency) wins
        hw["tp_internode_efficiency"] = net_constants.tp_internode_efficiency
        hw_rows.append(hw)
        profile = cal.framework(fw_i)
        fw_rows.append(framework_arrays(profile, uses_flash_attention(fw_i, spec) and profile.flash_attention, prec_i))
    for g in sorted(no_profile):
        if g in broken_profile:
            mark(gpu_name == g, "invalid", broken_profile[g])
        else:
            mark(gpu_name == g, "unsupported", f"gpu: no profile for '{g}'")
    for (g, prec), why in sorted(no_tensor_cores.items()):
        mark((gpu_name == g) & (precision == prec), "invalid", why)
    for (g, node), why in sorted(bad_node.items()):
        mark((gpu_name == g) & (np.nan_to_num(gpn, nan=-1.0) == node), "invalid", why)
    inputs: dict[str, np.ndarray] = {}
    for rows in (hw_rows, fw_rows):
        for key in (k for k in rows[0] if "." not in k) if rows else ():
            inputs[key] = np.array([r[key] for r in rows], dtype=float)[index]
    # a collective's own fabric values where some row's fabric has them; the others' are their op-less ones
    for key in sorted({k for r in hw_rows for k in r if "." in k}):
        inputs[key] = np.array([op_value(r, key) for r in hw_rows], dtype=float)[index]
    for key, val in constant_arrays(constants).items():
        if key not in inputs:
            inputs[key] = np.full(n, val, dtype=float)

    ok = status == "ok"

    def safe(x, fill=1.0):
        x = np.asarray(x, dtype=float)
        return np.where(ok & np.isfinite(x), x, fill)

    inputs.update(
        n_layers=safe(_num(df, "n_layers")), hidden_size=safe(_num(df, "hidden_size"), 128.0),
        ffn_hidden_size=safe(_num(df, "ffn_hidden_size"), 512.0), n_heads=safe(heads),
        n_kv_heads=safe(kv), vocab_size=safe(vocab, 32000.0),
        mlp_matrices=np.array([MLP_MATRICES.get(m, 2) for m in mlp], dtype=float),
        tied_embeddings=tied.astype(float), biases=(mlp == "gelu").astype(float),
        parallel_block=np.zeros(n),  # the runs schema has no such column: sequential blocks
        dropout=(mlp == "gelu").astype(float),
        seq_len=safe(_num(df, "seq_len"), 1024.0), global_batch=safe(gb),
        tp=safe(tp), pp=safe(pp), dp=safe(dp), cp=safe(cp), vpp=safe(vpp), micro_batch=safe(mb),
        sp=sp.astype(float), zero_stage=safe(zero, 0.0), recompute=recompute,
        qwz=zpp_flags["qwz"], hpz=zpp_flags["hpz"], qgz=zpp_flags["qgz"],
        # the schema has no CP-variant or offload column: ring CP, no offloading (documented default)
        cp_ulysses=np.zeros(n), offload_fraction=np.zeros(n),
    )
    return inputs, status, reason, recompute_given


#: where no recompute mode fits a row that left the mode blank, modes whose modelled memory is within this
#: fraction of the lowest are taken as equally (un)likely to fit, and the least recomputation among them is
#: assumed: a saving below the memory model's own error is no evidence the run needed it (its median
#: predicted / reported peak is 0.86-0.90 on BLOOM, the HF playbook and torchtitan:
#: benchmarks/memory_reported.py; 5% is the conservative end, it moves the fewest rows)
RECOMPUTE_MEMORY_PRECISION = 0.05


def least_recompute_that_fits(inputs: dict, recompute_given: np.ndarray) -> tuple[np.ndarray, list[dict]]:
    """The recompute code (``RECOMPUTE_CODES``: 0 none, 1 selective, 2 full) each row of ``runs_to_inputs``
    runs with (a stated mode as stated), and the step costs of the three tries, ``tries[c]`` the rows costed
    with code c where they left the mode blank (a stated mode, balanced's code 3 included, is costed as
    stated in all three: any try serves it).

    A blank mode is the least recomputation that fits. Where none fits, the run still ran, so the modelled
    memory is short for it by at least the gap; the least recomputation whose memory comes within
    ``RECOMPUTE_MEMORY_PRECISION`` of the lowest is assumed, not full recompute whatever it saves (NeMo
    24.07's Llama 2 70B SFT on 16 H100s: full recompute 83.9 GiB, none 84.6 GiB, both over 79.6: the
    optimizer step's fp32 gradient copy, not the activations, sets its peak).
    """
    given = np.asarray(recompute_given, dtype=bool)
    tries = [step_costs({**inputs, "recompute": np.where(given, inputs["recompute"], float(code))})
             for code in (0, 1, 2)]
    memory = np.column_stack([np.asarray(t["memory_gib"], dtype=float) for t in tries])
    finite = np.isfinite(memory)
    lowest = np.min(np.where(finite, memory, np.inf), axis=1, keepdims=True)  # no all-NaN warning
    near_lowest = finite & (memory <= lowest * (1.0 + RECOMPUTE_MEMORY_PRECISION))
    # the first (least) mode near the lowest memory; full recompute where no mode has a finite memory
    chosen = np.where(near_lowest.any(axis=1), np.argmax(near_lowest, axis=1), 2).astype(float)
    for code in (2, 1, 0):
        chosen = np.where(np.asarray(tries[code]["fits"], dtype=bool), float(code), chosen)
    # a stated mode is the row's own (every try costs it, so any try serves a caller that picks among them)
    return np.where(given, np.asarray(inputs["recompute"], dtype=float), chosen), tries


def _gpu_names(df: pd.DataFrame) -> np.ndarray:
    """The ``gpu`` cells as ``load_gpu`` takes them: catalog names in lower case, a profile path as written
    (file names are case-sensitive: a lower-cased '/data/H100.yaml' names no file)."""
    from perfmodel.catalog import _looks_like_path

    raw = df["gpu"].astype(object).where(df["gpu"].notna(), "") if "gpu" in df else pd.Series([""] * len(df))
    cells = raw.astype(str).str.strip()
    return np.array([c if _looks_like_path(c) else c.lower() for c in cells], dtype=object)
