"""Attention kernel sweep (``scaled_dot_product_attention``) -> CSV of achieved TFLOP/s.

For each sequence length s and head dim d: batch = ``--tokens`` // s and heads =
``--hidden`` // d (FlashAttention's benchmark setup, so every point does the same work per
token), layout (b, h, s, d), causal by default. Times the forward, and forward plus backward,
``--iters`` times after ``--warmup`` calls; the median is written.

    python calibration/collect/attention_sweep.py --out attention.csv
    python calibration/collect/attention_sweep.py --device cpu --quick --out attn_cpu.csv

FLOP convention (FlashAttention's ``benchmark_flash_attention.py``): fwd = 4*b*s^2*h*d, halved
when causal; bwd = 2.5 * fwd; the ``fwd+bwd`` rows use 3.5 * fwd. Columns:
batch,seq_len,n_heads,head_dim,causal,direction,dtype,time_s,tflop_per_s,backend,n_iters
(``causal`` yes/no and ``direction`` fwd / fwd+bwd as in calibration/data/kernels.csv).
Compare tflop_per_s with the GPU's dense bf16 peak to get ``attention_efficiency_max``.
"""
from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from collect_common import AttentionRow, call_times_s, median_s, provenance_line, write_attention_csv  # noqa: E402

DEFAULT_SEQ_LENS = (512, 1024, 2048, 4096, 8192, 16384)
DEFAULT_HEAD_DIMS = (64, 128)


def _backend_ctx(torch, backend: str):
    """Force one SDPA backend (``torch.nn.attention.sdpa_kernel``) or let PyTorch choose."""
    if backend == "auto":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel({"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
                        "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}[backend])


def measure(torch, *, batch: int, seq_len: int, n_heads: int, head_dim: int, causal: bool,
            dtype: str, device: str, backend: str, warmup: int, iters: int) -> list[AttentionRow]:
    """fwd and fwd+bwd rows for one shape."""
    F = torch.nn.functional
    dev = torch.device(device)
    tdt = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[dtype]
    q, k, v = (torch.randn(batch, n_heads, seq_len, head_dim, device=dev, dtype=tdt,
                           requires_grad=True) for _ in range(3))
    grad = torch.randn(batch, n_heads, seq_len, head_dim, device=dev, dtype=tdt)

    def fwd():
        with torch.no_grad():
            F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    def fwd_bwd():
        q.grad = k.grad = v.grad = None
        F.scaled_dot_product_attention(q, k, v, is_causal=causal).backward(grad)

    rows = []
    with _backend_ctx(torch, backend):
        for direction, call in (("fwd", fwd), ("fwd+bwd", fwd_bwd)):
            t = median_s(call_times_s(torch, dev, call, warmup, iters))
            rows.append(AttentionRow(batch, seq_len, n_heads, head_dim, causal, direction, dtype,
                                     t, backend, iters))
    return rows


def run(args: argparse.Namespace) -> list[AttentionRow]:
    import torch

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit("attention_sweep: --device cuda but torch sees no GPU (use --device cpu)")
    if args.quick:
        args.seq_lens, args.head_dims, args.tokens, args.hidden = [64, 128], [32], 256, 64
        args.warmup, args.iters = min(args.warmup, 1), min(args.iters, 3)
    rows: list[AttentionRow] = []
    for d in args.head_dims:
        for s in args.seq_lens:
            b, h = max(1, args.tokens // s), max(1, args.hidden // d)
            try:
                new = measure(torch, batch=b, seq_len=s, n_heads=h, head_dim=d,
                              causal=not args.no_causal, dtype=args.dtype, device=args.device,
                              backend=args.backend, warmup=args.warmup, iters=args.iters)
            except (RuntimeError, torch.cuda.OutOfMemoryError) as exc:  # backend refuses the shape
                print(f"skip s={s} d={d}: {str(exc).splitlines()[0]}", file=sys.stderr)
                continue
            rows += new
            for r in new:
                print(f"s={s:6d} d={d:4d} b={b:3d} h={h:3d} {r.direction:>8} "
                      f"{r.time_s * 1e3:9.3f} ms {r.tflop_per_s:8.1f} TFLOP/s", file=sys.stderr)
    dev_name = (torch.cuda.get_device_name(torch.device(args.device))
                if args.device.startswith("cuda") else "cpu")
    source = provenance_line("attention_sweep.py", device=dev_name, torch=torch.__version__,
                             cuda=torch.version.cuda, tokens=args.tokens, hidden=args.hidden,
                             warmup=args.warmup, iters=args.iters, statistic="median",
                             flop="fwd 4*b*s^2*h*d*(0.5 if causal), fwd+bwd 3.5x fwd")
    write_attention_csv(rows, args.out, source)
    print(f"wrote {args.out} ({len(rows)} rows)", file=sys.stderr)
    return rows


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=Path("attention.csv"), help="CSV to write.")
    p.add_argument("--seq-lens", type=int, nargs="+", default=list(DEFAULT_SEQ_LENS))
    p.add_argument("--head-dims", type=int, nargs="+", default=list(DEFAULT_HEAD_DIMS))
    p.add_argument("--tokens", type=int, default=16384, help="batch x seq_len at every point.")
    p.add_argument("--hidden", type=int, default=2048, help="n_heads x head_dim at every point.")
    p.add_argument("--no-causal", action="store_true", help="Full (non-causal) attention.")
    p.add_argument("--dtype", choices=["bf16", "fp16", "fp32"], default="bf16")
    p.add_argument("--backend", choices=["auto", "flash", "efficient", "cudnn", "math"],
                   default="auto", help="SDPA backend to force (auto: PyTorch's choice).")
    p.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu.")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--quick", action="store_true",
                   help="Dry run in seconds (tests, CPU): s 64 128, d 32, 256 tokens, 3 calls.")
    return p.parse_args(argv)


if __name__ == "__main__":
    run(parse_args())
