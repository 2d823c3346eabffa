"""Hardware-profile YAML (--gpu FILE): every number finite and within a physical range, or an InputError
naming the field; the shipped profiles all satisfy the rules; a path that is not a file says so."""
from __future__ import annotations

import math

import pytest
import yaml

import perfmodel
from perfmodel import InputError
from perfmodel.catalog import PROFILES_DIR, gpu_names


def _profile(tmp_path, name="gpu", **changes) -> str:
    data = yaml.safe_load((PROFILES_DIR / "h100-sxm5-80gb.yaml").read_text())
    for key, value in changes.items():
        if key.startswith("peak."):
            data["peak_dense_tflop_per_s"][key.removeprefix("peak.")] = value
        else:
            data[key] = value
    p = tmp_path / f"{name}.yaml"  # one name per content: loaded profiles are cached by path
    p.write_text(yaml.safe_dump(data))
    return str(p)


def _error(ref) -> InputError:
    with pytest.raises(InputError) as exc:
        perfmodel.load_gpu(ref)
    return exc.value


@pytest.mark.parametrize("name", gpu_names())
def test_shipped_profiles_load(name):
    gpu = perfmodel.load_gpu(name)
    assert all(math.isfinite(v) and v > 0 for v in gpu.peak_dense_tflop_per_s.values())


def test_an_unchanged_copy_loads(tmp_path):
    assert perfmodel.load_gpu(_profile(tmp_path)).peak_dense_tflop_per_s["bf16"] == 989.4


@pytest.mark.parametrize("key,value", [
    ("peak.bf16", 0),               # f/gpu_bf16zero.yaml: nan step time
    ("peak.bf16", -5),              # f/gpu_bf16neg.yaml: MFU -7891%
    ("peak.bf16", math.nan),        # f/gpu_bf16nan.yaml
    ("peak.bf16", math.inf),        # f/gpu_bf16inf.yaml: MFU 0%
    ("peak.fp8", math.inf),
    ("peak.fp32", -1.0),
    ("hbm_capacity_gib", math.inf),  # f/gpu_hbminf.yaml: "69 GiB of inf (fits)"
    ("hbm_capacity_gib", 0),
    ("hbm_bandwidth_gb_per_s", math.inf),
    ("hbm_bandwidth_gb_per_s", math.nan),
    ("intra_node_bandwidth_gb_per_s", math.inf),
    ("intra_node_bandwidth_gb_per_s", 1e308),
    ("default_scale_out_gbit_per_s_per_node", math.inf),
    ("host_link_gb_per_s", math.inf),
    ("intra_node_latency_us", math.inf),
    ("scale_out_latency_us", math.nan),
    ("scale_out_latency_us", -1.0),
    ("matmul_efficiency_max", 1e-300),  # f/gpu_efftiny.yaml: a 190-digit step time
    ("matmul_efficiency_max", 0.01),
    ("matmul_efficiency_max", math.nan),
    ("fp8_matmul_efficiency_max", 1e-300),
    ("attention_efficiency_max", math.inf),
    ("n_sms", True),
    ("nvlink_domain_gpus", 3),       # f/gpu_dom3.yaml: was silently taken as the 8-GPU node
    ("default_gpus_per_node", True),
    ("attention_fwd_speedup", 0.5),      # an exponential-unit upgrade never slows attention
    ("attention_bwd_speedup", 5.0),
    ("attention_fwd_speedup", True),     # YAML true would read as 1.0
    ("hbm_bandwidth_gb_per_s", "3350"),  # a quoted number is text
    ("matmul_efficiency_max", False),
    ("peak.bf16", True),
    ("peak.fp8", "5000"),
])
def test_impossible_values_are_refused(tmp_path, key, value):
    err = _error(_profile(tmp_path, **{key: value}))
    field = f"gpu.peak_dense_tflop_per_s.{key.removeprefix('peak.')}" if key.startswith("peak.") else f"gpu.{key}"
    assert err.field == field, str(err)


def test_nvlink_domain_must_divide_the_node_or_be_divided_by_it(tmp_path):
    err = _error(_profile(tmp_path, nvlink_domain_gpus=3))
    assert "must divide one another" in err.rule
    # what the shipped profiles do: a domain of whole nodes (NVL72: 18 trays of 4), a node of one board
    nvl72 = perfmodel.load_gpu(_profile(tmp_path, "nvl72", nvlink_domain_gpus=72, default_gpus_per_node=4))
    assert nvl72.nvlink_domain_gpus == 72
    two_boards = perfmodel.load_gpu(_profile(tmp_path, "x16", nvlink_domain_gpus=8, default_gpus_per_node=16))
    assert two_boards.default_gpus_per_node == 16


@pytest.mark.parametrize("ref,rule", [("gone/nope.yaml", "no such file"), ("gpu.yml", "no such file"),
                                      ("folder.yaml", "is a folder")])
def test_a_gpu_path_that_is_not_a_file_says_so(tmp_path, monkeypatch, ref, rule):
    """Was "unknown GPU 'f/gpudir.yaml' (known: ...)" as for a catalog name."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "folder.yaml").mkdir()
    err = _error(ref)
    assert err.field == "gpu"
    assert rule in err.rule and ref in err.rule
    assert "unknown GPU" not in err.rule


def test_an_unknown_name_still_lists_the_catalog():
    err = _error("h100")
    assert err.field == "gpu" and "unknown GPU 'h100'" in err.rule and "h100-sxm5-80gb" in err.rule


def test_cli_refuses_a_bad_profile_in_one_line(tmp_path):
    import subprocess
    import sys

    res = subprocess.run([sys.executable, "-m", "perfmodel.cli", "estimate", "--model", "llama3-8b", "--gpu",
                          _profile(tmp_path, **{"peak.bf16": 0}), "--gpus", "8", "--global-batch", "64"],
                         capture_output=True, text=True)
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), res.stderr
    assert "gpu.peak_dense_tflop_per_s.bf16" in lines[0]


def test_h100_96gb_500w_peaks_lie_between_the_nvl_and_sxm_datasheets():
    """torchtitan's benchmark page puts its H100s' peak 'between SXM and NVL': the profile takes the
    midpoint of the two datasheets (dense TFLOP/s: SXM / NVL), for every tensor-core format."""
    from perfmodel.catalog import load_gpu

    sxm = {"bf16": 989.4, "fp16": 989.4, "fp8": 1978.9, "tf32": 494.7, "fp32": 66.9}
    nvl = {"bf16": 835.5, "fp16": 835.5, "fp8": 1670.5, "tf32": 417.5, "fp32": 60.0}
    peaks = load_gpu("h100-sxm5-96gb").peak_dense_tflop_per_s
    for key in sxm:
        assert nvl[key] < peaks[key] < sxm[key]
        assert peaks[key] == pytest.approx((sxm[key] + nvl[key]) / 2, abs=0.1)


def test_blackwell_ultra_attention_speedups_follow_from_the_doubled_exponential_unit():
    """B300/GB300: NVIDIA's ~35% FP8 forward gain over Blackwell with the SFU doubled means an exponential
    stall E with (M + E) / (M + E/2) = 1.35; BF16 attention has twice M against the same E, and the
    backward 2.5x that. Other GPUs have none."""
    e = 0.35 / 0.325                        # E / M_fp8 = 1.077; E / M_bf16 is half of it
    e_bf16 = e / 2.0
    for name in ("b300", "gb300"):
        gpu = perfmodel.load_gpu(name)
        assert gpu.attention_fwd_speedup == pytest.approx((1 + e_bf16) / (1 + e_bf16 / 2), abs=0.005)
        assert gpu.attention_bwd_speedup == pytest.approx((2.5 + e_bf16) / (2.5 + e_bf16 / 2), abs=0.005)
    for name in ("b200", "gb200", "h100-sxm5-80gb", "a100-sxm4-80gb"):
        gpu = perfmodel.load_gpu(name)
        assert (gpu.attention_fwd_speedup, gpu.attention_bwd_speedup) == (1.0, 1.0)


def _compute_s(gpu, framework="megatron-lm", **speedups):
    import numpy as np

    from perfmodel.calibration_profile import Calibration
    from perfmodel.estimate import build_inputs
    from perfmodel.step import step_costs

    gpu = gpu.model_copy(update=speedups)
    par = perfmodel.ParallelSpec(tp=1, pp=1, dp=8, micro_batch=1, recompute="none")
    job = perfmodel.JobSpec(global_batch=8, seq_len=8192, precision="bf16" if gpu.supports_precision("bf16") else "fp16",
                            framework=framework)
    x = build_inputs(perfmodel.load_model("llama3-8b"), perfmodel.ClusterSpec.build(gpu, 8, 8), par, job, Calibration())
    return float(step_costs({k: np.asarray([v]) for k, v in x.items()})["compute_s"][0])


def test_attention_speedups_divide_exactly_the_flash_attention_times():
    """Saved time is A_f (1 - 1/x) forward and A_b (1 - 1/y) backward, A_b = attn_bwd_over_fwd A_f: the
    savings at x = 4 are 1.5x those at x = 2, and a backward factor saves 2.5x what the same forward one
    does. Without flash attention (V100, BLOOM-era Megatron-DeepSpeed) nothing changes."""
    from perfmodel.constants import DEFAULT_CONSTANTS

    gpu = perfmodel.load_gpu("b300")
    base = _compute_s(gpu, attention_fwd_speedup=1.0, attention_bwd_speedup=1.0)
    f2 = base - _compute_s(gpu, attention_fwd_speedup=2.0, attention_bwd_speedup=1.0)
    f4 = base - _compute_s(gpu, attention_fwd_speedup=4.0, attention_bwd_speedup=1.0)
    b2 = base - _compute_s(gpu, attention_fwd_speedup=1.0, attention_bwd_speedup=2.0)
    assert f2 > 0 and f4 / f2 == pytest.approx(1.5, rel=1e-9)
    assert b2 / f2 == pytest.approx(DEFAULT_CONSTANTS.attn_bwd_over_fwd, rel=1e-9)
    for g, fw in ((perfmodel.load_gpu("v100-sxm3-32gb"), "megatron-lm"), (gpu, "megatron-deepspeed")):
        assert _compute_s(g, fw, attention_fwd_speedup=3.0, attention_bwd_speedup=3.0) == _compute_s(g, fw)


def test_a_gpu_without_a_measured_attention_kernel_runs_at_the_newest_measured_fraction():
    """kernels.csv measures flash attention on A100 and H100 only; a GPU profile without its own
    attention_efficiency_max (Blackwell) takes the default constant, which is the newest measured
    architecture's fwd+bwd fraction (H100 FA2 328 / 989), not a higher one: the fraction of peak falls
    from A100 (0.61) to H100, as tensor cores outgrow the exponential units (FlashAttention-4)."""
    import pandas as pd

    from perfmodel.catalog import load_gpu
    from perfmodel.constants import CostConstants
    from perfmodel.estimate import cluster_arrays
    from perfmodel.specs import ClusterSpec

    default = CostConstants().attn_efficiency_max
    h100, a100 = load_gpu("h100-sxm5-80gb"), load_gpu("a100-sxm4-80gb")
    assert default == h100.attention_efficiency_max < a100.attention_efficiency_max
    kernels = PROFILES_DIR.parent / "calibration" / "data" / "kernels.csv"
    if kernels.is_file():  # the measurement the profile cites
        k = pd.read_csv(kernels)
        fa2 = k[(k.gpu_type == "H100 80GB SXM5") & (k.implementation == "FlashAttention-2")
                & (k.direction == "fwd+bwd") & (k.head_dim == 128) & (k.seq_len == 16384) & (k.causal == "yes")]
        assert abs(fa2.tflops.max() / h100.peak_dense_tflop_per_s["bf16"] - default) < 0.01
    for name in ("b200", "gb200", "gb300", "b300"):
        gpu = load_gpu(name)
        assert gpu.attention_efficiency_max is None
        cluster = ClusterSpec.build(gpu, 8, 8, 400.0)
        assert cluster_arrays(cluster, "bf16", CostConstants())["attn_efficiency_max"] == default


@pytest.mark.parametrize("name, smi_mib", [
    ("h100-sxm5-80gb", 81559), ("h800-sxm5-80gb", 81559), ("h200-sxm-141gb", 143771), ("b200", 183359),
    ("gb200", 189471), ("b300", 275040), ("gb300", 284208)])
def test_hbm_capacity_is_what_the_device_reports_not_the_marketed_number(name, smi_mib):
    """nvidia-smi's memory total (MiB, public nvidia-smi outputs cited in each profile) rounded down to
    0.1 GiB: the search must never plan on memory the device does not expose (a winner at 140.96 GiB on a
    '141 GB' H200 that shows 140.4 GiB would not run)."""
    gib = perfmodel.load_gpu(name).hbm_capacity_gib
    assert gib == math.floor(smi_mib / 1024 * 10) / 10
