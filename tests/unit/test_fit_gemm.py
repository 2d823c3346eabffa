"""GEMM benchmark fit (``perfmodel calibrate --gemm``): 16-bit and 8-bit rows give their own MAMF."""
import numpy as np
import pandas as pd
import pytest

from perfmodel.calibrate.command import fit_gemm
from perfmodel.catalog import load_gpu
from perfmodel.costs.compute import gemm_time_s


def synthetic(gpu, dtype, eff, shapes):
    g = load_gpu(gpu)
    m, n, k = (np.array(c, dtype=float) for c in zip(*shapes))
    t = gemm_time_s(m, n, k, g.peak_flop_per_s(dtype), eff, g.n_sms, g.hbm_bandwidth_bytes_per_s)
    return pd.DataFrame({"m": m, "n": n, "k": k, "dtype": dtype, "time_s": t})


def test_fit_gemm_separates_16_and_8_bit():
    shapes = [(4096, 4096, 4096), (8192, 8192, 2048), (2048, 16384, 4096), (1024, 8192, 8192), (512, 4096, 4096)]
    both = pd.concat([synthetic("h100-sxm5-80gb", "bf16", 0.74, shapes),
                      synthetic("h100-sxm5-80gb", "fp8", 0.61, shapes)], ignore_index=True)
    effs, errs = fit_gemm(both, "h100-sxm5-80gb")
    assert effs["matmul_efficiency_max"] == pytest.approx(0.74, rel=0.01)
    assert effs["fp8_matmul_efficiency_max"] == pytest.approx(0.61, rel=0.01)
    assert errs.abs_err_pct.max() < 1.0
    only16, _ = fit_gemm(synthetic("a100-sxm4-80gb", "bf16", 0.8, shapes), "a100-sxm4-80gb")
    assert set(only16) == {"matmul_efficiency_max"}
