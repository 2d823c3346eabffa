"""Upper bounds on the sizes a user may give: far beyond any real job, small enough that the
search's int32 arrays and the cost model's float64 arithmetic stay exact."""
from __future__ import annotations

#: a million GPUs: well beyond any cluster, small enough to enumerate
MAX_GPUS = 1 << 20
#: sequences per batch / tokens per sequence (int32 in the search arrays)
MAX_COUNT = (1 << 31) - 1
#: bytes of one collective (1 PiB) and NIC bandwidth per node (1 Pbit/s)
MAX_BYTES = 1 << 50
MAX_GBIT_PER_S = 1.0e6
#: slowest NIC bandwidth per node (1 Mbit/s): below it every time overflows to infinity
MIN_GBIT_PER_S = 1.0e-3

#: a measured rate faster than this multiple of the GPU's dense peak for its precision is not a real
#: measurement (wrong unit, wrong dtype label, TF32 timed as fp32, a per-node total, a broken timer)
MAX_ACHIEVED_OVER_PEAK = 1.5

#: the fastest a stack's kernels may run in the runs fit (``FrameworkProfile.kernel_efficiency``): 1.15 x the
#: GEMM model's matmul_training_efficiency 0.85 is the best-shape matmul rate (MAMF); a fit that ends here
#: says the stack's measured runs are faster than kernel speed explains
MAX_KERNEL_EFFICIENCY = 1.15
