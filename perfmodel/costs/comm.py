"""Collective communication time: an alpha-beta model over two network tiers.

A process group of n ranks placed with a stride (ranks i, i+stride, ...; Megatron-Core order
tp-cp-dp-pp) has k = members per NVLink domain. Hierarchical collectives (NCCL's tree / NVLS
and the per-rail rings) move the intra-domain part over NVLink and the inter-domain part over
the k NICs the group owns in each domain, the two parts pipelined:

    t = max(f_op(k) S / bw_nvlink,  f_op(N) S / (k bw_nic)) + latency,   N = n / k

latency = alpha_intra inside a domain (a whole small NCCL collective there: 8-byte all-reduce on
8 H100s takes ~13 us, shared/data/traces/nccl/aws_p5_1node_h100_allreduce.txt), and
alpha_inter (1 + log2(N)/2) across N domains (tree depth grows with log N).

with f_AR(n) = 2(n-1)/n and f_AG(n) = f_RS(n) = (n-1)/n (Patarasuk & Yuan 2009; nccl-tests
doc/PERFORMANCE.md, whose busbw is exactly S f_op(n) / t). ``bw_nic`` is one GPU's share of its
node's NICs: all GPUs of a node run their own groups at once (rail-optimized fabrics).
S is nccl-tests' ``size``: the whole buffer (for all-gather / reduce-scatter the gathered size).

Optional refinements (defaults keep the form above; fitted by perfmodel.calibrate.fit_collectives):
- ``ring_inter_node``: NCCL's flat ring instead of the hierarchical split. One ring per rail runs
  through all n ranks, so each rank's NIC carries f_op(n) S / k (not f_op(N) S / k): busbw then
  equals the node's NIC bandwidth k bw_nic at any node count (nccl-tests doc/PERFORMANCE.md,
  "busbw ... should be compared to the slowest link"; A100 clusters without NVLS, e.g. Polaris
  busbw 36.6 / 36.4 / 30.9 GB/s at 2 / 8 / 256 nodes, where the split predicts a 1.75x drop).
- ``latency_log2_coeff``: the growth b of alpha_inter (1 + b log2 N) (0.5 = the fixed tree depth
  guess above; fitted per fabric).
- ``ring_step_latency_s``: per-step latency of a flat ring over all n ranks, added to the
  latency: (n-1) steps for all-gather / reduce-scatter / all-to-all, 2(n-1) for all-reduce
  (Thakur, Rabenseifner & Gropp 2005, "Optimization of collective communication operations in
  MPICH", ring all-gather (p-1) alpha + (p-1)/p n beta); NCCL has no tree for all-gather, so at
  hundreds of nodes this term dominates (Polaris all_gather 1 GiB: 26 ms at 2 nodes, 94 ms at 540).
- ``ll_latency_s`` / ``ll_bandwidth_ratio``: the protocol switch. Across nodes NCCL runs small and
  mid-size messages with its low-latency protocols (LL: 8-byte stores carrying a 4-byte flag, half
  the bandwidth; LL128: 120 of 128 bytes) and large ones with Simple, whose latency is higher: NCCL
  holds a latency and a bandwidth per algorithm and protocol (src/graph/tuning.cc, ``baseLat`` /
  ``hwLat`` tables, ``ncclTopoTuneModel``) and runs each size with the lowest latency + size / bandwidth
  (src/enqueue.cc, ``updateCollCostTable``; "Demystifying NCCL", arXiv 2507.04786).
  The collective takes

      t = min(b + a_simple,  b / r + a_ll),   b = max(intra, inter)

  with a_ll growing with log2 N like a_simple. AWS p5, 2 nodes, all_reduce: 121 us at 1 MiB and
  205 us at 8 MiB (about 90 GB/s algbw on top of ~110 us), but 601 us at 64 MiB and 4.6 ms at 1 GiB
  (about 250 GB/s on top of ~330 us): one alpha-beta line cannot pass through both. A ratio of 0
  (the default) turns the switch off.
"""
from __future__ import annotations

import numpy as np

OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv")


def op_factor(op: str, n):
    """Bytes a rank moves per byte of S (nccl-tests' busbw / algbw factor)."""
    n = np.asarray(n, dtype=float)
    if op == "all_reduce":
        return 2.0 * (n - 1.0) / n
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1.0) / n
    if op == "send_recv":
        return np.ones_like(n)
    raise ValueError(f"op: must be one of {', '.join(OPS)} (got {op!r})")


def _worst_block(span, D, N, s):
    """(ranks in the smallest domain piece, domains touched, ranks in the largest piece) of the worst-placed
    block of ``span`` consecutive GPUs among the blocks that tile a job of N GPUs on domains of D (arrays of
    one shape).
    Block j starts at j span: its pieces are the rest of the domain it starts in, whole domains, and
    the start of the last one. Start offsets repeat every D / gcd(span, D) blocks, so at most that
    many (72 on NVL72) are walked, and no more than the job holds."""
    g = np.gcd(np.maximum(np.rint(span).astype(np.int64), 1), np.maximum(np.rint(D).astype(np.int64), 1))
    blocks = np.where(np.isfinite(N), np.floor(np.where(np.isfinite(N), N, 0.0) / span), np.inf)
    walk = np.maximum(np.minimum(blocks, D / g), 1.0)
    least, touched, most = np.full(span.shape, np.inf), np.ones(span.shape), np.zeros(span.shape)
    for j in range(int(walk.max()) if walk.size else 0):
        active = j < walk
        start = np.mod(j * span, D)
        first = np.minimum(span, D - start)
        rest = span - first
        full = np.floor(rest / D)
        last = rest - full * D
        piece = np.minimum(first, np.where(last > 0, last, np.inf))
        piece = np.where(full > 0, np.minimum(piece, D), piece)
        domains = 1.0 + full + (last > 0)
        worse = active & ((piece < least) | ((piece == least) & (domains > touched)))
        largest = np.maximum(np.maximum(first, np.where(full > 0, D, 0.0)), last)
        least, touched = np.where(worse, piece, least), np.where(worse, domains, touched)
        most = np.where(worse, largest, most)
    # ranks sit every s GPUs: a piece of p GPUs holds floor(p / s) or ceil(p / s) of them
    return np.maximum(np.floor(least / s), 1.0), touched, np.maximum(np.ceil(most / s), 1.0)


def group_placement(group_size, stride, domain_gpus, job_gpus=np.inf, lined_up=False):
    """(ranks in the worst-placed group's smallest domain piece, domains it spans): see ``group_layout``."""
    return group_layout(group_size, stride, domain_gpus, job_gpus, lined_up)[:2]


def group_layout(group_size, stride, domain_gpus, job_gpus=np.inf, lined_up=False):
    """(ranks per NVLink domain, domains spanned) of the worst-placed group of ``group_size`` ranks at
    the placement ``stride`` -- a synchronous collective runs at its slowest group's pace.

    A group of n ranks at stride s covers a block of n s consecutive GPUs; the blocks tile the job.
    * A job of ``job_gpus`` <= D GPUs has no domain boundary inside it: all n ranks share one.
    * Blocks line up with the domains when D divides n s or n s divides D: D / s ranks in each of
      n s / D domains (all n in one when the block fits), where s divides D.
    * Otherwise some block straddles a boundary and the worst one sets the pace (``_worst_block``):
      TP 4 on 6-GPU nodes, ranks 4-7 sit 2 + 2 on two nodes; DP 128 as the whole job on NVL72 racks,
      72 + 56; TP 16 on 144 GB200s, ranks 64-79 sit 8 + 8.
    ``lined_up``: the caller knows every block lines up (power-of-two sizes and domains): no test.
    A third value is the fullest domain's rank count, which paces the NVLink phase: the smallest
    piece's where every block lines up (the same array), else the worst block's largest piece, between its
    smallest piece and n less that piece."""
    n = np.asarray(group_size, dtype=float)
    s = np.maximum(np.asarray(stride, dtype=float), 1.0)
    D = np.asarray(domain_gpus, dtype=float)
    k = np.clip(np.floor(D / s), 1.0, np.maximum(n, 1.0))
    n_domains = np.maximum(n / k, 1.0)
    if lined_up:
        return k, n_domains, k
    N = np.asarray(job_gpus, dtype=float)
    span = n * s
    # n s divides D, or D divides n s (ratios of whole numbers: exact in floating point); a block that lines
    # up with the domains but whose stride does not divide D (ranks 0, 4, 8 on 6-GPU nodes: 2 + 1) holds
    # uneven pieces, which the worst-block walk counts (D / s ranks a domain would count 3 domains)
    up, down = D / span, span / D
    uneven = (np.mod(D, s) != 0) & (s < D) & (span > D)
    misfit = (((up != np.floor(up)) & (down != np.floor(down))) | uneven) & (N > D)
    if np.any(misfit):  # rare: power-of-two layouts on 8-GPU nodes never are
        shape = np.broadcast(n, s, D, N).shape
        span_b, D_b, N_b, s_b = (np.broadcast_to(v, shape)[np.broadcast_to(misfit, shape)] for v in (span, D, N, s))
        k_w, dom_w, most_w = _worst_block(span_b, D_b, N_b, s_b)
        k, n_domains = np.array(np.broadcast_to(k, shape)), np.array(np.broadcast_to(n_domains, shape))
        where = np.broadcast_to(misfit, shape)
        k_full = k.copy()  # a domain's share where the block lines up; the fullest piece's where it straddles
        n_b = np.broadcast_to(n, shape)[where]
        k[where] = np.minimum(k_w, n_b)
        n_domains[where] = np.minimum(dom_w, np.broadcast_to(np.maximum(n, 1.0), shape)[where])
        # the fullest piece: at most the group less its smallest piece where the block straddles, and never
        # fewer than the smallest
        k_full[where] = np.maximum(np.minimum(most_w, np.where(n_domains[where] > 1, n_b - k[where], n_b)), k[where])
        return k, n_domains, k_full
    return k, n_domains, k


def members_per_domain(group_size, stride, domain_gpus, job_gpus=np.inf, lined_up=False):
    """Ranks per NVLink domain of the worst-placed group (``group_placement``)."""
    return group_placement(group_size, stride, domain_gpus, job_gpus, lined_up)[0]


def congestion_factor(n_domains, congestion_nodes, congestion_max_nodes=np.inf):
    """How much a congesting fabric slows what spans ``n_domains`` NVLink domains: 1 + N / congestion_nodes
    (tapered Clos; HF Ultra-Scale Playbook all-reduce bandwidth vs nodes), with N capped at the most nodes
    the congestion was measured on -- a fabric's taper bounds how far its bandwidth falls, and beyond the
    measurements nothing says where. 1 inside one domain."""
    n = np.asarray(n_domains, dtype=float)
    return np.where(n > 1.0, 1.0 + np.minimum(n, congestion_max_nodes) / congestion_nodes, 1.0)


def collective_time_s(
    op: str,
    size_bytes,
    group_size,
    stride,
    domain_gpus,
    nvlink_bytes_per_s,
    nic_bytes_per_s_per_gpu,
    intra_latency_s,
    inter_latency_s,
    *,
    ring_inter_node=False,
    latency_log2_coeff=0.5,
    ring_step_latency_s=0.0,
    congestion_nodes=np.inf,
    congestion_max_nodes=np.inf,
    ll_latency_s=0.0,
    ll_bandwidth_ratio=0.0,
    job_gpus=np.inf,
    placement=None,
):
    """Time of one collective of nccl-tests size S on a group of ``group_size`` ranks.

    The keyword-only refinements are described in the module docstring; their defaults give
    the plain two-tier model. ``placement``: the group's (members per domain, domains spanned[, fullest
    domain's members]) when the caller has them already (``group_layout``), so several collectives of one
    group share them."""
    n = np.asarray(group_size, dtype=float)
    where = placement if placement is not None else group_layout(n, stride, domain_gpus, job_gpus)
    # the NVLink phase runs in every domain the group touches at once: the fullest one (as many ranks as a
    # domain holds, at most n) paces it, while the smallest piece's NICs pace the cross-domain phase
    # (14 ranks as 8 + 6: the NVLink phase is 8 ranks', as on one full node, the NIC phase 6 ranks')
    k, n_domains, k_full = where if len(where) == 3 else (*where, where[0])
    crosses = n_domains > 1.0
    ratio = np.asarray(ll_bandwidth_ratio, dtype=float)
    ll_on = crosses & (ratio > 0)
    ratio = np.where(ratio > 0, ratio, 1.0)
    if op == "send_recv":
        # a point-to-point transfer spans two domains
        bw = np.where(crosses, nic_bytes_per_s_per_gpu / congestion_factor(2.0, congestion_nodes, congestion_max_nodes),
                      nvlink_bytes_per_s)
        t = size_bytes / bw + np.where(crosses, inter_latency_s, intra_latency_s)
        # NCCL runs small point-to-point transfers with its low-latency protocol too, large ones with Simple
        t = np.where(ll_on, np.minimum(t, size_bytes / (bw * ratio) + ll_latency_s), t)
        return np.where(n > 1, t, 0.0)
    if op == "all_to_all":
        # each rank sends S/n to every other rank; (n-k)/n of S leaves the domain on its own NIC
        intra = (k_full - 1.0) / n * size_bytes / nvlink_bytes_per_s
        inter = (n - k) / n * size_bytes / nic_bytes_per_s_per_gpu
    else:
        intra = op_factor(op, k_full) * size_bytes / nvlink_bytes_per_s
        inter_ranks = np.where(ring_inter_node, n, n_domains)
        # a group inside one domain never touches the NICs, flat-ring fabric or not
        inter = op_factor(op, inter_ranks) * size_bytes / (k * nic_bytes_per_s_per_gpu) * crosses
    # fabric congestion: a collective spanning N domains gets bw / (1 + N / congestion_nodes) of its NICs
    inter = inter * congestion_factor(n_domains, congestion_nodes, congestion_max_nodes)
    depth = 1.0 + latency_log2_coeff * np.log2(n_domains)
    latency = np.where(crosses, inter_latency_s * depth, intra_latency_s)
    # the fitted per-ring-step latency is the fabric's (nccl-tests across nodes): not NVLink's
    ring_steps = (2.0 if op == "all_reduce" else 1.0) * (n - 1.0) * crosses
    latency = latency + ring_steps * ring_step_latency_s
    bw_time = np.maximum(intra, inter)
    t = bw_time + latency
    # NCCL's low-latency protocol (LL / LL128) across domains: a lower latency for a fraction of the
    # bandwidth; its tuner runs each size with the faster protocol (src/graph/tuning.cc)
    if np.any(ll_on):  # (skipped on a fabric without the switch: keeps the search fast)
        t_ll = bw_time / ratio + ll_latency_s * depth + ring_steps * ring_step_latency_s
        t = np.where(ll_on, np.minimum(t, t_ll), t)
    return np.where(n > 1, t, 0.0)


def bus_bandwidth_bytes_per_s(op: str, size_bytes, group_size, time_s):
    """nccl-tests busbw = algbw x op factor, algbw = S / t."""
    return size_bytes / time_s * op_factor(op, group_size)
