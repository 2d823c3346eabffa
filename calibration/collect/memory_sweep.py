"""Memory-bound kernels on one GPU -> CSV: what HBM bandwidth a training step's streaming work gets.

Measures, at each ``--sizes`` (MiB of the main operand):
* ``copy``      y.copy_(x), bf16: reads and writes the tensor (2 x bytes);
* ``add``       z = x + y, bf16: reads two, writes one (3 x bytes), a residual add;
* ``swiglu``    silu(g) * u, bf16: reads two, writes one (3 x bytes), unfused eager kernels;
* ``adamw``     one ``torch.optim.AdamW(fused=True)`` step over fp32 parameters of that size with
  fp32 gradients: reads p, g, m, v and writes p, m, v, 28 bytes a parameter (the kernel's
  minimum traffic; perfmodel's ``optimizer_bytes_per_param`` adds the gradient-norm read, the
  zeroing and the 16-bit copy).
Each point: ``--warmup`` untimed calls, then ``--iters`` calls timed with CUDA events, median.

    python calibration/collect/memory_sweep.py --out memory.csv
    python calibration/collect/memory_sweep.py --device cpu --quick --out memory_cpu.csv   # no GPU

Columns ``op,dtype,n_elements,bytes_moved,time_s,gb_per_s,n_iters`` after a ``# source:`` line;
``gb_per_s`` = bytes_moved / time_s / 1e9 (GB = 10^9 B, the unit of HBM datasheets).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from collect_common import call_times_s, median_s, provenance_line, write_rows_csv  # noqa: E402

COLUMNS = ["op", "dtype", "n_elements", "bytes_moved", "time_s", "gb_per_s", "n_iters"]
ADAMW_BYTES_PER_PARAM = 28
"""Fused AdamW, fp32 state: read p, g, m, v (16 B) and write p, m, v (12 B)."""
DEFAULT_SIZES_MIB = (64, 256, 1024, 4096)
QUICK_SIZES_MIB = (1, 4)


def measure(torch, size_mib: int, dev, warmup: int, iters: int) -> list[dict]:
    """The four ops at one size (elements of the bf16 operand = size / 2 B; AdamW over size / 4 B fp32)."""
    F = torch.nn.functional
    n16 = size_mib * 2**20 // 2
    x, y = (torch.randn(n16, device=dev, dtype=torch.bfloat16) for _ in range(2))
    z = torch.empty_like(x)
    rows = []

    def add():
        torch.add(x, y, out=z)

    def swiglu():
        return F.silu(x) * y

    for op, call, nbytes in (("copy", lambda: z.copy_(x), 2 * 2 * n16), ("add", add, 3 * 2 * n16),
                             ("swiglu", swiglu, 3 * 2 * n16)):
        t = median_s(call_times_s(torch, dev, call, warmup, iters))
        rows.append({"op": op, "dtype": "bf16", "n_elements": n16, "bytes_moved": nbytes, "time_s": t})
    del x, y, z
    n32 = size_mib * 2**20 // 4
    p = torch.nn.Parameter(torch.randn(n32, device=dev))
    p.grad = torch.randn(n32, device=dev)
    opt = torch.optim.AdamW([p], lr=1e-4, fused=dev.type == "cuda")
    t = median_s(call_times_s(torch, dev, opt.step, warmup, iters))
    rows.append({"op": "adamw", "dtype": "fp32", "n_elements": n32, "bytes_moved": ADAMW_BYTES_PER_PARAM * n32,
                 "time_s": t})
    for r in rows:
        r["gb_per_s"] = r["bytes_moved"] / r["time_s"] / 1e9
        r["n_iters"] = iters
    return rows


def run(args: argparse.Namespace) -> list[dict]:
    import torch

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit("memory_sweep: --device cuda but torch sees no GPU (use --device cpu)")
    if args.quick:
        args.sizes, args.warmup, args.iters = list(QUICK_SIZES_MIB), min(args.warmup, 1), min(args.iters, 3)
    dev = torch.device(args.device)
    rows: list[dict] = []
    for size in args.sizes:
        new = measure(torch, size, dev, args.warmup, args.iters)
        rows += new
        for r in new:
            print(f"{r['op']:>7} {size:6d} MiB {r['time_s'] * 1e6:10.1f} us {r['gb_per_s']:8.1f} GB/s", file=sys.stderr)
    source = provenance_line("memory_sweep.py", device=torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
                             torch=torch.__version__, cuda=torch.version.cuda, warmup=args.warmup, iters=args.iters,
                             statistic="median", adamw_bytes_per_param=ADAMW_BYTES_PER_PARAM)
    out = write_rows_csv([{**r, "time_s": f"{r['time_s']:.9e}", "gb_per_s": f"{r['gb_per_s']:.6g}"} for r in rows],
                         COLUMNS, args.out, source)
    print(f"wrote {out} ({len(rows)} rows)", file=sys.stderr)
    return rows


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=Path("memory.csv"), help="CSV to write.")
    p.add_argument("--sizes", type=int, nargs="+", default=list(DEFAULT_SIZES_MIB),
                   help="MiB of the main operand at each point.")
    p.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu.")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--quick", action="store_true", help="Seconds on a CPU: two small sizes, 3 timed calls.")
    return p.parse_args(argv)


if __name__ == "__main__":
    run(parse_args())
