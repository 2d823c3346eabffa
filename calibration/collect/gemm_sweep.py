"""GEMM shape sweep -> CSV for ``perfmodel calibrate --gemm``.

Shapes: the matmuls of one transformer layer of the chosen model (QKV, attention output,
SwiGLU gate+up, down, LM head) for ``--tokens`` tokens per micro-batch and tensor-parallel
degree ``--tp``, each as forward, data-gradient and weight-gradient GEMM, plus a square grid.
Each shape is timed ``--iters`` times after ``--warmup`` calls (CUDA events on a GPU,
``time.perf_counter`` on the CPU) and the median is written.

    python calibration/collect/gemm_sweep.py --model llama3-8b --dtypes bf16 fp8 --out gemm.csv
    python calibration/collect/gemm_sweep.py --device cpu --quick --out gemm_cpu.csv   # no GPU

Output columns ``m,n,k,dtype,time_s,op,n_iters`` after a ``# source:`` line; a GEMM
(m, k) x (k, n) does 2*m*n*k FLOPs, which is what the parser's ``tflop_per_s`` uses.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from collect_common import GemmRow, call_times_s, median_s, provenance_line, write_gemm_csv  # noqa: E402


@dataclass(frozen=True)
class LayerShape:
    """The dimensions that fix a decoder layer's GEMMs (HF config names in comments)."""

    hidden: int
    """d_model (``hidden_size``)."""
    ffn: int
    """SwiGLU inner size (``intermediate_size``)."""
    n_heads: int
    """Query heads (``num_attention_heads``)."""
    n_kv_heads: int
    """Key/value heads (``num_key_value_heads``; = n_heads without GQA)."""
    vocab: int
    """``vocab_size``."""


# Llama configs (HF config.json; Llama 3 herd, arXiv 2407.21783, Table 3).
MODELS: dict[str, LayerShape] = {
    "llama3-8b": LayerShape(4096, 14336, 32, 8, 128256),
    "llama3-70b": LayerShape(8192, 28672, 64, 8, 128256),
    "llama3-405b": LayerShape(16384, 53248, 128, 8, 128256),
    "llama2-7b": LayerShape(4096, 11008, 32, 32, 32000),
    "tiny": LayerShape(256, 688, 4, 2, 1024),
}
QUICK_GRID = (64, 128)
DEFAULT_GRID = (256, 512, 1024, 2048, 4096, 8192, 16384)


def layer_gemms(shape: LayerShape, tokens: int, tp: int = 1) -> list[tuple[str, int, int, int]]:
    """(op, m, n, k) of one layer's forward GEMMs and their backward pair, tensor-parallel split.

    Forward y = x W with x (T, k), W (k, n): (m, n, k) = (T, n, k). Backward: dgrad
    dx = dy W^T is (T, k, n); wgrad dW = x^T dy is (k, n, T) (Megatron-LM column/row split)."""
    d_head = shape.hidden // shape.n_heads
    q_out = shape.n_heads * d_head
    fwd = {
        "qkv": (tokens, (shape.n_heads + 2 * shape.n_kv_heads) * d_head // tp, shape.hidden),
        "attn_out": (tokens, shape.hidden, q_out // tp),
        "gate_up": (tokens, 2 * shape.ffn // tp, shape.hidden),
        "down": (tokens, shape.hidden, shape.ffn // tp),
        "lm_head": (tokens, shape.vocab // tp, shape.hidden),
    }
    out: list[tuple[str, int, int, int]] = []
    for name, (m, n, k) in fwd.items():
        out += [(f"{name}.fwd", m, n, k), (f"{name}.dgrad", m, k, n), (f"{name}.wgrad", k, n, m)]
    return out


def sweep_shapes(shape: LayerShape | None, tokens: int, tp: int,
                 grid: tuple[int, ...]) -> list[tuple[str, int, int, int]]:
    """Layer shapes (if a model is given) then the square grid, duplicates dropped."""
    seen: set[tuple[int, int, int]] = set()
    out = []
    items = (layer_gemms(shape, tokens, tp) if shape else []) + [("grid", g, g, g) for g in grid]
    for op, m, n, k in items:
        if (m, n, k) not in seen and min(m, n, k) > 0:
            seen.add((m, n, k))
            out.append((op, m, n, k))
    return out


def _time_gemm(torch, m: int, n: int, k: int, dtype: str, device: str, warmup: int,
               iters: int) -> float | None:
    """Median seconds of one (m,k)x(k,n) matmul; None if the dtype is unsupported here."""
    dev = torch.device(device)
    if dtype == "fp8":
        if dev.type != "cuda" or torch.cuda.get_device_capability(dev) < (8, 9) or (
                m % 16 or n % 16 or k % 16):
            return None
        a = torch.randn(m, k, device=dev).to(torch.float8_e4m3fn)
        b = torch.randn(n, k, device=dev).to(torch.float8_e4m3fn).t()  # column-major (k, n)
        one = torch.ones((), device=dev)

        def call():
            return torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    else:
        tdt = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[dtype]
        a = torch.randn(m, k, device=dev, dtype=tdt)
        b = torch.randn(k, n, device=dev, dtype=tdt)

        def call():
            return torch.matmul(a, b)
    return median_s(call_times_s(torch, dev, call, warmup, iters))


def run(args: argparse.Namespace) -> list[GemmRow]:
    import torch

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit("gemm_sweep: --device cuda but torch sees no GPU (use --device cpu)")
    if args.quick:  # seconds on a laptop CPU: the tiny layer, a 2-point grid, 3 timed calls
        args.model, args.tokens, args.grid = ("none" if args.model == "none" else "tiny",
                                              min(args.tokens, 128), list(QUICK_GRID))
        args.warmup, args.iters = min(args.warmup, 1), min(args.iters, 3)
    model = None if args.model == "none" else MODELS[args.model]
    grid, tokens = tuple(args.grid), args.tokens
    shapes = sweep_shapes(model, tokens, args.tp, grid)
    rows: list[GemmRow] = []
    for dtype in args.dtypes:
        for op, m, n, k in shapes:
            t = _time_gemm(torch, m, n, k, dtype, args.device, args.warmup, args.iters)
            if t is None:
                print(f"skip {dtype} {m}x{n}x{k}: not supported on {args.device}", file=sys.stderr)
                continue
            row = GemmRow(m, n, k, dtype, t, op, args.iters)
            rows.append(row)
            print(f"{op:>16} {dtype:>5} m={m:6d} n={n:6d} k={k:6d} {t * 1e6:10.1f} us "
                  f"{row.tflop_per_s:8.1f} TFLOP/s", file=sys.stderr)
    dev_name = (torch.cuda.get_device_name(torch.device(args.device))
                if args.device.startswith("cuda") else "cpu")
    source = provenance_line("gemm_sweep.py", device=dev_name, torch=torch.__version__,
                             cuda=torch.version.cuda, model=args.model, tokens=tokens, tp=args.tp,
                             warmup=args.warmup, iters=args.iters, statistic="median")
    write_gemm_csv(rows, args.out, source)
    print(f"wrote {args.out} ({len(rows)} rows)", file=sys.stderr)
    return rows


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=Path("gemm.csv"), help="CSV to write.")
    p.add_argument("--model", choices=[*MODELS, "none"], default="llama3-8b",
                   help="Model whose layer GEMMs to time ('none': grid only).")
    p.add_argument("--tokens", type=int, default=8192,
                   help="Tokens per micro-batch (micro-batch size x sequence length).")
    p.add_argument("--tp", type=int, default=1, help="Tensor-parallel degree (splits n or k).")
    p.add_argument("--grid", type=int, nargs="*", default=list(DEFAULT_GRID),
                   help="Square sizes m=n=k added to the layer shapes.")
    p.add_argument("--dtypes", nargs="+", choices=["bf16", "fp16", "fp8", "fp32"],
                   default=["bf16"], help="fp8 (torch._scaled_mm, e4m3) needs sm_89 or newer.")
    p.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu.")
    p.add_argument("--warmup", type=int, default=10, help="Untimed calls per shape.")
    p.add_argument("--iters", type=int, default=50, help="Timed calls per shape (median).")
    p.add_argument("--quick", action="store_true",
                   help="Dry run in seconds (tests, CPU): the 'tiny' layer, grid 64 128, "
                   "<=128 tokens, 1 warm-up and 3 timed calls.")
    return p.parse_args(argv)


if __name__ == "__main__":
    run(parse_args())
