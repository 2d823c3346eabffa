"""GEMM time with tile and wave quantization (perfmodel/costs/compute.py): more work is never faster,
and a small GEMM takes the tile cuBLAS would (NVIDIA Matrix Multiplication Background guide, sec. 2.3,
3.1, 3.2)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfmodel.costs.compute import TILE_M, TILE_N, gemm_time_s, wave_efficiency

H100 = dict(peak_flop_per_s=989.4e12, matmul_efficiency_max=0.803, n_sms=132, hbm_bytes_per_s=3.35e12)


def test_one_more_row_is_not_faster():
    """Reviewer's case: one 128 x 256 tile per column block made m = 129 (two rows of tiles, twice the
    'useful' tiles) run in half the time of m = 128."""
    assert gemm_time_s(129, 6144, 4096, **H100) >= gemm_time_s(128, 6144, 4096, **H100)


@settings(max_examples=300, deadline=None)
@given(m=st.integers(1, 20000), n=st.integers(1, 20000), dm=st.integers(0, 300), dn=st.integers(0, 300),
       sms=st.sampled_from([80, 108, 132, 148, 152]))
def test_gemm_time_never_falls_as_the_output_grows(m, n, dm, dn, sms):
    args = dict(H100, n_sms=sms)
    assert gemm_time_s(m + dm, n + dn, 4096, **args) >= gemm_time_s(m, n, 4096, **args) * (1 - 1e-12)


def test_a_small_gemm_fills_more_sms_with_a_smaller_tile():
    """Llama-3 70B's QKV projection at TP 8 on 512-token micro-batches (512 x 1280): 20 tiles of 128 x 256
    on 132 SMs (15% busy), 80 of 64 x 128 (61% busy), as cuBLAS's small-GEMM kernels run it."""
    large_only = 512 * 1280 / (132 * 128 * 256)
    assert (TILE_M, TILE_N) == (64, 128)
    assert wave_efficiency(512, 1280, 132) == pytest.approx(4 * large_only)
    # a big square GEMM is within a few percent of the best-shape rate
    assert wave_efficiency(8192, 8192, 132) > 0.95
    # partly filled tiles: 65 rows take two row tiles (128 padded rows) in one wave of 132 SMs
    assert wave_efficiency(65, 128, 132) == pytest.approx(65 * 128 / (132 * 64 * 128))
    assert wave_efficiency(65, 128, 132) == pytest.approx(wave_efficiency(128, 128, 132) * 65 / 128)


def test_wave_efficiency_is_a_fraction():
    m = np.arange(1, 5000, 37.0)
    eff = wave_efficiency(m[:, None], m[None, :], 132)
    assert np.all((eff > 0) & (eff <= 1.0))
