"""Documented defaults for blank cells of a runs CSV (perfmodel/runs.py DEFAULTS_DOC)."""
import pandas as pd

from perfmodel.runs import DEFAULTS_DOC, runs_to_inputs

ROW = {"run_id": "t-001", "source": "t", "model_name": "m", "n_layers": 70, "hidden_size": 14336,
       "ffn_hidden_size": 57344, "n_heads": 112, "seq_len": 2048, "gpu": "a100-sxm4-80gb", "n_gpus": 384,
       "gpus_per_node": 8, "tp": 4, "pp": 12, "dp": 8, "micro_batch": 2, "global_batch": 2048}


def sp_of(framework: str, tp: int = 4) -> float:
    df = pd.DataFrame([dict(ROW, framework=framework, tp=tp, dp=32 // tp)])
    inputs, status, reason, _ = runs_to_inputs(df)
    assert status[0] == "ok", reason[0]
    return float(inputs["sp"][0])


def test_sequence_parallel_default_follows_the_stack():
    assert sp_of("megatron-lm") == 1.0  # Megatron-family with Korthikanti's sequence parallelism
    assert sp_of("nemo") == 1.0
    # BLOOM-era Megatron-DeepSpeed: the BigScience fork's mpu has no sequence-parallel regions
    assert sp_of("megatron-deepspeed") == 0.0
    assert sp_of("some-unknown-stack") == 0.0
    assert sp_of("megatron-lm", tp=1) == 0.0  # nothing to split without TP
    assert "Megatron-DeepSpeed" in DEFAULTS_DOC["sp"]
