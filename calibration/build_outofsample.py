"""Build the out-of-sample runs CSV from a source the shared data set does not list:
``python calibration/build_outofsample.py``.

MosaicML's MPT training benchmarks (mosaicml/llm-foundry ``scripts/train/benchmarking/README.md``,
commit 061f2c7ce6): 201 measured runs of MPT 125M-70B on 8-128 A100-40GB / A100-80GB / H100-80GB,
Composer + PyTorch FSDP (FULL_SHARD), bf16 and fp8, sequences 512-65,536. The README's table rows are
kept unchanged in ``data/outofsample/llmfoundry_readme_tables.md``; this script converts them to the
runs schema (``data/outofsample/llmfoundry_runs.csv``). The fit never reads them
(``calibration/refit.py`` fits ``data/runs/calibration_runs.csv`` only): they check how the shipped
profile generalizes to a stack, a model family and a table it has never seen
(``benchmarks/out_of_sample.py``).

Every row is checked against its own redundant cells before it is written (a transcription error
stops the build): NumParams = L (12 h^2 + 13 h) + V h + s h + 2 h for the stated model (MPT: biases,
learned positional embedding, tied embeddings), GlobalBatchSize = MicroBatchSize x GradAccum x GPUs,
GlobalBatchSize (T) = GlobalBatchSize x SeqLen, Throughput (T/s) = (T/s/GPU) x GPUs, and the MFU the
README's formula gives from the throughput (6 N + 12 L h s FLOPs a token, A100 312 / H100 989 bf16,
1,979 fp8 TFLOP/s).
"""
from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from perfmodel.calibrate.build_runs import runs_frame, write_runs

HERE = Path(__file__).resolve().parent
TABLES = HERE / "data" / "outofsample" / "llmfoundry_readme_tables.md"
OUT = HERE / "data" / "outofsample" / "llmfoundry_runs.csv"
HEADER_FROM = HERE / "data" / "runs" / "calibration_runs.csv"
COMMIT = "061f2c7ce6"

#: (n_layers, d_model, n_heads) of scripts/train/yamls/pretrain/mpt-<size>.yaml; expansion_ratio 4
MPT_SHAPES = {
    "125m": (12, 768, 12), "350m": (24, 1024, 16), "760m": (24, 1536, 12), "1b": (24, 2048, 16),
    "3b": (32, 2560, 20), "7b": (32, 4096, 32), "13b": (40, 5120, 40), "30b": (48, 7168, 56), "70b": (80, 8192, 64),
}
MPT_VOCAB = 50368
#: README section -> (gpu, scale-out Gbit/s per node, network) as the section heading states them
SECTIONS = {
    "H100 80GB BF16": ("h100-sxm5-80gb", "", ""),
    "H100 80GB FP8": ("h100-sxm5-80gb", "", ""),
    "A100 80GB with 1600 Gbps node-node interconnect (RoCE)": ("a100-sxm4-80gb", 1600, "RoCE"),
    "A100 40GB with 1600 Gbps node-node interconnect (RoCE)": ("a100-sxm4-40gb", 1600, "RoCE"),
}
MFU_TOLERANCE_PCT = 0.05  # the README's MFU from its own T/s: the 201 rows agree within 0.03 points


def peak_flop_per_s(gpu: str, precision: str) -> float:
    """Dense peak of the GPU's profile (hardware_profiles/, datasheet numbers: the README's MFU uses the
    same 312 / 989 / 1,979 TFLOP/s). The runs schema's MFU is against the 16-bit peak; the README's fp8
    rows use the fp8 one."""
    from perfmodel.catalog import load_gpu

    return load_gpu(gpu).peak_dense_tflop_per_s[precision] * 1e12


def read_rows(text: str) -> list[tuple[str, list[str]]]:
    rows, section = [], None
    for line in text.splitlines():
        if line.startswith("## "):
            section = line[3:].strip()
        elif line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) != 20 or section not in SECTIONS:
                raise ValueError(f"unexpected table row under {section!r}: {line}")
            rows.append((section, cells))
    return rows


def convert(rows: list[tuple[str, list[str]]]) -> tuple[pd.DataFrame, list[str]]:
    out, problems = [], []
    for section, cells in rows:
        (size, seq, n, _, mfu, hfu, _, mb, ga, gbs, _, tps, tps_gpu, gbs_tokens, prec, mp, shard, ckpt, offload,
         n_params) = cells
        seq, n, mb, ga, gbs, tps, tps_gpu, gbs_tokens, n_params = map(
            int, (seq, n, mb, ga, gbs, tps, tps_gpu, gbs_tokens, n_params))
        L, h, a = MPT_SHAPES[size]
        gpu, scale_out, network = SECTIONS[section]
        precision = "fp8" if "fp8" in prec else "bf16"
        where = f"{section}: {size} seq {seq} on {n}"
        if L * (12 * h * h + 13 * h) + MPT_VOCAB * h + seq * h + 2 * h != n_params:
            problems.append(f"{where}: NumParams {n_params} is not the MPT-{size} count")
        if gbs != mb * ga * n or gbs_tokens != gbs * seq or abs(tps_gpu * n - tps) > n:
            problems.append(f"{where}: batch or throughput cells disagree")
        mfu_calc = (6.0 * n_params + 12.0 * L * h * seq) * tps / (n * peak_flop_per_s(gpu, precision))
        if abs(100.0 * mfu_calc - float(mfu)) > MFU_TOLERANCE_PCT:
            problems.append(f"{where}: MFU {mfu} but the README's formula gives {100 * mfu_calc:.2f}")
        to_16bit = peak_flop_per_s(gpu, precision) / peak_flop_per_s(gpu, "bf16")
        if shard != "FULL_SHARD" or offload != "False":
            problems.append(f"{where}: sharding {shard} / CPU offload {offload} is not FSDP FULL_SHARD on the GPU")
        out.append({
            "source": f"mosaicml/llm-foundry scripts/train/benchmarking/README.md (commit {COMMIT}) [{section}]",
            "model_name": f"MPT-{size.upper()} (llm-foundry benchmark)", "n_layers": L, "hidden_size": h,
            "ffn_hidden_size": 4 * h, "n_heads": a, "n_kv_heads": a, "vocab_size": MPT_VOCAB, "seq_len": seq,
            "mlp": "gelu", "tied_embeddings": 1, "gpu": gpu, "n_gpus": n, "gpus_per_node": 8,
            "scale_out_gbit_per_s_per_node": scale_out, "network": network, "tp": 1, "pp": 1, "dp": n, "cp": 1,
            "ep": 1, "vpp": 1, "zero_stage": 3, "micro_batch": mb, "global_batch": gbs,
            "recompute": "full" if ckpt == "True" else "none", "precision": precision, "framework": "llm-foundry",
            "tokens_per_s_per_gpu": tps_gpu, "mfu": float(mfu) / 100.0 * to_16bit, "hfu": float(hfu) / 100.0 * to_16bit,
            "target": "tokens_per_s_per_gpu",
            "derived_fields": (
                f"norm: n_layers/hidden_size/n_heads/vocab_size from scripts/train/yamls/pretrain/mpt-{size}.yaml "
                "(ffn = expansion_ratio 4 x d_model; MPT defaults: biases, learned positional embedding, tied "
                "embeddings: NumParams = L(12h^2+13h) + V h + seq h + 2h holds); dp = # GPUs and zero_stage=3 "
                "(FSDP FULL_SHARD); recompute from Activation Checkpointing; precision from Precision "
                "(amp_bf16/bf16 -> bf16, amp_fp8 -> fp8); gpu from the section heading (h100_80gb -> H100 SXM5, "
                "a100_80gb / a100_40gb -> A100 SXM4: assumed, the README names no form factor); gpus_per_node 8 "
                "(assumed: 8-GPU nodes, every GPU count a multiple of 8); mfu/hfu as printed, fp8 rows rescaled "
                "from the fp8 peak to the 16-bit one (x 1979/989); framework 'llm-foundry' has no perfmodel "
                "profile"),
            "notes": (f"MP Mode {mp} (Composer FSDP mixed precision: PURE reduces in bf16, DEFAULT in fp32); "
                      f"GradAccum {ga}; triton flash attention (attn_impl: triton); MFU/HFU per the README's "
                      "formula (all parameters, attention FLOPs counted, not causally halved)"),
        })
    return runs_frame(out, "llmf", HEADER_FROM), problems


def main() -> int:
    return write_runs(*convert(read_rows(TABLES.read_text())), OUT, HERE.parent)


if __name__ == "__main__":
    sys.exit(main())
