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
