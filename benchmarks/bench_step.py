"""Throughput of the batched cost model: evaluations of ``perfmodel.step.step_costs`` per second.

    python benchmarks/bench_step.py [--n 100000] [--seed 0] [--repeat 3]

Builds N random *valid* configurations (several catalog models and GPUs; tp dividing the heads
and compatible with the kv heads, pp dividing the layers, vpp dividing the layers per stage,
micro-batch dividing the per-replica batch, ZeRO 0..3, every recompute mode) as one set of
arrays, warms up once, then times ``step_costs`` on all of them. Hardware and framework inputs
come from ``build_inputs`` on an 8-GPU cluster of each GPU (no fabric-congestion derating).
"""
from __future__ import annotations

import argparse
import time

import numpy as np

import perfmodel
from perfmodel.estimate import build_inputs
from perfmodel.step import STEP_INPUTS, step_costs

MODELS = ["gpt3-13b", "gpt3-175b", "llama2-7b", "llama2-70b", "llama3-8b", "llama3-70b", "llama3.1-405b"]
GPUS = ["a100-sxm4-80gb", "h100-sxm5-80gb", "h200-sxm-141gb", "b200"]
FRAMEWORKS = ["megatron-lm", "nemo", "torchtitan"]


def divisors(n: int, limit: int) -> list[int]:
    return [d for d in range(1, min(n, limit) + 1) if n % d == 0]


def random_configs(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    combos = [(m, g, f) for m in MODELS for g in GPUS for f in FRAMEWORKS]
    pick = rng.integers(len(combos), size=n)
    cols: dict[str, np.ndarray] = {k: np.empty(n) for k in STEP_INPUTS}
    for ci, (m_name, g_name, fw) in enumerate(combos):
        rows = np.flatnonzero(pick == ci)
        if rows.size == 0:
            continue
        model = perfmodel.load_model(m_name)
        gpu = perfmodel.load_gpu(g_name)
        base = build_inputs(
            model, perfmodel.ClusterSpec.build(gpu, 8), perfmodel.ParallelSpec(tp=1, dp=8),
            perfmodel.JobSpec(global_batch=8, seq_len=2048, framework=fw),
        )
        for k in STEP_INPUTS:
            cols[k][rows] = base[k]
        k = rows.size
        tps = [t for t in divisors(model.n_heads, 8) if model.n_kv_heads % t == 0 or t % model.n_kv_heads == 0]
        pp_vpp = [(p, v) for p in divisors(model.n_layers, 16)
                  for v in (divisors(model.n_layers // p, 8) if p > 1 else [1])]
        tp = rng.choice(tps, size=k)
        pv = np.array(pp_vpp)[rng.integers(len(pp_vpp), size=k)]
        dp = 2.0 ** rng.integers(0, 8, size=k)
        mb = rng.choice([1, 2, 4], size=k)
        cols["tp"][rows] = tp
        cols["pp"][rows], cols["vpp"][rows] = pv[:, 0], pv[:, 1]
        cols["dp"][rows] = dp
        cols["cp"][rows] = rng.choice([1, 1, 2, 4], size=k)
        cols["micro_batch"][rows] = mb
        cols["global_batch"][rows] = dp * mb * rng.choice([1, 2, 4, 8, 16, 32], size=k)
        cols["seq_len"][rows] = rng.choice([2048, 4096, 8192], size=k)
        cols["sp"][rows] = (rng.random(k) < 0.7) & (tp > 1)
        cols["zero_stage"][rows] = rng.integers(0, 4, size=k)
        cols["recompute"][rows] = rng.integers(0, 3, size=k)
    return cols


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    t0 = time.perf_counter()
    x = random_configs(args.n, args.seed)
    t_build = time.perf_counter() - t0
    step_costs({k: v[:1000] for k, v in x.items()})  # warm-up
    times = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        out = step_costs(x)
        times.append(time.perf_counter() - t0)
    best = min(times)
    assert np.all(np.isfinite(out["iteration_time_s"])) and np.all(out["iteration_time_s"] > 0)
    print(f"configurations: {args.n:,} (built in {t_build:.2f} s)")
    print(f"step_costs: best of {args.repeat}: {best:.3f} s -> {args.n / best:,.0f} evaluations/s "
          f"(median {args.n / float(np.median(times)):,.0f}/s)")
    print(f"fits: {np.mean(out['fits']):.1%}, median MFU {np.median(out['mfu']):.3f}")


if __name__ == "__main__":
    main()
