"""Documented defaults for blank cells of a runs CSV (perfmodel/runs.py DEFAULTS_DOC)."""
import numpy as np
import pytest
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
    # torchtitan's TP plan always shards the norms over the sequence (SequenceParallel in apply_tp)
    assert sp_of("torchtitan") == 1.0
    assert "Megatron-DeepSpeed" in DEFAULTS_DOC["sp"]


def vocab_of(**over) -> float:
    df = pd.DataFrame([dict(ROW, framework="nemo", **over)])
    inputs, status, reason, _ = runs_to_inputs(df)
    assert status[0] == "ok", reason[0]
    return float(inputs["vocab_size"][0])


def test_blank_vocabulary_comes_from_the_catalog_model_of_that_shape():
    nemotron8b = dict(n_layers=32, hidden_size=4096, ffn_hidden_size=16384, n_heads=32, tp=2, pp=1, dp=4,
                      n_gpus=8, global_batch=64)
    assert vocab_of(mlp="relu2", **nemotron8b) == 256000.0    # Nemotron-3 8B's 256K tokenizer
    assert vocab_of(mlp="gelu", **nemotron8b) == 32000.0      # same shape, another MLP: not that model
    assert vocab_of(mlp="relu2", vocab_size=1000, **nemotron8b) == 1000.0  # a stated vocabulary wins
    gpt3 = dict(n_layers=96, hidden_size=12288, ffn_hidden_size=49152, n_heads=96, mlp="gelu")
    assert vocab_of(**gpt3) == 51200.0
    # Llama-2 70B and Llama-3 70B share a shape but not a vocabulary: no guess, the documented 32000
    llama70 = dict(n_layers=80, hidden_size=8192, ffn_hidden_size=28672, n_heads=64, mlp="swiglu", tp=8, pp=4,
                   dp=12, n_gpus=384, global_batch=1536)
    assert vocab_of(**llama70) == 32000.0
    assert "catalog" in DEFAULTS_DOC["vocab_size"]


def micro_batch_of(framework: str, pp: int, micro_batch=None) -> float:
    row = dict(ROW, framework=framework, n_layers=64, n_heads=64, n_gpus=512, tp=8, pp=pp, dp=64 // pp,
               global_batch=256)
    row["micro_batch"] = micro_batch
    inputs, status, reason, _ = runs_to_inputs(pd.DataFrame([row]))
    assert status[0] == "ok", reason[0]
    return float(inputs["micro_batch"][0])


def test_torchtitan_pipelines_split_the_local_batch_into_one_micro_batch_per_stage():
    # local batch 256 / dp 8 = 32 sequences over 8 stages: micro-batches of 4 (torchtitan 2024 default)
    assert micro_batch_of("torchtitan", pp=8) == 4.0
    assert micro_batch_of("megatron-lm", pp=8) == 1.0
    assert micro_batch_of("torchtitan", pp=1) == 4.0  # FSDP without a pipeline: the local batch 256 / 64 at once
    assert micro_batch_of("torchtitan", pp=8, micro_batch=2) == 2.0  # a stated value wins
    assert "torchtitan" in DEFAULTS_DOC["micro_batch"]


def test_a_run_in_a_precision_its_gpu_lacks_is_invalid_and_blank_is_what_it_has():
    """fp8 on an A100 cannot have run: the row is invalid with the reason, the others are costed; a
    blank precision is bf16, or fp16 on a V100 (no bf16 tensor cores)."""
    df = pd.DataFrame([dict(ROW, run_id="t-001", precision="fp8"), dict(ROW, run_id="t-002", precision="bf16"),
                       dict(ROW, run_id="t-003", gpu="v100-sxm3-32gb", precision="bf16"),
                       dict(ROW, run_id="t-004", gpu="v100-sxm3-32gb")])
    _, status, reason, _ = runs_to_inputs(df)
    assert list(status) == ["invalid", "ok", "invalid", "ok"], reason
    assert reason[0] == "precision: a100-sxm4-80gb has no fp8 tensor cores (it trains in bf16, fp16)"
    assert reason[2] == "precision: v100-sxm3-32gb has no bf16 tensor cores (it trains in fp16)"


def test_blank_recompute_is_none_for_megatron_bridge_recipes_else_the_least_that_fits():
    """Megatron-Bridge's performance recipes recompute nothing unless they say so: its blank cells are
    'none' (given), other stacks' blank cells are left to the least recompute that fits."""
    from perfmodel.specs.parallel import RECOMPUTE_CODES

    df = pd.DataFrame([dict(ROW, run_id="t-001", framework="megatron-bridge"),
                       dict(ROW, run_id="t-002", framework="megatron-lm"),
                       dict(ROW, run_id="t-003", framework="megatron-bridge", recompute="full")])
    inputs, status, reason, given = runs_to_inputs(df)
    assert list(status) == ["ok"] * 3, reason
    assert list(given) == [True, False, True]
    assert inputs["recompute"][0] == RECOMPUTE_CODES["none"]
    assert inputs["recompute"][2] == RECOMPUTE_CODES["full"]
    assert "Megatron-Bridge" in DEFAULTS_DOC["recompute"]


def test_blank_precision_follows_the_gpu_profile_not_its_name(tmp_path):
    """A V100 profile file under another name still defaults a blank precision to fp16."""
    from pathlib import Path

    src = Path(__file__).resolve().parents[2] / "hardware_profiles" / "v100-sxm3-32gb.yaml"
    gpu = tmp_path / "my-volta.yaml"
    gpu.write_text(src.read_text().replace("name: v100-sxm3-32gb", "name: my-volta", 1))
    df = pd.DataFrame([dict(ROW, run_id="t-001", gpu=str(gpu), n_gpus=16, tp=1, pp=2, dp=8, global_batch=16,
                            micro_batch=1, gpus_per_node=16)])
    _, status, reason, _ = runs_to_inputs(df)
    assert status[0] == "ok", reason[0]
    assert "V100" in DEFAULTS_DOC["precision"]


def test_a_volta_profile_by_path_runs_without_flash_attention_like_its_catalog_twin(tmp_path):
    """Flash attention needs Ampere or newer: a V100 given as a profile path (under another name too)
    is costed like the catalog's v100, in validate and in estimate."""
    from pathlib import Path

    from perfmodel.catalog import load_gpu
    from perfmodel.frameworks import uses_flash_attention

    src = Path(__file__).resolve().parents[2] / "hardware_profiles" / "v100-sxm3-32gb.yaml"
    gpu = tmp_path / "my-volta.yaml"
    gpu.write_text(src.read_text().replace("name: v100-sxm3-32gb", "name: my-volta", 1))
    row = dict(ROW, run_id="t-001", n_gpus=16, tp=1, pp=2, dp=8, global_batch=16, micro_batch=1,
               gpus_per_node=16, framework="megatron-lm")
    df = pd.DataFrame([dict(row, gpu="v100-sxm3-32gb"), dict(row, run_id="t-002", gpu=str(src)),
                       dict(row, run_id="t-003", gpu=str(gpu))])
    inputs, status, reason, _ = runs_to_inputs(df)
    assert list(status) == ["ok"] * 3, reason
    assert list(inputs["flash_attention"]) == [0.0, 0.0, 0.0]
    assert not uses_flash_attention("megatron-lm", load_gpu(str(gpu)))
    assert uses_flash_attention("megatron-lm", load_gpu("a100-sxm4-80gb"))


def test_blank_chunk_count_is_one_as_the_contract_states():
    """shared/CONTRACT.md: 'vpp blank -> 1', in every stack (Megatron's interleaving included)."""
    df = pd.DataFrame([dict(ROW, run_id=f"t-00{i}", framework=fw, n_layers=72)
                       for i, fw in enumerate(("megatron-lm", "nemo", "megatron-bridge", "nanotron"), 1)])
    inputs, status, reason, _ = runs_to_inputs(df)
    assert list(status) == ["ok"] * 4, reason
    assert list(inputs["vpp"]) == [1.0] * 4
    given = runs_to_inputs(pd.DataFrame([dict(ROW, framework="megatron-lm", n_layers=72, vpp=3)]))[0]
    assert given["vpp"][0] == 3.0
    assert DEFAULTS_DOC["vpp"].startswith("1 (not interleaved)")


def test_blank_shape_and_layout_cells_get_documented_defaults_not_an_error():
    """CONTRACT.md: blank cells get documented defaults, never an error. A blank head count, MLP width,
    tp, pp, dp, GPU count or global batch is filled; only what nothing can stand in for stays invalid."""
    from perfmodel.runs import default_ffn, default_heads

    # BLOOM's 13824-wide variant without its head count (bigscience chronicles): 96 heads of 144, tp 8
    assert default_heads(13824, 8) == 96
    assert default_heads(4096, 1) == 32 and default_heads(12288, 8) == 96
    assert default_heads(7, 2) is None
    assert list(default_ffn([4096, 4096], ["swiglu", "gelu"])) == [11008.0, 16384.0]  # Llama-2 7B; GPT
    rows = [dict(ROW, run_id="t-001", n_heads=None, framework="megatron-deepspeed"),
            dict(ROW, run_id="t-002", ffn_hidden_size=None, mlp="swiglu", framework="nemo"),
            dict(ROW, run_id="t-003", dp=None, framework="nemo"),
            dict(ROW, run_id="t-004", n_gpus=None, framework="nemo"),
            dict(ROW, run_id="t-005", tp=None, pp=None, dp=None, n_gpus=8, micro_batch=1, global_batch=None),
            dict(ROW, run_id="t-006", hidden_size=None),
            dict(ROW, run_id="t-007", n_heads=None, hidden_size=14337)]   # prime-ish width: no head count
    inputs, status, reason, _ = runs_to_inputs(pd.DataFrame(rows))
    assert list(status[:5]) == ["ok"] * 5, reason
    assert inputs["n_heads"][0] == 112.0 and inputs["n_kv_heads"][0] == 112.0  # 14336 / 128, tp 4 divides it
    assert inputs["ffn_hidden_size"][1] == 38400.0   # 8 x 14336 / 3 = 38229 -> next multiple of 256
    assert inputs["dp"][2] == 8.0 and inputs["dp"][3] == 8.0
    assert (inputs["tp"][4], inputs["pp"][4], inputs["dp"][4], inputs["global_batch"][4]) == (1.0, 1.0, 8.0, 8.0)
    assert status[5] == "invalid" and reason[5] == "hidden_size: blank (required)"
    assert status[6] == "invalid" and reason[6].startswith("n_heads: blank")
    for key in ("n_heads", "ffn_hidden_size", "tp, pp, dp", "global_batch"):
        assert key in DEFAULTS_DOC


def test_defaults_respect_what_is_stated_and_never_hide_a_bad_cell():
    from perfmodel.runs import default_heads

    assert default_heads(5120, 8, 16) == 32          # 40 heads of 128 would not take 16 kv heads
    rows = [dict(ROW, run_id="t-001", n_heads=None, n_kv_heads=16, hidden_size=5120, ffn_hidden_size=20480),
            dict(ROW, run_id="t-002", n_heads=None, tp=0),
            dict(ROW, run_id="t-003", global_batch=None, micro_batch=0),
            dict(ROW, run_id="t-004", n_gpus=None, dp=1.5),
            dict(ROW, run_id="t-005", pp="abc"),                 # a DataFrame cell that is not a number
            dict(ROW, run_id="t-006", dp=None, n_gpus=None),
            dict(ROW, run_id="t-007", n_heads=None, hidden_size=10**11),
            dict(ROW, run_id="t-008", tp=None, n_gpus=384, pp=12, dp=8)]  # tp = 384 / (12 x 8)
    inputs, status, reason, _ = runs_to_inputs(pd.DataFrame(rows))
    assert status[0] == "ok" and inputs["n_heads"][0] == 32.0 and inputs["n_kv_heads"][0] == 16.0
    assert reason[1] == "tp: must be a whole number >= 1"
    assert reason[2] == "micro_batch: must be a whole number >= 1"
    assert reason[3] == "dp: must be a whole number >= 1"
    assert reason[4] == "pp: must be a number"
    assert reason[5] == "dp: blank, and n_gpus blank too"
    assert reason[6] == "hidden_size: must be at most 1,048,576"
    assert status[7] == "ok" and inputs["tp"][7] == 4.0


def test_no_rows_predict_no_rows():
    from perfmodel.validate import PRED_COLUMNS, predict_runs

    out = predict_runs(pd.DataFrame(columns=list(ROW)))
    assert list(out.columns) == PRED_COLUMNS and len(out) == 0


def test_blank_cp_and_a_blank_tp_pp_pair_are_read_off_the_gpu_count():
    """A row that states tp, pp and dp but not cp puts the GPUs they leave in context parallelism; one that
    states only dp puts the rest in TP inside a node (dividing the heads), then pipeline stages."""
    rows = [dict(ROW, run_id="t-001", cp=None, tp=4, pp=12, dp=4),                      # 384 / 192 -> cp 2
            dict(ROW, run_id="t-002", cp=None),                                          # all used -> cp 1
            dict(ROW, run_id="t-003", tp=None, pp=None, dp=8, gpus_per_node=8),          # 48: tp 8, pp 6
            dict(ROW, run_id="t-004", tp=None, pp=None, dp=8, gpu="v100-sxm2-16gb", precision="fp16",
                 gpus_per_node=4),                                                       # 4 V100s per domain
            dict(ROW, run_id="t-005", tp=None, pp=None, dp=8, n_heads=112, n_kv_heads=14),   # tp 2: 14 % 4 != 0
            dict(ROW, run_id="t-006", tp=None, pp=None, dp=5),                           # 384 / 5: not whole
            dict(ROW, run_id="t-007", tp=None, pp=None, dp=1, n_gpus=64, n_kv_heads=1, n_layers=32,
                 global_batch=64),                                                       # MQA: tp 8 (a multiple of 1)
            dict(ROW, run_id="t-008", tp=None, pp=None, dp=16, n_gpus=128, gpu="gb200", gpus_per_node=4,
                 global_batch=64),                                                       # NVL72: tp 8 across trays
            dict(ROW, run_id="t-009", cp=None, tp=4, pp=12, dp=4, seq_len=2050),        # 2050 % (2 x 2): no ring CP
            dict(ROW, run_id="t-010", tp=None, pp=None, dp=2, n_gpus=144, n_layers=96, n_heads=96, hidden_size=12288,
                 ffn_hidden_size=49152, global_batch=64),                                # tp 8 would need pp 9: tp 6, pp 12
            dict(ROW, run_id="t-011", tp=None, pp=None, dp=2, n_gpus=48, n_layers=32, n_heads=32, hidden_size=4096,
                 ffn_hidden_size=11008, global_batch=64),                                # no split: 24 = tp x pp fails
            dict(ROW, run_id="t-012", tp=None, pp=None, dp=48, vpp=5, global_batch=384)]  # vpp 5 needs stages: tp 4, pp 2
    inputs, status, reason, _ = runs_to_inputs(pd.DataFrame(rows))
    assert list(status[:5]) == ["ok"] * 5, reason
    assert (inputs["cp"][0], inputs["cp"][1]) == (2.0, 1.0)
    assert (inputs["tp"][2], inputs["pp"][2]) == (8.0, 6.0)
    assert (inputs["tp"][3], inputs["pp"][3]) == (4.0, 12.0)
    assert (inputs["tp"][4], inputs["pp"][4]) == (2.0, 24.0)
    assert status[5] == "invalid"
    assert status[6] == "ok" and (inputs["tp"][6], inputs["pp"][6]) == (8.0, 8.0)
    assert status[7] == "ok" and (inputs["tp"][7], inputs["pp"][7]) == (8.0, 1.0)
    assert status[8] == "invalid" and "tp*pp*dp*cp must equal gpus" in reason[8]
    assert status[9] == "ok" and (inputs["tp"][9], inputs["pp"][9]) == (6.0, 12.0)
    assert status[10] == "invalid"   # estimate refuses every split of 24 GPUs over 32 layers and 32 heads too
    assert status[11] == "ok" and (inputs["tp"][11], inputs["pp"][11], inputs["vpp"][11]) == (4.0, 2.0, 5.0)
    assert "cp" in DEFAULTS_DOC


def test_zeropp_implies_stage_3_and_plain_words_are_read():
    rows = [dict(ROW, run_id="t-001", tp=1, pp=1, dp=384, micro_batch=1, global_batch=384, zeropp="qwz,hpz",
                 framework="deepspeed"),
            dict(ROW, run_id="t-002", zeropp="none", zero_stage=1, recompute="no", sp="True",
                 tied_embeddings="false", mlp="relu", framework="megatron-lm")]
    inputs, status, reason, _ = runs_to_inputs(pd.DataFrame(rows))
    assert list(status) == ["ok", "ok"], reason
    assert inputs["zero_stage"][0] == 3.0 and inputs["qwz"][0] == 1.0 and inputs["hpz"][0] > 0
    assert inputs["qwz"][1] == 0.0 and inputs["recompute"][1] == 0.0 and inputs["mlp_matrices"][1] == 2.0


def test_a_part_used_last_node_is_not_an_error():
    rows = [dict(ROW, run_id="t-001", n_gpus=12, tp=4, pp=1, dp=3, global_batch=6, micro_batch=2),
            dict(ROW, run_id="t-002", gpu="gb200", gpus_per_node=72, n_gpus=128, tp=4, pp=1, dp=32,
                 global_batch=64, micro_batch=2)]
    _, status, reason, _ = runs_to_inputs(pd.DataFrame(rows))
    assert list(status) == ["ok", "ok"], reason


def test_one_blank_layout_cell_is_read_back_from_the_others():
    """Blanking any one of tp, pp, dp or cp in a shipped run leaves its prediction unchanged: the
    defaults recover the stated value from n_gpus and the other three."""
    from pathlib import Path

    from perfmodel.calibrate.parsers.runs_csv import read_runs_csv
    from perfmodel.validate import predict_runs

    runs = read_runs_csv(Path(__file__).resolve().parents[2] / "calibration" / "data" / "runs" / "calibration_runs.csv")
    sample = pd.concat([runs[~runs.run_id.str.startswith("hfpb")], runs[runs.run_id.str.startswith("hfpb")].iloc[::25]])
    sample = sample.reset_index(drop=True)
    full = predict_runs(sample)
    assert (full["status"] == "ok").all()
    for col in ("tp", "pp", "dp", "cp"):
        blanked = predict_runs(sample.assign(**{col: np.nan}))
        assert (blanked["status"] == "ok").all(), (col, blanked[blanked.status != "ok"].reason.unique())
        np.testing.assert_allclose(blanked["pred_tokens_per_s_per_gpu"], full["pred_tokens_per_s_per_gpu"], rtol=1e-12)


# ---- blanks of sources the data does not hold yet (a review with rows written from public sources) -------------
def _inputs(**over):
    row = dict(ROW, framework="megatron-lm")
    row.update(over)
    df = pd.DataFrame([row])
    inputs, status, reason, _ = runs_to_inputs(df)
    return inputs, status[0], reason[0]


def test_a_layout_left_blank_is_one_the_batch_divides_into():
    """tp, pp and dp all blank: TP inside the node first, the fewest pipeline stages whose data-parallel size
    divides the batch (1,024 GPUs, 1,536 sequences: tp 8, dp 128), never an 'invalid' row made by the default;
    data parallelism alone for a sharded-data-parallel stack."""
    blank = dict(tp=np.nan, pp=np.nan, dp=np.nan, n_gpus=1024, global_batch=1536, micro_batch=np.nan,
                 n_layers=96, hidden_size=12288, ffn_hidden_size=49152, n_heads=96)
    inputs, status, reason = _inputs(**blank)
    assert status == "ok", reason
    assert (inputs["tp"][0], inputs["pp"][0], inputs["dp"][0]) == (8.0, 1.0, 128.0)
    inputs, status, reason = _inputs(**dict(blank, global_batch=1000))  # 1000 = 8 x 125: dp 8, 128 per rank
    assert status == "ok", reason
    assert inputs["tp"][0] * inputs["pp"][0] * inputs["dp"][0] == 1024 and 1000 % inputs["dp"][0] == 0
    inputs, status, reason = _inputs(**dict(blank, global_batch=2048, framework="deepspeed", zero_stage=3))
    assert status == "ok", reason
    assert (inputs["tp"][0], inputs["pp"][0], inputs["dp"][0]) == (1.0, 1.0, 1024.0)


def test_sharded_data_parallel_takes_the_local_batch_in_one_micro_batch():
    """ZeRO-3 / FSDP without pipelining gathers the parameters every micro-batch: a blank micro-batch is the
    local batch (OPT-175B-like: TP 8, FSDP over 124 ranks, 992 sequences: 8 per rank)."""
    row = dict(tp=8, pp=1, dp=124, n_gpus=992, global_batch=992, micro_batch=np.nan, zero_stage=3,
               n_layers=96, hidden_size=12288, ffn_hidden_size=49152, n_heads=96)
    inputs, status, reason = _inputs(**row)
    assert status == "ok", reason
    assert inputs["micro_batch"][0] == 8.0
    assert _inputs(**dict(row, zero_stage=1))[0]["micro_batch"][0] == 1.0  # the distributed optimizer: 1
    assert "ZeRO-3" in DEFAULTS_DOC["micro_batch"]


def test_meta_internal_shards_its_optimizer_and_its_sequence():
    """Meta's Llama 3 stack (Dubey et al. 2024 Sec. 3.3.2) shards optimizer states and gradients and runs
    Megatron-style TP: a blank ZeRO stage is 1 and a blank sp on, as for the Megatron-Core recipes."""
    inputs, status, reason = _inputs(framework="meta-internal", zero_stage=np.nan, sp=np.nan)
    assert status == "ok", reason
    assert inputs["zero_stage"][0] == 1.0 and inputs["sp"][0] == 1.0
    inputs, _, _ = _inputs(framework="megatron-lm", zero_stage=np.nan)
    assert inputs["zero_stage"][0] == 0.0  # Megatron-LM's own default: no distributed optimizer


def test_a_blank_global_batch_gives_a_pipeline_many_micro_batches():
    inputs, status, reason = _inputs(global_batch=np.nan, micro_batch=1, tp=8, pp=35, dp=40, n_gpus=11200,
                                     n_layers=105, hidden_size=20480, ffn_hidden_size=81920, n_heads=128)
    assert status == "ok", reason
    assert inputs["global_batch"][0] == 1 * 40 * 4 * 35
    inputs, _, _ = _inputs(global_batch=np.nan, micro_batch=2, tp=8, pp=1, dp=48, n_gpus=384)
    assert inputs["global_batch"][0] == 2 * 48


def test_a_row_with_only_its_mfu_is_scored():
    """target mfu: the truth is the tokens/s/GPU that MFU stands for under pred_mfu's definition (model FLOPs
    over the 16-bit dense peak), so the row's error is its MFU error."""
    from perfmodel.validate import measured_tokens_per_s_per_gpu, predict_runs

    row = dict(ROW, framework="nemo", mfu=0.45, target="mfu", tokens_per_s_per_gpu=np.nan)
    df = pd.DataFrame([row])
    truth = measured_tokens_per_s_per_gpu(df)[0]
    pred = predict_runs(df).iloc[0]
    assert np.isfinite(truth)
    assert pred.pred_tokens_per_s_per_gpu / truth == pytest.approx(pred.pred_mfu / 0.45, rel=1e-9)


def test_a_blank_layout_keeps_to_what_the_stack_runs():
    """Data parallelism first for DeepSpeed: a pipeline only where its ZeRO stage composes with one (never with
    ZeRO-3), so 8 sequences on 16 GPUs take tp 2 rather than pp 2; the Megatron family keeps whole key/value
    heads on a TP rank (multi-query: tp 1), as rules.TP_KV_STACK asks."""
    base = dict(n_layers=32, hidden_size=4096, ffn_hidden_size=16384, n_heads=32, n_gpus=16, tp=np.nan, pp=np.nan,
                dp=np.nan, micro_batch=np.nan, global_batch=8)
    inputs, status, reason = _inputs(**dict(base, framework="deepspeed", zero_stage=3))
    assert status == "ok", reason
    assert inputs["pp"][0] == 1.0 and inputs["tp"][0] * inputs["dp"][0] == 16 and 8 % inputs["dp"][0] == 0
    inputs, status, reason = _inputs(**dict(base, framework="megatron-lm", n_kv_heads=1, dp=2))
    assert status == "ok", reason
    assert inputs["tp"][0] == 1.0 and inputs["pp"][0] == 8.0


LLAMA2_70B = dict(ROW, framework="nemo", n_layers=80, hidden_size=8192, ffn_hidden_size=28672, n_heads=64,
                  n_kv_heads=8, vocab_size=32000, mlp="swiglu", seq_len=4096, gpu="h100-sxm5-80gb",
                  precision="fp8")


def test_blank_recompute_when_no_mode_fits_is_not_full_recompute_that_saves_nothing():
    """NeMo 24.07's Llama 2 70B SFT ran on 16 H100s at TP 4 x PP 4 (nemo2407-015) yet no recompute mode fits
    the modelled memory: its peak is the optimizer step's fp32 gradient copy, which full recompute does not
    touch (it saves under 5%). The least recomputation within 5% of the lowest memory
    is assumed (none), not full recompute; where full recompute saves much but still does not fit, full."""
    from perfmodel.runs import RECOMPUTE_MEMORY_PRECISION, least_recompute_that_fits

    df = pd.DataFrame([
        dict(LLAMA2_70B, run_id="t-001", n_gpus=16, tp=4, pp=4, dp=1, micro_batch=1, global_batch=32),
        # 70B without ZeRO on one node: the weights alone overflow; micro-batch 4's activations are what
        # full recompute saves
        dict(LLAMA2_70B, run_id="t-002", n_gpus=8, tp=1, pp=1, dp=8, micro_batch=4, global_batch=64,
             precision="bf16"),
        # fits without recompute: none, as before
        dict(LLAMA2_70B, run_id="t-003", n_gpus=64, tp=4, pp=4, dp=4, micro_batch=1, global_batch=128),
    ])
    inputs, status, reason, given = runs_to_inputs(df)
    assert list(status) == ["ok"] * 3, reason
    assert not np.any(given)
    chosen, tries = least_recompute_that_fits(inputs, given)
    memory = np.column_stack([t["memory_gib"] for t in tries])
    fits = np.column_stack([t["fits"] for t in tries])
    assert not fits[0].any() and not fits[1].any() and fits[2, 0]
    assert memory[0, 2] < memory[0, 0] <= memory[0, 2] * (1 + RECOMPUTE_MEMORY_PRECISION)
    assert memory[1, 0] > memory[1, 2] * (1 + RECOMPUTE_MEMORY_PRECISION)
    assert list(chosen) == [0.0, 2.0, 0.0]
    # a stated mode is the row's own code, costed as stated in every try
    stated, tries_stated = least_recompute_that_fits({**inputs, "recompute": np.full(3, 1.0)}, np.ones(3, bool))
    assert list(stated) == [1.0] * 3
    assert all(np.allclose(t["memory_gib"], memory[:, 1]) for t in tries_stated)


def test_blank_recompute_without_a_finite_memory_falls_back_to_full(monkeypatch):
    """Where no try yields a finite memory (nothing to compare), the rule keeps its old fall-back: full."""
    import perfmodel.runs as runs_mod

    df = pd.DataFrame([dict(LLAMA2_70B, run_id="t-001", n_gpus=16, tp=4, pp=4, dp=1, micro_batch=1,
                            global_batch=32)])
    inputs, status, reason, given = runs_to_inputs(df)
    real = runs_mod.step_costs

    def no_memory(inp):
        out = real(inp)
        return {**out, "memory_gib": np.full_like(out["memory_gib"], np.nan), "fits": np.zeros_like(out["fits"])}

    monkeypatch.setattr(runs_mod, "step_costs", no_memory)
    chosen, _ = runs_mod.least_recompute_that_fits(inputs, given)
    assert list(chosen) == [2.0]
