"""The Python API refuses bad arguments with an InputError naming the argument (README: the entry points
check their inputs as the CLI does), not an AttributeError / TypeError / ValueError from deep inside
(README audit 2026-12-01)."""
from __future__ import annotations

import pytest

import perfmodel as pm
from perfmodel.errors import InputError

H100 = pm.load_gpu("h100-sxm5-80gb")
CLUSTER = pm.ClusterSpec.build(H100, 64, 8)
JOB = pm.JobSpec(global_batch=64, seq_len=4096, framework="megatron-lm")
PAR = pm.ParallelSpec(tp=8, pp=1, dp=8, micro_batch=1)


def _field(call) -> str:
    with pytest.raises(InputError) as err:
        call()
    return err.value.field


def test_estimate_needs_a_parallel_spec():
    assert _field(lambda: pm.estimate("llama3-8b", CLUSTER, None, JOB)) == "parallel"


@pytest.mark.parametrize("size", ["8", 0, -1, 2.5, True])
def test_estimate_hpz_partition_size_is_a_whole_number_of_ranks(size):
    par = pm.ParallelSpec(tp=1, pp=1, dp=64, zero_stage=3, zeropp="hpz")
    assert _field(lambda: pm.estimate("llama3-8b", CLUSTER, par, JOB, hpz_partition_size=size)) == "hpz_partition_size"


@pytest.mark.parametrize("size", [3, 10**9])
def test_estimate_hpz_partition_size_must_divide_the_gpus(size):
    par = pm.ParallelSpec(tp=1, pp=1, dp=64, zero_stage=3, zeropp="hpz")
    # the API's argument (the CLI's --deepspeed-config names its config key: tests/cli)
    assert _field(lambda: pm.estimate("llama3-8b", CLUSTER, par, JOB, hpz_partition_size=size)) == "hpz_partition_size"
    assert pm.estimate("llama3-8b", CLUSTER, par, JOB, hpz_partition_size=16).iteration_time_s > 0


@pytest.mark.parametrize("counts", [512, "512", [], ["a"], [0], [1.5], [True]])
def test_search_gpu_counts_are_a_list_of_whole_counts(counts):
    assert _field(lambda: pm.search("llama3-8b", CLUSTER, JOB, gpu_counts=counts, top=1)) == "gpu_counts"


@pytest.mark.parametrize("values", [4096, ["x"], [None]])
def test_whatif_sweep_values_are_a_list_of_numbers(values):
    assert _field(lambda: pm.whatif("llama3-8b", CLUSTER, JOB, {"seq_len": values})) == "sweep.seq_len"


def test_loaders_and_cluster_build_name_a_wrong_argument_type():
    assert _field(lambda: pm.load_calibration(3)) == "calibration"
    assert _field(lambda: pm.load_gpu(None)) == "gpu"
    assert _field(lambda: pm.ClusterSpec.build(3.0, 64)) == "gpu"
    assert pm.ClusterSpec.build("h100-sxm5-80gb", 64) == pm.ClusterSpec.build(H100, 64)
