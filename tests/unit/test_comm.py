"""Collective times against the ring closed forms and nccl-tests' bus-bandwidth definitions
(NVIDIA/nccl-tests doc/PERFORMANCE.md; Patarasuk & Yuan 2009)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfmodel.costs.comm import OPS, bus_bandwidth_bytes_per_s, collective_time_s, members_per_domain, op_factor

NVLINK = 450e9      # bytes/s per GPU, one direction (H100 NVLink4)
NIC = 50e9          # bytes/s per GPU (400 Gbit/s)
LAT_INTRA = 10e-6
LAT_INTER = 20e-6
DOMAIN = 8


def t(op, size, n, stride=1, nvlink=NVLINK, nic=NIC, lat_intra=LAT_INTRA, lat_inter=LAT_INTER, domain=DOMAIN):
    return float(collective_time_s(op, size, n, stride, domain, nvlink, nic, lat_intra, lat_inter))


@pytest.mark.parametrize("op", OPS)
def test_single_rank_costs_nothing(op):
    assert t(op, 1e9, 1) == 0.0


@pytest.mark.parametrize("n", [2, 4, 8])
def test_all_reduce_inside_node_bandwidth_term(n):
    S = 4e9
    assert t("all_reduce", S, n, lat_intra=0.0) == pytest.approx(2 * (n - 1) / n * S / NVLINK, rel=1e-12)
    # the latency is added once
    assert t("all_reduce", S, n) - t("all_reduce", S, n, lat_intra=0.0) == pytest.approx(LAT_INTRA, rel=1e-9)


@pytest.mark.parametrize("op", ["all_gather", "reduce_scatter"])
@pytest.mark.parametrize("n", [2, 4, 8])
def test_gather_scatter_inside_node_bandwidth_term(op, n):
    S = 4e9  # nccl-tests size: the gathered buffer
    assert t(op, S, n, lat_intra=0.0) == pytest.approx((n - 1) / n * S / NVLINK, rel=1e-12)


@pytest.mark.parametrize("n", [2, 8])
def test_all_to_all_inside_node(n):
    S = 1e9
    assert t("all_to_all", S, n, lat_intra=0.0) == pytest.approx((n - 1) / n * S / NVLINK, rel=1e-12)


def test_send_recv_inside_and_across_nodes():
    S = 1e8
    assert t("send_recv", S, 2, stride=1, lat_intra=0.0) == pytest.approx(S / NVLINK)
    assert t("send_recv", S, 2, stride=8, lat_inter=0.0) == pytest.approx(S / NIC)


@pytest.mark.parametrize("n", [2, 3, 8, 64, 1024])
def test_op_factors_are_nccl_tests_busbw_factors(n):
    assert float(op_factor("all_reduce", n)) == pytest.approx(2 * (n - 1) / n)
    assert float(op_factor("all_gather", n)) == pytest.approx((n - 1) / n)
    assert float(op_factor("reduce_scatter", n)) == pytest.approx((n - 1) / n)
    assert float(op_factor("all_to_all", n)) == pytest.approx((n - 1) / n)
    assert float(op_factor("send_recv", n)) == pytest.approx(1.0)


def test_unknown_op_raises_naming_op():
    with pytest.raises(ValueError, match="op"):
        op_factor("broadcast_all", 8)


@pytest.mark.parametrize("op", ["all_reduce", "all_gather", "reduce_scatter"])
def test_busbw_of_big_collective_inside_node_is_link_bandwidth(op):
    """nccl-tests: busbw = algbw x factor is independent of n and, for a bandwidth-bound
    collective, equals the link bandwidth."""
    S = 8e9
    for n in (2, 4, 8):
        time_s = t(op, S, n, lat_intra=0.0)
        assert float(bus_bandwidth_bytes_per_s(op, S, n, time_s)) == pytest.approx(NVLINK, rel=1e-9)


def test_busbw_definition():
    S, n, time_s = 1e9, 8, 0.01
    assert float(bus_bandwidth_bytes_per_s("all_reduce", S, n, time_s)) == pytest.approx(S / time_s * 2 * 7 / 8)
    assert float(bus_bandwidth_bytes_per_s("all_gather", S, n, time_s)) == pytest.approx(S / time_s * 7 / 8)


@pytest.mark.parametrize("op", ["all_reduce", "all_gather", "reduce_scatter", "all_to_all"])
@pytest.mark.parametrize("S", [1e3, 1e6, 1e9])
def test_crossing_nodes_is_slower_than_inside(op, S):
    inside = t(op, S, 8)
    across = t(op, S, 16)
    assert across > inside
    # the same 8 ranks spread one per node (stride 8) are slower than packed in one node
    assert t(op, S, 8, stride=8) > inside


def test_all_reduce_across_nodes_bandwidth_term():
    """Hierarchical: N domains of k ranks; the inter-node part moves 2(N-1)/N S over the k NICs."""
    S, n = 16e9, 64
    k, N = 8, 8
    expected = max(2 * (k - 1) / k * S / NVLINK, 2 * (N - 1) / N * S / (k * NIC))
    got = t("all_reduce", S, n, lat_inter=0.0)
    assert got == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("n, stride", [(2, 1), (8, 1), (16, 1), (4, 8), (256, 1), (32, 4)])
def test_monotone_in_size(op, n, stride):
    sizes = np.logspace(0, 11, 45)
    times = np.array([t(op, S, n, stride) for S in sizes])
    assert np.all(np.diff(times) > 0)
    # vectorised call gives the same
    vec = collective_time_s(op, sizes, n, stride, DOMAIN, NVLINK, NIC, LAT_INTRA, LAT_INTER)
    np.testing.assert_allclose(vec, times, rtol=1e-12)


@pytest.mark.parametrize("op", OPS)
def test_more_nic_bandwidth_is_never_slower(op):
    for n, stride in ((16, 1), (64, 1), (8, 8), (2, 8)):
        times = [t(op, 1e9, n, stride, nic=bw) for bw in (12.5e9, 25e9, 50e9, 100e9)]
        assert all(a >= b for a, b in zip(times, times[1:]))


def test_members_per_domain_follow_the_stride():
    assert float(members_per_domain(8, 1, 8)) == 8
    assert float(members_per_domain(16, 2, 8)) == 4
    assert float(members_per_domain(4, 8, 8)) == 1
    assert float(members_per_domain(2, 1, 72)) == 2
    # a group that does not line up with the domains runs at its worst block's pace
    assert float(members_per_domain(128, 1, 72, job_gpus=128)) == 56  # the whole job: racks of 72 + 56
    assert float(members_per_domain(16, 1, 72, job_gpus=144)) == 8     # TP 16: ranks 64-79 sit 8 + 8
    assert float(members_per_domain(4, 1, 6, job_gpus=48)) == 2        # TP 4 on 6-GPU nodes: ranks 4-7 sit 2 + 2
    assert float(members_per_domain(8, 1, 6, job_gpus=96)) == 2
    assert float(members_per_domain(16, 1, 72, job_gpus=16)) == 16     # a job inside one domain straddles nothing


def test_worst_placed_group_sets_the_pace_on_nvl72():
    """Brute-force placements on GB200 NVL72 racks (72 GPUs): DP 32 at stride 4 in a 256-GPU job has
    blocks of 128 GPUs; the second one starts 56 into a rack and splits 16 + 72 + 40, so 4 ranks share
    its smallest rack and it touches 3. With one block (the whole job) only 72 + 56 exist."""
    from perfmodel.costs.comm import group_placement

    assert [float(v) for v in group_placement(32, 4, 72, job_gpus=256)] == [4.0, 3.0]
    assert [float(v) for v in group_placement(16, 8, 72, job_gpus=256)] == [2.0, 3.0]
    assert [float(v) for v in group_placement(64, 4, 72, job_gpus=512)] == [2.0, 5.0]
    assert [float(v) for v in group_placement(128, 1, 72, job_gpus=128)] == [56.0, 2.0]
    # lined up (power-of-two sizes on 8-GPU nodes): the shortcut and the full test agree
    for n, s_, N in [(16, 2, 64), (8, 1, 8), (4, 8, 256), (2, 64, 128)]:
        full = [float(v) for v in group_placement(n, s_, 8, job_gpus=N)]
        assert full == [float(v) for v in group_placement(n, s_, 8, job_gpus=N, lined_up=True)]


def test_congestion_derates_only_the_inter_node_part_by_the_nodes_spanned():
    """bw / (1 + N / congestion_nodes) on the inter-node leg (HF playbook bandwidth-vs-nodes)."""
    S, nv, nic = 1 << 30, 360e9, 45e9
    args = dict(domain_gpus=8, nvlink_bytes_per_s=nv, nic_bytes_per_s_per_gpu=nic,
                intra_latency_s=0.0, inter_latency_s=0.0)
    # one rank per node (stride 8): purely inter-node, N = 16 nodes
    free = collective_time_s("all_reduce", S, 16, 8, **args)
    congested = collective_time_s("all_reduce", S, 16, 8, congestion_nodes=16.0, **args)
    assert congested == pytest.approx(2.0 * free, rel=1e-12)
    # inside one node nothing changes
    intra = collective_time_s("all_reduce", S, 8, 1, **args)
    assert collective_time_s("all_reduce", S, 8, 1, congestion_nodes=1.0, **args) == pytest.approx(intra)


def test_congestion_is_not_extrapolated_beyond_the_nodes_it_was_measured_on():
    S, nic = 1 << 30, 45e9
    args = dict(domain_gpus=8, nvlink_bytes_per_s=360e9, nic_bytes_per_s_per_gpu=nic, intra_latency_s=0.0,
                inter_latency_s=0.0, congestion_nodes=16.0)
    # one rank per node: 64 and 512 nodes both pay 1 + 64 / 16 when the fabric was measured up to 64
    t64 = collective_time_s("all_reduce", S, 64, 8, congestion_max_nodes=64.0, **args)
    t512 = collective_time_s("all_reduce", S, 512, 8, congestion_max_nodes=64.0, **args)
    plain = collective_time_s("all_reduce", S, 512, 8, **{**args, "congestion_nodes": np.inf})
    assert t512 == pytest.approx(5.0 * plain, rel=1e-12) and t512 > t64
    assert collective_time_s("all_reduce", S, 512, 8, **args) == pytest.approx(33.0 * plain, rel=1e-12)


def test_efa_beyond_the_playbook_s_64_nodes_costs_like_64_nodes_of_congestion():
    import perfmodel as pm
    from perfmodel.calibration_profile import load_calibration

    cal = load_calibration(None)
    assert cal.network_values("efa")["congestion_max_nodes"] == 64.0
    model = pm.load_model("llama3-8b")
    job = pm.JobSpec(global_batch=4096, seq_len=4096)
    par = pm.ParallelSpec(tp=8, dp=512, zero_stage=1)
    gpu = pm.load_gpu("h100-sxm5-80gb")
    efa = pm.estimate(model, pm.ClusterSpec.build(gpu, 4096, network="efa"), par, job)
    free = pm.estimate(model, pm.ClusterSpec.build(gpu, 4096), par, job)
    # the 512-node reduce pays at most the measured 64-node slowdown (1 + 64 / 11.2 ~ 6.7x), not 47x
    ratio = efa.time_breakdown_s["dp_comm_s"] / free.time_breakdown_s["dp_comm_s"]
    assert 1.0 < ratio < 1.0 + 64.0 / cal.congestion_nodes("efa") + 0.5


def test_unknown_fabric_is_taken_as_non_blocking():
    import perfmodel as pm
    from perfmodel.calibration_profile import load_calibration

    assert load_calibration(None).congestion_nodes("some fabric nobody measured") == float("inf")
    model = pm.load_model("llama3-8b")
    job = pm.JobSpec(global_batch=256, seq_len=4096)
    par = pm.ParallelSpec(tp=1, dp=256, zero_stage=1)
    a = pm.estimate(model, pm.ClusterSpec.build(pm.load_gpu("h100-sxm5-80gb"), 256, network="ib ndr"), par, job)
    b = pm.estimate(model, pm.ClusterSpec.build(pm.load_gpu("h100-sxm5-80gb"), 256), par, job)
    assert a.iteration_time_s == pytest.approx(b.iteration_time_s, rel=1e-12)
    c = pm.estimate(model, pm.ClusterSpec.build(pm.load_gpu("h100-sxm5-80gb"), 256, network="EFA"), par, job)
    assert c.time_breakdown_s["dp_comm_s"] >= b.time_breakdown_s["dp_comm_s"]  # EFA's measured congestion


def test_a_fabric_may_set_its_own_cross_node_tp_efficiency():
    """networks.<fabric>.tp_internode_efficiency overrides the shared constant for that fabric only."""
    import perfmodel as pm
    from perfmodel.calibration_profile import Calibration

    model = pm.load_model("llama3-8b")
    job = pm.JobSpec(global_batch=16, seq_len=4096, framework="megatron-lm")
    par = pm.ParallelSpec(tp=16, dp=1, sp=True, recompute="full")
    cal = Calibration(constants={"tp_internode_efficiency": 0.5}, networks={"efa": {"tp_internode_efficiency": 0.1}})

    def tp_s(network):
        cluster = pm.ClusterSpec.build(pm.load_gpu("h100-sxm5-80gb"), 16, 8, 3200, network=network)
        return pm.estimate(model, cluster, par, job, cal).time_breakdown_s["tp_comm_s"]

    shared = Calibration(constants={"tp_internode_efficiency": 0.5})
    ib = pm.ClusterSpec.build(pm.load_gpu("h100-sxm5-80gb"), 16, 8, 3200, network="ib ndr")
    assert tp_s("ib ndr") == pytest.approx(pm.estimate(model, ib, par, job, shared).time_breakdown_s["tp_comm_s"])
    assert tp_s("efa") > 2.0 * tp_s("ib ndr")


def test_protocol_switch_takes_the_faster_protocol_per_size():
    """NCCL runs each size with the protocol of lower latency + size / bandwidth (src/enqueue.cc
    updateCollCostTable): min(b + a_simple, b / r + a_ll) across nodes."""
    sizes = 2.0 ** np.arange(16, 34)
    args = ("all_reduce", sizes, 16, 1, DOMAIN, NVLINK, NIC, LAT_INTRA, 300e-6)
    simple = collective_time_s(*args, latency_log2_coeff=0.0)
    ll = collective_time_s(*args, latency_log2_coeff=0.0, ll_latency_s=50e-6, ll_bandwidth_ratio=0.4)
    b = simple - 300e-6
    np.testing.assert_allclose(ll, np.minimum(simple, b / 0.4 + 50e-6), rtol=1e-12)
    assert ll[0] < simple[0] and ll[-1] == simple[-1]   # small sizes take LL, large ones Simple
    assert np.all(np.diff(ll) > 0)                      # still monotone in size
    # inside one node (no domain crossed) the switch does not apply
    inside = ("all_reduce", sizes, 8, 1, DOMAIN, NVLINK, NIC, LAT_INTRA, 300e-6)
    np.testing.assert_array_equal(collective_time_s(*inside, ll_latency_s=1e-9, ll_bandwidth_ratio=1.0),
                                  collective_time_s(*inside))


def test_send_recv_takes_the_protocol_switch_too():
    """A small point-to-point transfer across nodes pays the low-latency protocol's latency, a large one
    Simple's (the same min as the collectives), so a fit that raises Simple's latency does not tax them."""
    args = ("send_recv", np.array([8.0, 2.0**30]), 16, 8, DOMAIN, NVLINK, NIC, LAT_INTRA, 300e-6)
    simple = collective_time_s(*args)
    ll = collective_time_s(*args, ll_latency_s=50e-6, ll_bandwidth_ratio=0.4)
    assert ll[0] == pytest.approx(8.0 / (NIC * 0.4) + 50e-6)
    assert ll[1] == simple[1]


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(OPS), st.sampled_from([16, 32, 64, 512]), st.sampled_from([1, 8]),
       st.floats(1.0, 2000.0), st.floats(0.1, 1.0), st.floats(1.0, 1000.0), st.floats(1.5, 16.0))
def test_protocol_switch_keeps_time_monotone(op, n, stride, ll_latency_us, ratio, simple_latency_us, factor):
    """With the switch on, time never falls with size, never rises with NIC bandwidth, and is never above
    the Simple protocol's alone."""
    sizes = 2.0 ** np.arange(10, 34)
    kw = dict(ll_latency_s=ll_latency_us * 1e-6, ll_bandwidth_ratio=ratio)

    def t(nic, **extra):
        return collective_time_s(op, sizes, n, stride, DOMAIN, NVLINK, nic, LAT_INTRA, simple_latency_us * 1e-6, **extra)

    on = t(NIC, **kw)
    assert np.all(np.diff(on) >= 0)
    assert np.all(t(NIC * factor, **kw) <= on * (1 + 1e-12))
    assert np.all(on <= t(NIC) * (1 + 1e-12))


@pytest.mark.parametrize("op", ["all_reduce", "all_gather", "reduce_scatter", "all_to_all"])
@pytest.mark.parametrize("n, fullest", [(14, 8), (12, 8), (20, 8)])
def test_an_uneven_group_is_never_faster_than_its_fullest_domain(op, n, fullest):
    """14 ranks as 8 + 6 on two nodes: the NVLink phase runs 8 ranks' share on the full node (it was
    costed with the smallest piece's 6, so that 14 GPUs reduced faster than 8 in one node); the NIC phase
    is still paced by the 6 ranks' NICs."""
    S = 1e9
    uneven = float(collective_time_s(op, S, n, 1, DOMAIN, NVLINK, NIC, LAT_INTRA, LAT_INTER, job_gpus=n))
    one_domain = t(op, S, fullest)
    assert uneven > one_domain
    # with the NICs as fast as NVLink and no latency, only the NVLink phase of the full domain and the
    # cross-domain phase remain: never below the full domain's own NVLink phase
    fast = float(collective_time_s(op, S, n, 1, DOMAIN, NVLINK, 1e15, 0.0, 0.0, job_gpus=n))
    nvlink_phase = ((fullest - 1) / n if op == "all_to_all" else op_factor(op, fullest)) * S / NVLINK
    assert fast == pytest.approx(nvlink_phase)


@pytest.mark.parametrize("args, layout", [
    ((4, 1, 6, 24), (2, 2, 2)),        # TP 4 on 6-GPU nodes: ranks 4-7 sit 2 + 2
    ((16, 1, 72, 144), (8, 2, 8)),     # TP 16 on 144 GB200s: ranks 64-79 sit 8 + 8
    ((14, 1, 8, 14), (6, 2, 8)),       # 14 ranks as 8 + 6
    ((128, 1, 72, 128), (56, 2, 72)),  # DP 128 as the whole job on NVL72 racks: 72 + 56
    ((3, 4, 6, 24), (1, 2, 2)),        # ranks 0, 4, 8 on 6-GPU nodes: 2 + 1 on two nodes (not three)
    ((4, 3, 6, 24), (2, 2, 2)),        # ranks 0, 3, 6, 9: 2 + 2 (the stride divides the node)
])
def test_group_layout_names_the_smallest_and_the_fullest_piece_of_the_worst_block(args, layout):
    from perfmodel.costs.comm import group_layout

    assert tuple(float(v) for v in group_layout(*args)) == layout
