"""One GEMM back to back for ``--seconds``: the matmul rate under sustained load, over time -> CSV.

A sweep's median of a few calls catches the GPU at its boost clock; a training step keeps the
tensor cores busy for seconds, and a power-capped GPU lowers its clock. This records, for each
batch of ``--batch`` calls, the elapsed time since the start, the TFLOP/s of the batch (CUDA
events) and the SM clock (``torch.cuda.clock_rate``, NVML; blank where unavailable).

    python calibration/collect/sustained_gemm.py --size 8192 --seconds 20 --out sustained.csv
    python calibration/collect/sustained_gemm.py --device cpu --quick --out sustained_cpu.csv

Columns ``t_s,tflop_per_s,sm_clock_mhz,m,n,k,dtype,calls`` after a ``# source:`` line.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from collect_common import provenance_line, write_rows_csv  # noqa: E402

COLUMNS = ["t_s", "tflop_per_s", "sm_clock_mhz", "m", "n", "k", "dtype", "calls"]


def run(args: argparse.Namespace) -> list[dict]:
    import torch

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit("sustained_gemm: --device cuda but torch sees no GPU (use --device cpu)")
    if args.quick:
        args.size, args.seconds, args.batch = 128, 0.5, 5
    dev = torch.device(args.device)
    n = args.size
    a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    cuda = dev.type == "cuda"
    rows: list[dict] = []
    t_start = time.perf_counter()
    while time.perf_counter() - t_start < args.seconds:
        if cuda:
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
        t0 = time.perf_counter()
        for _ in range(args.batch):
            torch.matmul(a, b)
        if cuda:
            e.record()
            torch.cuda.synchronize(dev)
            dt = s.elapsed_time(e) * 1e-3
        else:
            dt = time.perf_counter() - t0
        try:
            clock = torch.cuda.clock_rate(dev) if cuda else None
        except Exception:  # noqa: BLE001 - NVML missing: the column stays blank
            clock = None
        rows.append({"t_s": round(time.perf_counter() - t_start, 4),
                     "tflop_per_s": round(2.0 * n**3 * args.batch / dt / 1e12, 2), "sm_clock_mhz": clock,
                     "m": n, "n": n, "k": n, "dtype": "bf16", "calls": args.batch})
    source = provenance_line("sustained_gemm.py", device=torch.cuda.get_device_name(dev) if cuda else "cpu",
                             torch=torch.__version__, cuda=torch.version.cuda, size=n, seconds=args.seconds,
                             batch=args.batch)
    out = write_rows_csv(rows, COLUMNS, args.out, source)
    rates = [r["tflop_per_s"] for r in rows]
    print(f"wrote {out} ({len(rows)} rows): first {rates[0]:.1f}, last {rates[-1]:.1f}, "
          f"min {min(rates):.1f}, max {max(rates):.1f} TFLOP/s", file=sys.stderr)
    return rows


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=Path("sustained.csv"), help="CSV to write.")
    p.add_argument("--size", type=int, default=8192, help="m = n = k of the bf16 GEMM.")
    p.add_argument("--seconds", type=float, default=20.0, help="How long to keep the GPU busy.")
    p.add_argument("--batch", type=int, default=50, help="Calls timed together (one row).")
    p.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu.")
    p.add_argument("--quick", action="store_true", help="Half a second on a CPU, 128^3.")
    return p.parse_args(argv)


if __name__ == "__main__":
    run(parse_args())
