"""What a review of the Python API's input handling found (2026-12-02): a ``zeropp`` of 'no' read as on,
sizes the CLI refuses costed, booleans read as 1, a what-if sweep of the wrong shape or a price given as text
ending in AttributeError / TypeError, a raw pydantic ValidationError from ``ClusterSpec.build``, the hpZ group
named by its DeepSpeed config key, a 4-GPU cluster with an 8-GPU node, and a serializer warning for a
``model_copy``'d spec. Each is now an InputError naming the argument and the rule, as the CLI refuses it."""
from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest

import perfmodel as pm
from perfmodel.errors import InputError
from perfmodel.limits import MAX_COUNT, MAX_GPUS

H100 = pm.load_gpu("h100-sxm5-80gb")
C8 = pm.ClusterSpec.build(H100, n_gpus=8)
J8 = pm.JobSpec(global_batch=8, seq_len=4096)
PAR8 = pm.ParallelSpec(tp=8)


def _error(call) -> InputError:
    with pytest.raises(InputError) as err:
        call()
    return err.value


def _field(call) -> str:
    return _error(call).field


# ---- 1. search's zeropp is a switch: True, False or None ------------------------------------------
@pytest.mark.parametrize("zeropp", ["no", "false", "off", "", 1, 0])
def test_search_zeropp_is_true_false_or_none(zeropp):
    cluster = pm.ClusterSpec.build(H100, n_gpus=64)
    job = pm.JobSpec(global_batch=64, seq_len=4096, framework="deepspeed")
    assert _field(lambda: pm.search("gpt3-13b", cluster, job, zeropp=zeropp, top=1)) == "zeropp"


def test_search_zeropp_false_searches_fewer_configurations_than_true():
    cluster = pm.ClusterSpec.build(H100, n_gpus=64)
    job = pm.JobSpec(global_batch=64, seq_len=4096, framework="deepspeed")
    n = {z: pm.search("gpt3-13b", cluster, job, zeropp=z, top=1).attrs["n_evaluated"] for z in (None, True, False)}
    assert n[False] < n[True] == n[None]  # None: DeepSpeed has ZeRO++


# ---- 2. the CLI's limits hold in the specs ---------------------------------------------------------
@pytest.mark.parametrize("field, value", [("seq_len", 2**40), ("global_batch", MAX_COUNT + 1)])
def test_job_counts_have_the_cli_limits(field, value):
    with pytest.raises(ValueError, match=field):
        pm.JobSpec(**{"global_batch": 8, "seq_len": 4096, field: value})
    job = J8.model_copy(update={field: value})  # skips the validators: estimate rebuilds it through them
    assert _field(lambda: pm.estimate("llama3-8b", C8, PAR8, job)) == f"job.{field}"
    assert pm.JobSpec(**{"global_batch": 8, "seq_len": 4096, field: MAX_COUNT}).model_dump()[field] == MAX_COUNT


@pytest.mark.parametrize("framework", ["", "   "])
def test_job_framework_must_name_a_stack(framework):
    with pytest.raises(ValueError, match="framework"):
        pm.JobSpec(global_batch=8, seq_len=4096, framework=framework)
    job = J8.model_copy(update={"framework": framework})
    assert _field(lambda: pm.estimate("llama3-8b", C8, PAR8, job)) == "job.framework"
    assert pm.JobSpec(global_batch=8, seq_len=4096, framework=" megatron-lm ").framework == "megatron-lm"


@pytest.mark.parametrize("n_gpus", [10**9, MAX_GPUS + 1])
def test_cluster_gpu_count_has_the_cli_limit(n_gpus):
    assert _field(lambda: pm.ClusterSpec.build(H100, n_gpus=n_gpus)) == "n_gpus"
    big = C8.model_copy(update={"n_gpus": n_gpus})
    assert _field(lambda: pm.search("llama3-8b", big, J8, top=1)) == "cluster.n_gpus"
    assert _field(lambda: pm.estimate("llama3-8b", big, PAR8, J8)) == "cluster.n_gpus"
    assert pm.ClusterSpec.build(H100, n_gpus=MAX_GPUS).n_gpus == MAX_GPUS


# ---- 3. a what-if sweep is a mapping; a swept GPU a name, path or AcceleratorSpec -------------------
@pytest.mark.parametrize("gpu", [None, 5, math.nan])
def test_whatif_gpu_values_are_names_paths_or_specs(gpu):
    assert _field(lambda: pm.whatif("llama3-8b", C8, J8, {"gpu": [gpu]})) == "sweep.gpu"


@pytest.mark.parametrize("sweep", [None, [("gpus", [8])], "gpus"])
def test_whatif_sweep_is_a_mapping(sweep):
    err = _error(lambda: pm.whatif("llama3-8b", C8, J8, sweep))
    assert err.field == "sweep" and "mapping" in err.rule


def test_whatif_gpu_sweep_takes_a_spec_and_a_name():
    df = pm.whatif("llama3-8b", C8, J8, {"gpu": [H100, "h200-sxm-141gb"]}, mode="fixed", parallel=PAR8)
    assert list(df["status"]) == ["ok", "ok"]


# ---- 4. search's train_tokens and usd_per_gpu_hour are numbers, not text -------------------------
@pytest.mark.parametrize("objective, kwargs, field", [
    ("time-to-train", {"train_tokens": "1e12"}, "train_tokens"),
    ("time-to-train", {"train_tokens": "abc"}, "train_tokens"),
    ("time-to-train", {"train_tokens": True}, "train_tokens"),
    ("cost", {"train_tokens": 1e12, "usd_per_gpu_hour": "2"}, "usd_per_gpu_hour"),
    ("cost", {"train_tokens": 1e12, "usd_per_gpu_hour": True}, "usd_per_gpu_hour"),
])
def test_search_objective_numbers_are_numbers(objective, kwargs, field):
    assert _field(lambda: pm.search("llama3-8b", C8, J8, objective=objective, top=1, **kwargs)) == field


# ---- 5. booleans are not numbers -------------------------------------------------------------------
@pytest.mark.parametrize("field", ["tp", "pp", "dp", "cp", "vpp", "micro_batch", "zero_stage", "offload_fraction"])
def test_parallel_sizes_are_not_booleans(field):
    with pytest.raises(ValueError, match="boolean"):
        pm.ParallelSpec(**{field: True})
    par = PAR8.model_copy(update={field: True})
    assert _field(lambda: pm.estimate("llama3-8b", C8, par, J8)) == f"parallel.{field}"


@pytest.mark.parametrize("field", ["tp", "pp", "dp", "cp", "vpp", "micro_batch", "zero_stage"])
def test_parallel_sizes_are_not_text(field):
    """tp="8" is a caller's slip (a value read from a file and never converted), not 8."""
    with pytest.raises(ValueError, match="not text"):
        pm.ParallelSpec(**{field: "2"})
    par = PAR8.model_copy(update={field: "1"})
    assert _field(lambda: pm.estimate("llama3-8b", C8, par, J8)) == f"parallel.{field}"
    assert pm.ParallelSpec(**{field: np.int64(1)}).model_dump()[field] == 1  # numpy integers are numbers


@pytest.mark.parametrize("sp", [1, 0, "yes", "true", None])
def test_sequence_parallelism_is_true_or_false(sp):
    """sp=1 was read as sequence parallelism on, sp=0 as off: a switch takes True or False."""
    with pytest.raises(ValueError, match="true or false"):
        pm.ParallelSpec(tp=2, sp=sp)
    assert _field(lambda: pm.estimate("llama3-8b", C8, PAR8.model_copy(update={"sp": sp}), J8)) == "parallel.sp"
    assert pm.ParallelSpec(tp=2, sp=np.bool_(False)).sp is False


@pytest.mark.parametrize("field", ["global_batch", "seq_len"])
def test_job_counts_are_not_text(field):
    with pytest.raises(ValueError, match="not text"):
        pm.JobSpec(**{"global_batch": 8, "seq_len": 4096, field: "8"})


@pytest.mark.parametrize("field", ["global_batch", "seq_len"])
def test_job_counts_are_not_booleans(field):
    with pytest.raises(ValueError, match="boolean"):
        pm.JobSpec(**{"global_batch": 8, "seq_len": 4096, field: True})


@pytest.mark.parametrize("field", ["n_gpus", "gpus_per_node", "scale_out_gbit_per_s_per_node"])
def test_cluster_numbers_are_not_booleans(field):
    assert _field(lambda: pm.ClusterSpec.build(H100, **{"n_gpus": 8, field: True})) == field
    one_gpu = pm.ClusterSpec.build(H100, n_gpus=1, gpus_per_node=1)
    assert _field(lambda: pm.search("llama3-8b", one_gpu.model_copy(update={field: True}), J8, top=1)) == \
        f"cluster.{field}"


# ---- 6. ClusterSpec.build says what is wrong as an InputError, with the range ----------------------
@pytest.mark.parametrize("kwargs, field, rule", [
    ({"n_gpus": -8}, "n_gpus", "1,048,576"),
    ({"n_gpus": 0}, "n_gpus", "1,048,576"),
    ({"n_gpus": "8"}, "n_gpus", "whole number"),
    ({"n_gpus": 8, "scale_out_gbit_per_s_per_node": 1e-9}, "scale_out_gbit_per_s_per_node", "0.001"),
    ({"n_gpus": 8, "scale_out_gbit_per_s_per_node": 2e6}, "scale_out_gbit_per_s_per_node", "1,000,000"),
    ({"n_gpus": 8.5}, "n_gpus", "whole number"),
    ({"n_gpus": 8, "gpus_per_node": 8.5}, "gpus_per_node", "whole number"),
    ({"n_gpus": 8, "gpus_per_node": MAX_GPUS + 1}, "gpus_per_node", "1,048,576"),
    ({"n_gpus": 8, "network": 5}, "network", "string"),
])
def test_cluster_build_raises_input_errors_with_the_range(kwargs, field, rule):
    err = _error(lambda: pm.ClusterSpec.build(H100, **kwargs))
    assert err.field == field and rule in err.rule, err


# ---- 7. estimate's hpz_partition_size is named as the API's argument -------------------------------
def test_estimate_names_hpz_partition_size_as_its_argument():
    cluster = pm.ClusterSpec.build(H100, n_gpus=64)
    par = pm.ParallelSpec(tp=8, dp=8, zero_stage=3, zeropp="hpz")
    job = pm.JobSpec(global_batch=64, seq_len=4096)
    err = _error(lambda: pm.estimate("llama3-8b", cluster, par, job, hpz_partition_size=3))
    assert err.field == "hpz_partition_size" and "hpz_partition_size=3" in err.rule, err
    assert pm.estimate("llama3-8b", cluster, par, job, hpz_partition_size=16).iteration_time_s > 0


def test_the_cli_still_names_the_deepspeed_config_key(tmp_path, monkeypatch, capsys):
    from cli_helpers import run_cli

    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps({"zero_optimization": {"stage": 3, "zero_hpz_partition_size": 3},
                               "bf16": {"enabled": True}, "train_micro_batch_size_per_gpu": 1}))
    code, _, err = run_cli(monkeypatch, capsys, "estimate", "--model", "llama3-8b", "--gpu", "h100-sxm5-80gb",
                           "--gpus", "64", "--global-batch", "64", "--seq-len", "4096", "--deepspeed-config", str(cfg))
    assert code == 2 and err.startswith("error: deepspeed_config.zero_optimization.zero_hpz_partition_size:"), err


# ---- 8. a node never holds more GPUs than the job, as on the command line --------------------------
def test_a_small_cluster_has_the_clis_node(monkeypatch, capsys):
    from cli_helpers import run_cli

    cluster = pm.ClusterSpec.build(H100, n_gpus=4)
    assert (cluster.gpus_per_node, cluster.scale_out_gbit_per_s_per_node) == (4, 1600.0)
    assert not cluster.gpus_per_node_stated and not cluster.scale_out_stated
    api = pm.estimate("llama3-8b", cluster, pm.ParallelSpec(tp=4), J8)
    code, out, err = run_cli(monkeypatch, capsys, "estimate", "--model", "llama3-8b", "--gpu", "h100-sxm5-80gb",
                             "--gpus", "4", "--tp", "4", "--global-batch", "8", "--seq-len", "4096", "--json")
    assert code == 0, err
    cli = json.loads(out)
    for key in ("gpus_per_node", "scale_out_gbit_per_s_per_node"):
        assert api.config[key] == cli["config"][key], key
    assert api.iteration_time_s == pytest.approx(cli["iteration_time_s"], rel=1e-12)
    assert pm.ClusterSpec.build(H100, n_gpus=4, gpus_per_node=8).gpus_per_node == 8  # a stated node is kept


# ---- 9. a model_copy'd spec of the wrong type is checked without a serializer warning --------------
def test_a_model_copy_with_a_float_size_gives_no_warning():
    par = PAR8.model_copy(update={"tp": 8.0})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        est = pm.estimate("llama3-8b", C8, par, J8)
        assert _field(lambda: pm.estimate("llama3-8b", C8, PAR8.model_copy(update={"tp": 8.5}), J8)) == "parallel.tp"
    assert est.iteration_time_s == pm.estimate("llama3-8b", C8, PAR8, J8).iteration_time_s


# ---- found beside them: ZeRO++ parts given as a switch, an empty fabric name ------------------------
@pytest.mark.parametrize("zeropp", [True, 1])
def test_parallel_zeropp_is_a_list_of_parts_not_a_switch(zeropp):
    with pytest.raises(ValueError, match="qwz, hpz, qgz"):
        pm.ParallelSpec(zero_stage=3, zeropp=zeropp)
    par = pm.ParallelSpec(tp=8, zero_stage=3).model_copy(update={"zeropp": zeropp})
    assert _field(lambda: pm.estimate("llama3-8b", C8, par, J8)) == "parallel.zeropp"


@pytest.mark.parametrize("network", ["", "  "])
def test_cluster_network_must_name_a_fabric(network):
    """As ``--network ''`` is refused (perfmodel.specs.hardware.check_network_name)."""
    assert _field(lambda: pm.ClusterSpec.build(H100, n_gpus=8, network=network)) == "network"
