"""The Python API's inputs, as a notebook passes them (an audit of the API found each of these): specs varied
with pydantic's model_copy(update=...) skipped the validators and came back as NaN or negative throughput; a
file edited during the session was not read again; a loaded GPU or calibration changed by one caller changed
every later one; a calibration or model given as a path, or a Path, failed deep inside."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

import perfmodel as pm
from perfmodel.calibration_profile import load_calibration

ROOT = Path(__file__).resolve().parents[2]


def _job_parts():
    return (pm.load_model("llama3-8b"), pm.ClusterSpec.build(pm.load_gpu("h100-sxm5-80gb"), 16, 8),
            pm.ParallelSpec(tp=2, pp=1, dp=8), pm.JobSpec(global_batch=64, seq_len=4096))


@pytest.mark.parametrize("which, update, field", [
    ("job", {"seq_len": 0}, "seq_len"), ("job", {"seq_len": -8192}, "seq_len"),
    ("parallel", {"tp": -8, "dp": -16}, "tp"), ("parallel", {"micro_batch": 0}, "micro_batch"),
    ("parallel", {"recompute": "Full"}, "recompute"), ("job", {"precision": "fp32"}, "precision"),
])
def test_a_model_copy_is_checked_as_a_new_spec(which, update, field):
    model, cluster, par, job = _job_parts()
    args = {"job": job, "parallel": par}
    args[which] = args[which].model_copy(update=update)
    with pytest.raises(pm.InputError) as exc:
        pm.estimate(model, cluster, args["parallel"], args["job"])
    assert exc.value.field.endswith(field) or field in str(exc.value), str(exc.value)


def test_unstated_fields_stay_unstated_through_the_check():
    model, cluster, par, job = _job_parts()
    est = pm.estimate(model, cluster, par, job.model_copy(update={"seq_len": 2048}))
    assert est.config["zero_stage"] == 1 and est.config["precision"] == "bf16"  # defaults, as before the copy


def test_an_edited_file_is_read_again(tmp_path):
    gpu = tmp_path / "mygpu.yaml"
    data = yaml.safe_load((ROOT / "hardware_profiles" / "h100-sxm5-80gb.yaml").read_text())
    gpu.write_text(yaml.safe_dump({**data, "name": "mygpu", "hbm_capacity_gib": 79.6}))
    assert pm.load_gpu(str(gpu)).hbm_capacity_gib == 79.6
    gpu.write_text(yaml.safe_dump({**data, "name": "mygpu", "hbm_capacity_gib": 140.0}))
    os.utime(gpu, ns=(10**18, 10**18))  # a later modification time, whatever the clock's resolution
    assert pm.load_gpu(gpu).hbm_capacity_gib == 140.0  # (a Path works as well as a str)
    cal = tmp_path / "cal.yaml"
    cal.write_text("frameworks:\n  megatron-lm:\n    kernel_efficiency: 0.8\n")
    assert load_calibration(cal).frameworks["megatron-lm"]["kernel_efficiency"] == 0.8
    cal.write_text("frameworks:\n  megatron-lm:\n    kernel_efficiency: 0.6\n")
    os.utime(cal, ns=(10**18, 10**18))
    assert load_calibration(cal).frameworks["megatron-lm"]["kernel_efficiency"] == 0.6


def test_a_loaded_spec_changed_by_one_caller_changes_no_other():
    g = pm.load_gpu("h100-sxm5-80gb")
    g.peak_dense_tflop_per_s["bf16"] = 1.0
    assert pm.load_gpu("h100-sxm5-80gb").peak_dense_tflop_per_s["bf16"] == pytest.approx(989.4)
    cal = load_calibration(None)
    cal.frameworks["megatron-lm"]["kernel_efficiency"] = 0.1
    assert load_calibration(None).frameworks["megatron-lm"]["kernel_efficiency"] != 0.1


def test_a_calibration_or_model_by_path(tmp_path):
    model, cluster, par, job = _job_parts()
    cal = tmp_path / "cal.yaml"
    cal.write_text("frameworks:\n  megatron-lm:\n    kernel_efficiency: 0.7\n")
    by_path = pm.estimate(model, cluster, par, job, calibration=str(cal))
    assert by_path.iteration_time_s == pm.estimate(model, cluster, par, job,
                                                   calibration=load_calibration(cal)).iteration_time_s
    assert not pm.search(model, cluster, job, calibration=cal, top=1).empty
    yaml_model = tmp_path / "m.yaml"
    yaml_model.write_text(yaml.safe_dump(model.model_dump(exclude={"name", "source", "notes"})))
    assert pm.estimate(yaml_model, cluster, par, job).iteration_time_s == pytest.approx(
        pm.estimate(model, cluster, par, job).iteration_time_s, rel=1e-12)
    with pytest.raises(pm.InputError, match="model: must be a catalog name or a file path"):
        pm.load_model(None)
    with pytest.raises(pm.InputError, match="cluster: must be a ClusterSpec"):
        pm.estimate(model, "h100-sxm5-80gb", par, job)


def test_an_empty_search_says_why():
    """An empty frame's attrs held only the counts: the CLI said 'none ... fits (the smallest needs 858.6 GiB)'."""
    model, job = pm.load_model("llama3.1-405b"), pm.JobSpec(global_batch=64, seq_len=2048)
    df = pm.search(model, pm.ClusterSpec.build(pm.load_gpu("h100-sxm5-80gb"), 8, 8), job, top=3)
    assert df.empty and "fits in memory (the smallest needs" in df.attrs["why_empty"]
    assert df.attrs["objective"] == "throughput" and df.attrs["gpu_counts_without_feasible"] == [8]
    seven = pm.search(pm.load_model("llama3-70b"), pm.ClusterSpec.build(pm.load_gpu("h100-sxm5-80gb"), 7, 8),
                      pm.JobSpec(global_batch=512, seq_len=8192), top=3)
    assert seven.empty and "no parallel size can take the factor 7 of 7 GPUs" in seven.attrs["why_empty"]
