"""Calibration profile YAML (--calibration FILE): every value finite and within its physical range, or
an InputError naming its dotted path in the file; the shipped profiles (with their .inf congestion,
meaning a non-blocking fabric) still load."""
from __future__ import annotations

import math

import pytest
import yaml

from perfmodel import InputError
from perfmodel.calibration_profile import DEFAULT_PROFILE_PATH, REPO_ROOT, load_calibration


def _calibration(tmp_path, doc: dict) -> str:
    p = tmp_path / "cal.yaml"
    p.write_text(yaml.safe_dump(doc))
    return str(p)


def _error(tmp_path, doc: dict) -> InputError:
    with pytest.raises(InputError) as exc:
        load_calibration(_calibration(tmp_path, doc))
    return exc.value


@pytest.mark.parametrize("path", [DEFAULT_PROFILE_PATH, REPO_ROOT / "calibration" / "collectives_fit.yaml"])
def test_shipped_profiles_load_with_their_infinite_congestion(path):
    cal = load_calibration(path)
    assert cal.congestion_nodes("xxrjun-cluster01") == math.inf  # no congestion seen at 10 nodes
    assert cal.network_values("xxrjun-cluster01", "all_to_all")["congestion_nodes"] == math.inf
    assert 1 < cal.congestion_nodes("efa") < 100


def test_infinite_congestion_is_valid_everywhere(tmp_path):
    cal = load_calibration(_calibration(tmp_path, {"constants": {"congestion_nodes": math.inf},
                                                   "networks": {"ib": {"congestion_nodes": math.inf}}}))
    assert cal.congestion_nodes("ib") == math.inf and cal.cost_constants().congestion_nodes == math.inf


@pytest.mark.parametrize("section,key,value", [
    ("constants", "attn_seq_half", math.inf),             # f/cal_inf.yaml: nan step time
    ("constants", "elementwise_bytes_per_h", math.inf),   # f/cal_inf2.yaml
    ("constants", "optimizer_bytes_per_param", math.inf),  # f/cal_opt.yaml: inf step time
    ("constants", "congestion_nodes", 1e-300),             # f/cal_congtiny.yaml: a 190-digit step time
    ("constants", "congestion_nodes", 0.0),
    ("constants", "congestion_nodes", math.nan),
    ("constants", "attn_bwd_over_fwd", 1e308),             # f/cal_huge.yaml
    ("constants", "attn_bwd_over_fwd", math.inf),
    ("constants", "nvlink_efficiency", 5.0),               # f/cal_nv5.yaml: was named calibration.nvlink_efficiency
    ("constants", "nic_efficiency", math.nan),
    ("constants", "matmul_training_efficiency", 1e-300),
    ("constants", "host_memory_gib_per_gpu", math.inf),
    ("constants", "tp_internode_efficiency", True),        # a boolean is not a number (was read as 1.0)
    ("constants", "bogus", 1.0),                           # f/cal_unk.yaml: was named calibration.bogus
])
def test_bad_constants_are_named_under_constants(tmp_path, section, key, value):
    err = _error(tmp_path, {section: {key: value}})
    assert err.field == f"calibration.{section}.{key}", str(err)


def test_a_low_latency_protocol_needs_its_latency(tmp_path):
    err = _error(tmp_path, {"networks": {"efa": {"ll_bandwidth_ratio": 0.5}}})
    assert err.field == "calibration.networks.efa.ll_latency_us", str(err)
    err = _error(tmp_path, {"networks": {"efa": {"all_gather.ll_bandwidth_ratio": 0.5}}})
    assert err.field == "calibration.networks.efa.all_gather.ll_latency_us", str(err)
    ok = tmp_path / "ok.yaml"   # an op inherits the plain latency; a ratio of 0 turns the switch off
    ok.write_text(yaml.safe_dump({"networks": {"efa": {"ll_latency_us": 50.0, "ll_bandwidth_ratio": 0.4,
                                                       "all_gather.ll_bandwidth_ratio": 0.0,
                                                       "send_recv.ll_bandwidth_ratio": 0.5}}}))
    assert load_calibration(ok).networks["efa"]["ll_bandwidth_ratio"] == 0.4


@pytest.mark.parametrize("key,value", [
    ("congestion_nodes", 0.0),            # f/cal_cong0.yaml: nan step time
    ("congestion_nodes", -5.0),           # f/cal_cong_neg.yaml
    ("congestion_nodes", math.nan),
    ("scale_out_latency_us", -100.0),     # f/cal_lat_neg.yaml
    ("scale_out_latency_us", 0.0),
    ("scale_out_latency_us", math.inf),
    ("intra_node_latency_us", 1e300),
    ("latency_log2_coeff", -1e6),         # f/cal_log2neg.yaml
    ("ring_step_latency_us", math.inf),   # f/cal_ring_inf.yaml: inf step time
    ("ring_step_latency_us", -1.0),
    ("ring_inter_node", 0.5),
    ("nic_efficiency", math.inf),
    ("nvlink_efficiency", 0.0),
    ("all_to_all.congestion_nodes", -1.0),
    ("all_gather.scale_out_latency_us", math.inf),
    ("send_recv.nic_efficiency", 2.0),
    ("all_gather.latency_log2_coeff", True),
    ("ll_bandwidth_ratio", 1.5),          # the low-latency protocol has at most Simple's bandwidth
    ("ll_bandwidth_ratio", -0.1),
    ("ll_latency_us", math.inf),
    ("all_gather.ll_latency_us", -1.0),
])
def test_bad_network_values_are_refused(tmp_path, key, value):
    err = _error(tmp_path, {"networks": {"efa": {key: value}}})
    assert err.field == f"calibration.networks.efa.{key}", str(err)


@pytest.mark.parametrize("key,value", [
    ("step_overhead_s", math.inf),        # f/cal_fwinf.yaml: inf step time, 0 tokens/s
    ("runtime_reserved_gib", math.inf),   # f/cal_fwres.yaml: inf GiB
    ("layer_overhead_s", math.nan),
    ("microbatch_overhead_s", 1e9),
    ("p2p_overhead_s", -1.0),
    ("kernel_efficiency", 1e-300),
    ("dp_overlap", math.nan),
    ("grad_bytes_per_param", math.inf),
    ("zero3_step_latency_s", math.inf),
    ("zero3_max_live_params", 0.0),
])
def test_bad_framework_values_are_refused(tmp_path, key, value):
    err = _error(tmp_path, {"frameworks": {"megatron-lm": {key: value}}})
    assert err.field == f"calibration.frameworks.megatron-lm.{key}", str(err)


def test_unlimited_zero3_live_params_is_valid(tmp_path):
    cal = load_calibration(_calibration(tmp_path, {"frameworks": {"deepspeed": {"zero3_max_live_params": math.inf}}}))
    assert cal.framework("deepspeed").zero3_max_live_params == math.inf


@pytest.mark.parametrize("key,value", [
    ("matmul_efficiency_max", 1e-300), ("matmul_efficiency_max", math.inf), ("scale_out_latency_us", -1.0),
    ("attention_efficiency_max", 0.0),
])
def test_bad_gpu_overrides_are_refused(tmp_path, key, value):
    err = _error(tmp_path, {"gpus": {"h100-sxm5-80gb": {key: value}}})
    assert err.field == f"calibration.gpus.h100-sxm5-80gb.{key}", str(err)


def test_values_at_the_fit_bounds_load(tmp_path):
    """What perfmodel calibrate can write (its fit bounds) is what --calibration accepts."""
    from perfmodel.calibrate.fit_collectives import BOUNDS

    for bound in (0, 1):
        over = {k: v[bound] for k, v in BOUNDS.items()}
        path = tmp_path / f"b{bound}.yaml"
        path.write_text(yaml.safe_dump({"networks": {"efa": over}, "constants": {"tp_internode_efficiency": 1e-3}}))
        assert load_calibration(str(path)).network_values("efa") == over


@pytest.mark.parametrize("doc,field", [
    ({"constants": {"attn_seq_half": math.inf}}, "calibration.constants.attn_seq_half"),
    ({"networks": {"efa": {"congestion_nodes": 0}}}, "calibration.networks.efa.congestion_nodes"),
    ({"frameworks": {"megatron-lm": {"step_overhead_s": math.inf}}}, "calibration.frameworks.megatron-lm.step_overhead_s"),
])
def test_cli_refuses_a_bad_calibration_in_one_line(tmp_path, doc, field):
    import subprocess
    import sys

    res = subprocess.run([sys.executable, "-m", "perfmodel.cli", "estimate", "--model", "llama3-8b", "--gpu",
                          "h100-sxm5-80gb", "--gpus", "16", "--global-batch", "64", "--network", "efa",
                          "--calibration", _calibration(tmp_path, doc)], capture_output=True, text=True)
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), res.stderr
    assert f"{field}:" in lines[0]


def test_a_renamed_part_takes_its_sibling_s_calibrated_values_and_its_own_win():
    """The same silicon under another name (A100 of unknown memory size, H800, H200 ...) is costed with the
    calibrated per-GPU values of the part it names in calibration_from; values of its own override them."""
    import perfmodel as pm
    from perfmodel.catalog import gpu_names

    cal = load_calibration(None)
    for name in gpu_names():
        spec = pm.load_gpu(name)
        if spec.calibration_from is None:
            continue
        assert spec.calibration_from in gpu_names(), name
        sibling = cal.gpu(pm.load_gpu(spec.calibration_from))
        assert cal.gpu(spec).scale_out_latency_us == sibling.scale_out_latency_us, name
    # (the shipped profile keeps fabric latencies with their fabrics: a per-GPU one comes from a user's fit)
    sib = cal.model_copy(update={"gpus": {**cal.gpus, "a100-sxm4-80gb": {"scale_out_latency_us": 77.0}}})
    a100 = sib.gpu(pm.load_gpu("a100-sxm4"))
    assert a100.scale_out_latency_us == 77.0
    assert a100.attention_efficiency_max == cal.gpus["a100-sxm4"]["attention_efficiency_max"]
    own = cal.model_copy(update={"gpus": {**cal.gpus, "h800-sxm5-80gb": {"scale_out_latency_us": 55.0}}})
    assert own.gpu(pm.load_gpu("h800-sxm5-80gb")).scale_out_latency_us == 55.0
    # only the collective latencies are shared: a kernel efficiency fitted for the H100 is not the H200's
    gemm = cal.model_copy(update={"gpus": {"h100-sxm5-80gb": {"fp8_matmul_efficiency_max": 0.6}}})
    h200 = pm.load_gpu("h200-sxm-141gb")
    assert gemm.gpu(h200).fp8_matmul_efficiency_max == h200.fp8_matmul_efficiency_max != 0.6


def test_calibration_from_must_name_a_catalog_gpu(tmp_path):
    import yaml as _yaml

    import perfmodel as pm
    from perfmodel.catalog import PROFILES_DIR

    data = _yaml.safe_load((PROFILES_DIR / "h200-sxm-141gb.yaml").read_text())
    bad = tmp_path / "my-gpu.yaml"
    bad.write_text(_yaml.safe_dump({**data, "name": "my-gpu", "calibration_from": "h100-typo"}))
    with pytest.raises(InputError, match=r"gpu\.calibration_from: must name a catalog GPU"):
        pm.load_gpu(str(bad))


def test_an_empty_calibration_file_is_the_empty_profile(tmp_path):
    """The README's 'before any calibration' numbers come from `--calibration` of an empty profile: an empty
    file is that profile (datasheet numbers only), not an error."""
    import perfmodel as pm
    from perfmodel.calibration_profile import Calibration

    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    cal = load_calibration(empty)
    assert cal == Calibration()
    args = (pm.load_model("llama3-8b"), pm.ClusterSpec.build(pm.load_gpu("h100-sxm5-80gb"), 8, 8),
            pm.ParallelSpec(dp=8), pm.JobSpec(global_batch=8, seq_len=4096))
    assert pm.estimate(*args, cal).iteration_time_s == pm.estimate(*args, Calibration()).iteration_time_s
