"""Time ``perfmodel recommend`` end to end (subprocess wall time) and the search inside it.

    python benchmarks/bench_search.py [--repeat 3] [--range-counts 125]

Targets: >= 1,000,000 configurations per second inside the search (n_evaluated / search_time_s)
and < 3 s wall time for the whole command, on the GPT-3 175B / 1024 x A100 job below.
``--range-counts N`` also times a ``--gpus-range`` search over N GPU counts (512, 640, ... in steps of 128:
GPT-3 175B under Megatron-Kwai, global batch 40,320, 4K tokens; 125 counts hold 34.4 M configurations)
and reports its peak memory (the child's maximum resident set size), which the search keeps bounded by
keeping of each count only the rows that can still rank.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time

CMD = ["recommend", "--model", "gpt3-175b", "--gpu", "a100-sxm4-80gb", "--gpus", "1024", "--gpus-per-node", "8",
       "--global-batch", "1536", "--seq-len", "2048", "--json"]
TARGET_RATE = 1_000_000
TARGET_WALL_S = 3.0


def run_once() -> tuple[float, dict]:
    exe = shutil.which("perfmodel")
    argv = [exe, *CMD] if exe else [sys.executable, "-m", "perfmodel.cli", *CMD]
    t0 = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, check=True)
    return time.perf_counter() - t0, json.loads(proc.stdout)


def run_range(n_counts: int) -> None:
    """Wall time, configurations and the child's peak RSS of a long --gpus-range search."""
    import resource

    counts = ",".join(str(512 + 128 * i) for i in range(n_counts))
    cmd = ["recommend", "--model", "gpt3-175b", "--gpu", "h800-sxm5-80gb", "--framework", "megatron-kwai",
           "--global-batch", "40320", "--seq-len", "4096", "--gpus-range", counts, "--json"]
    exe = shutil.which("perfmodel")
    argv = [exe, *cmd] if exe else [sys.executable, "-m", "perfmodel.cli", *cmd]
    t0 = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, check=True)
    wall = time.perf_counter() - t0
    out = json.loads(proc.stdout)
    rss_gib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20  # KiB on Linux
    print(f"--gpus-range over {n_counts} counts (512..{512 + 128 * (n_counts - 1)}): wall {wall:.1f} s, "
          f"{out['n_evaluated']:,} configurations ({out['n_evaluated'] / out['search_time_s']:,.0f}/s), "
          f"peak RSS of the largest child so far {rss_gib:.2f} GiB, stderr {len(proc.stderr)} bytes")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--range-counts", type=int, default=0, help="also time a --gpus-range search over this many "
                    "GPU counts and report its peak memory")
    args = ap.parse_args()
    rows = [run_once() for _ in range(args.repeat)]
    print(f"perfmodel {' '.join(CMD)}")
    print(f"{'run':>3}  {'wall s':>7}  {'search s':>8}  {'n_evaluated':>11}  {'n_feasible':>10}  {'configs/s':>11}")
    for i, (wall, out) in enumerate(rows, 1):
        rate = out["n_evaluated"] / out["search_time_s"]
        print(f"{i:>3}  {wall:7.2f}  {out['search_time_s']:8.3f}  {out['n_evaluated']:11,}  {out['n_feasible']:10,}  "
              f"{rate:11,.0f}")
    best_wall = min(w for w, _ in rows)
    best_rate = max(o["n_evaluated"] / o["search_time_s"] for _, o in rows)
    ok = best_rate >= TARGET_RATE and best_wall < TARGET_WALL_S
    print(f"best: {best_rate:,.0f} configs/s (target >= {TARGET_RATE:,}), wall {best_wall:.2f} s "
          f"(target < {TARGET_WALL_S} s): {'met' if ok else 'NOT met'}")
    top = rows[0][1]["top"][0]
    print("winner:", {k: top[k] for k in ("tp", "pp", "dp", "cp", "vpp", "micro_batch", "sp", "zero_stage",
                                          "recompute", "tokens_per_s_per_gpu", "mfu", "memory_gib")})
    if args.range_counts:
        run_range(args.range_counts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
