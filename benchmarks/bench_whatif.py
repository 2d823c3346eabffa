"""Speed of the what-if sweep's fixed path: 100 points costed by one batched ``step_costs`` call.

    python benchmarks/bench_whatif.py [--repeat 5]

Llama-3 70B at 8K on H100s, global batch 1920, tp=8 pp=4 vpp=5 selective recompute, swept over
10 GPU counts (64..1024, dp = 2..32, each dividing the batch) x 10 scale-out bandwidths
(400..3200 Gbit/s per node) = 100 valid points. Prints the best and median wall time of the whole
``perfmodel.whatif`` call (inputs built per point, one step_costs call, DataFrame), and for
comparison the best-configuration mode on 10 points.
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import perfmodel as pm


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    model = pm.load_model("llama3-70b")
    cluster = pm.ClusterSpec.build(pm.load_gpu("h100-sxm5-80gb"), n_gpus=512)
    job = pm.JobSpec(global_batch=1920, seq_len=8192)
    par = pm.ParallelSpec(tp=8, pp=4, vpp=5, recompute="selective")
    gpus = [32 * dp for dp in (2, 4, 6, 8, 10, 12, 16, 20, 24, 32)]
    bandwidths = [float(b) for b in np.linspace(400, 3200, 10)]
    sweep = {"gpus": gpus, "scale_out_gbit_per_s": bandwidths}

    pm.whatif(model, cluster, job, sweep, mode="fixed", parallel=par)  # warm-up: imports, YAML, caches
    times = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        df = pm.whatif(model, cluster, job, sweep, mode="fixed", parallel=par)
        times.append(time.perf_counter() - t0)
    ok = int((df["status"] == "ok").sum())
    print(f"fixed mode: {len(df)} points ({ok} valid) in best {min(times) * 1e3:.1f} ms, "
          f"median {statistics.median(times) * 1e3:.1f} ms over {args.repeat} runs "
          f"({len(df) / min(times):,.0f} points/s)")

    t0 = time.perf_counter()
    best = pm.whatif(model, cluster, job, {"gpus": gpus}, mode="best")
    dt = time.perf_counter() - t0
    print(f"best mode: {len(best)} points (a full search each) in {dt:.2f} s")


if __name__ == "__main__":
    main()
