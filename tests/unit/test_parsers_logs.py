"""Training-log parser against the shipped log excerpts."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from perfmodel.calibrate.parsers import parse_training_log
from perfmodel.errors import InputError

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
LOGS = DATA / "traces" / "logs"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "parsers"
needs_data = pytest.mark.skipif(not DATA.is_dir(), reason="shared data folder absent")


@needs_data
def test_megatron_lm_with_throughput():
    df = parse_training_log(LOGS / "megatron_lm_issue756_mixtral8x7b_16xH100.txt")
    assert df["iteration"].tolist() == [43, 44, 45]
    assert df["iteration_time_s"].tolist() == pytest.approx([5.4449, 5.5338, 5.7186])
    assert df["tflop_per_s_per_gpu"].tolist() == [239.8, 236.0, 228.4]
    assert (df["framework"] == "megatron-lm").all() and df["tokens_per_s_per_gpu"].isna().all()


@needs_data
def test_megatron_without_throughput():
    df = parse_training_log(LOGS / "megatron_llm_epfl_issue11_no_throughput.txt")
    assert df["iteration"].tolist() == [122, 123, 124, 125]
    assert df["iteration_time_s"].iloc[0] == pytest.approx(86.5452)
    assert df["tflop_per_s_per_gpu"].isna().all()


@needs_data
def test_deepspeed_timer_and_megatron_deepspeed():
    df = parse_training_log(LOGS / "deepspeed_issue3742_timer_and_megatron_deepspeed.txt")
    timer = df[df["framework"] == "deepspeed"].iloc[0]
    assert timer["iteration"] == 34 and timer["samples_per_s"] == pytest.approx(8.00912418308922)
    mds = df[df["framework"] == "megatron-deepspeed"].iloc[0]
    assert mds["iteration"] == 34 and mds["iteration_time_s"] == pytest.approx(4.1031)
    assert mds["tflop_per_s_per_gpu"] == 112.9 and mds["samples_per_s"] == 7.799
    assert len(df) == 2


@needs_data
def test_deepspeed_flops_profiler():
    row = parse_training_log(LOGS / "deepspeed_flops_profiler_bert_large_a100.txt").iloc[0]
    assert row["iteration"] == 10 and row["iteration_time_s"] == pytest.approx(0.18473)
    assert row["tflop_per_s_per_gpu"] == 102.0 and row["samples_per_s"] == 433.07
    # the profile's own numbers agree: 80 samples / 184.73 ms
    assert row["samples_per_s"] == pytest.approx(80 / row["iteration_time_s"], rel=1e-3)


@needs_data
def test_torchtitan_with_and_without_rank_prefix():
    df = parse_training_log(LOGS / "torchtitan_pr1437_debug_log.txt")
    assert df["iteration"].tolist() == [3, 4, 5, 10]
    assert df["tokens_per_s_per_gpu"].tolist() == [30768, 35051, 34824, 34574]
    assert df["mfu"].iloc[0] == pytest.approx(0.0032)
    df = parse_training_log(LOGS / "torchtitan_pr2389_log.txt")
    assert df["iteration"].tolist() == [4, 4, 4, 5]  # one line per rank
    assert df["tflop_per_s_per_gpu"].iloc[0] == 314.71 and df["mfu"].iloc[0] == pytest.approx(0.1399)
    assert (df["framework"] == "torchtitan").all() and df["iteration_time_s"].isna().all()


@needs_data
def test_kwai_format_code_is_not_a_log():
    with pytest.raises(InputError, match=r"megatron_kwai_log_format_code\.txt:1: .*no iteration"):
        parse_training_log(LOGS / "megatron_kwai_log_format_code.txt")


def test_kwai_lines():
    df = parse_training_log(FIXTURES / "megatron_kwai_synthetic.log")
    assert (df["framework"] == "megatron-kwai").all() and df["line"].tolist() == [2, 3]
    assert df["tokens_per_s_per_gpu"].tolist() == [387.0, 383.8]
    assert df["iteration_time_s"].tolist() == pytest.approx([12.0, 12.1])


def test_no_iteration_lines():
    with pytest.raises(InputError, match=r"log_no_iterations\.txt:1: training log: no iteration"):
        parse_training_log(FIXTURES / "log_no_iterations.txt")


def test_columns_and_nan():
    df = parse_training_log(FIXTURES / "megatron_kwai_synthetic.log")
    for col in ("iteration", "iteration_time_s", "tokens_per_s_per_gpu", "tflop_per_s_per_gpu",
                "samples_per_s", "framework"):
        assert col in df.columns
    assert np.isnan(df["tflop_per_s_per_gpu"]).all()


# ---- impossible numbers: one InputError naming file, line and field (robustness probe) -------
_MEGATRON = (" iteration       10/  100 | consumed samples: 10 | elapsed time per iteration (ms): {ms} |"
             " throughput per GPU (TFLOP/s/GPU): 400.0 |")


@pytest.mark.parametrize("line,field", [
    # int64 overflow (was OverflowError): Megatron iteration and torchtitan step
    (" iteration       99999999999999999999999/  100 | elapsed time per iteration (ms): 10 |", "iteration"),
    ("step: 99999999999999999999999  loss: 1.0  tps: 1,234  tflops: 3.15  mfu: 0.32%", "iteration"),
    (_MEGATRON.format(ms="9" * 400), "iteration_time_s"),      # overflows to inf: was accepted
    (_MEGATRON.format(ms="0"), "iteration_time_s"),            # 0 ms: was accepted
    (_MEGATRON.format(ms="0.0"), "iteration_time_s"),
    ("step: 5  loss: 1.0  tps: " + "9" * 400 + "  tflops: 3.15", "tokens_per_s_per_gpu"),
])
def test_bad_numbers_name_file_line_and_field(tmp_path, line, field):
    path = tmp_path / "train.log"
    path.write_text(_MEGATRON.format(ms="812.5") + "\n" + line + "\n")
    with pytest.raises(InputError, match=rf"train\.log:2: {field}: ") as exc:
        parse_training_log(path)
    assert exc.value.field == field


@pytest.mark.parametrize("latency", ["0 s", "0.0 ms"])
def test_deepspeed_profile_zero_latency_names_its_line(tmp_path, latency):
    path = tmp_path / "ds.log"
    path.write_text(f"Profile Summary at step 5\nsomething\n  iter latency: {latency}\n")
    with pytest.raises(InputError, match=r"ds\.log:3: iteration_time_s: must be a finite time > 0"):
        parse_training_log(path)


def test_largest_int64_iteration_still_parses(tmp_path):
    path = tmp_path / "train.log"
    path.write_text(f" iteration {2**63 - 1}/ {2**63 - 1} | elapsed time per iteration (ms): 10 |\n")
    df = parse_training_log(path)
    assert df["iteration"].tolist() == [2**63 - 1] and df["iteration_time_s"].tolist() == [0.01]


def test_torchtitan_colour_codes_and_the_older_wps_field(tmp_path):
    """torchtitan colours its metrics (ANSI codes end up in tee'd logs) and called tokens/s 'wps'
    before late 2024."""
    path = tmp_path / "t.log"
    path.write_text(
        "[rank0]:2024-12-20 10:00:01,000 - root - INFO - \x1b[31mstep:  1  \x1b[32mloss: 12.0  \x1b[33m"
        "memory: 40.1GiB(42.2%)  \x1b[34mtps: 5,124  \x1b[36mtflops: 300.01  \x1b[35mmfu: 30.01%\x1b[39m\n"
        "2024-09-01 10:00:01,000 - root - INFO - step: 10  loss: 9.0  memory: 40.0GiB(42.1%)  wps: 5,000  mfu: 29.0%\n")
    df = parse_training_log(path)
    assert list(df["iteration"]) == [1, 10]
    assert list(df["tokens_per_s_per_gpu"]) == [5124.0, 5000.0]


# ---- formats a real-file audit found refused (each a line in the layout the named project prints) ------
def test_bigscience_megatron_deepspeed_prints_seconds(tmp_path):
    """BigScience's Megatron-DeepSpeed (the BLOOM fork) prints 'elapsed time per iteration (s)': it was
    refused ('no iteration lines found'); the time is in seconds, not read as ms."""
    log = tmp_path / "job.out"
    log.write_text("[default3]: iteration       20/ 3125000 | consumed samples:         1920 | elapsed time per "
                   "iteration (s): 5.3551 | learning rate: 8.876E-07 | global batch size:    96 | lm loss: "
                   "8.861832E+00 | samples per second: 17.927 | TFLOPs: 137.10 |\n")
    row = parse_training_log(log).iloc[0]
    assert row.framework == "megatron-deepspeed" and row.iteration == 20 and row.global_batch == 96
    assert row.iteration_time_s == pytest.approx(5.3551) and row.samples_per_s == pytest.approx(17.927)
    bad = tmp_path / "bad.out"
    bad.write_text("iteration 3/ 10 | elapsed time per iteration (s): nan | global batch size: 96 |\n")
    with pytest.raises(InputError, match=r"got 'nan' s"):
        parse_training_log(bad)


def test_deepspeed_2022_throughput_timer(tmp_path):
    """DeepSpeed 0.5-0.7's ThroughputTimer line ('EPOCH/STEP, RunningAvgSamplesPerSec=..., CurrSamplesPerSec=...')
    was refused; the current sample rate is read, not the running average."""
    log = tmp_path / "ds.log"
    log.write_text("[2022-08-29 06:58:56,176] [INFO] [timer.py:198:stop] 0/20, RunningAvgSamplesPerSec=232.73, "
                   "CurrSamplesPerSec=227.48, MemAllocated=0.36GB, MaxMemAllocated=15.06GB\n")
    row = parse_training_log(log).iloc[0]
    assert (row.framework, row.iteration, row.samples_per_s) == ("deepspeed", 20, 227.48)


@pytest.mark.parametrize("line", [
    "Training epoch 0, iteration 45/99 | lr: 0.0003 | global_batch_size: 128 | train_step_timing in s: 6.08 |",
    "Epoch 0: : 10it [08:15, v_num=0, reduced_train_loss=10.30, global_step=9.000, train_step_timing in s=49.50]",
])
def test_a_nemo_log_is_named_as_such(tmp_path, line):
    """A NeMo / Lightning log was refused as 'no iteration lines found (expected Megatron/DeepSpeed/torchtitan
    format)'; it is still not read (it states no configuration to fit), but the error says what it is."""
    log = tmp_path / "nemo.log"
    log.write_text("some preamble\n" + line + "\n")
    with pytest.raises(InputError, match="NeMo / PyTorch Lightning log") as exc:
        parse_training_log(log)
    assert exc.value.where.endswith(":2") and "--runs" in str(exc.value)
