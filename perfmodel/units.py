"""Unit conversions, done once at the edges. Internally everything is SI (s, bytes, FLOP)."""
from __future__ import annotations

GIB_BYTES = 1024**3
GB_BYTES = 1e9
TFLOP = 1e12
US_S = 1e-6


def gbit_per_s_to_bytes_per_s(x_gbit_per_s):
    """Gbit/s (1e9 bit/s) -> bytes/s."""
    return x_gbit_per_s * 1e9 / 8.0


def gb_per_s_to_bytes_per_s(x_gb_per_s):
    """GB/s (1e9 bytes/s) -> bytes/s."""
    return x_gb_per_s * 1e9
