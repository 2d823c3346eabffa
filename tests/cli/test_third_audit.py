"""What a third input audit found: a FIFO or a device given as an input file hung or ran out of memory,
a name with a line break split the error line, a space inside a GPU count joined two counts, an empty
--vary item was dropped, a DeepSpeed config was costed as Megatron-LM, an explicit --sp was dropped
at tp 1, an empty --network was accepted by calibrate alone, and comm accepted an all-gather size no
nccl-tests run can have. Each now ends in one ``error:`` line naming the field (exit 2), or, for an
emitted configuration costed under another stack, says so."""
from __future__ import annotations

import json
import os
import sys

import pytest
from typer.testing import CliRunner

from perfmodel.cli import app

runner = CliRunner()
EST = ["estimate", "--model", "llama2-7b", "--gpu", "h100-sxm5-80gb", "--gpus", "8", "--global-batch", "64"]
REC = ["recommend", "--model", "llama2-7b", "--gpu", "h100-sxm5-80gb", "--seq-len", "4096", "--global-batch", "64"]


def _error(res, field: str) -> str:
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert res.exit_code == 2, res.output
    assert len(lines) == 1 and lines[0].startswith("error:") and field in lines[0], res.output
    return lines[0]


@pytest.mark.skipif(not hasattr(os, "mkfifo") or not os.path.exists("/dev/null"), reason="POSIX special files")
@pytest.mark.parametrize("special", ["fifo", "/dev/null"])
def test_a_special_file_is_refused_before_it_is_read(tmp_path, special):
    path = tmp_path / "fifo" if special == "fifo" else special
    if special == "fifo":
        os.mkfifo(path)  # reading it would block forever: the check must come first
    for args, field in (
        (["validate", str(path), "--out", str(tmp_path / "p.csv")], "csv"),
        ([*EST, "--calibration", str(path)], "calibration"),
        ([*EST, "--deepspeed-config", str(path)], "deepspeed_config"),
        (["calibrate", "--gpu", "h100-sxm5-80gb", "--out", str(tmp_path / "c.yaml"), "--nccl-tests", str(path)],
         "nccl-tests"),
        (["calibrate", "--gpu", "h100-sxm5-80gb", "--out", str(tmp_path / "c.yaml"), "--trace", str(path)], "trace"),
    ):
        line = _error(runner.invoke(app, args), field)
        assert "not a regular file" in line


@pytest.mark.parametrize("brk", ["\n", "\r", "\x85", "\u2028", "\x1e"])
def test_a_line_break_in_a_name_stays_on_the_error_line(brk):
    line = _error(runner.invoke(app, ["estimate", "--model", f"foo{brk}bar", "--gpu", "h100-sxm5-80gb", "--gpus", "8",
                                      "--global-batch", "64"]), "model")
    assert f"'foo{repr(brk)[1:-1]}bar'" in line


def test_a_line_break_in_a_path_stays_on_calibrates_lines(tmp_path):
    """calibrate's per-input summary (stdout) and its 'nothing fitted' error (exit 1) name the file."""
    log = tmp_path / "a\nb.log"
    log.write_text("[titan] step:  1  loss:  9.0  memory: 10.0GiB(12.50%)  tps: 1,000  tflops: 50.0  mfu: 5.00%\n"
                   "[titan] step:  2  loss:  8.0  memory: 10.0GiB(12.50%)  tps: 1,000  tflops: 50.0  mfu: 5.00%\n")
    res = runner.invoke(app, ["calibrate", "--gpu", "h100-sxm5-80gb", "--out", str(tmp_path / "c.yaml"), "--log", str(log)])
    assert res.exit_code == 1, res.output
    for stream in (res.stdout, res.stderr):
        assert not any(ln.endswith("/a") or ln.startswith("b.log") for ln in stream.splitlines()), stream
    assert [ln for ln in res.stderr.splitlines() if ln.startswith("error:")][0].count("a\\nb.log") == 1


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX FIFO")
def test_a_gpu_profile_path_that_is_a_fifo_is_named_as_such(tmp_path):
    fifo = tmp_path / "gpu.yaml"
    os.mkfifo(fifo)
    line = _error(runner.invoke(app, ["estimate", "--model", "llama2-7b", "--gpu", str(fifo), "--gpus", "8",
                                      "--global-batch", "64"]), "gpu")
    assert "not a regular file" in line


def test_a_space_inside_a_gpu_count_is_not_two_counts_joined():
    _error(runner.invoke(app, [*REC, "--gpus-range", "8 16"]), "gpus_range")
    ok = runner.invoke(app, [*REC, "--gpus-range", " 8, 16", "--top", "1"])
    assert ok.exit_code == 0 and "on 8,16 x" in ok.stdout


def test_an_empty_vary_item_is_refused(tmp_path):
    base = ["whatif", "--model", "llama2-7b", "--gpu", "h100-sxm5-80gb", "--gpus", "8", "--global-batch", "64",
            "--seq-len", "4096", "--out", str(tmp_path / "w")]
    assert "empty item" in _error(runner.invoke(app, [*base, "--vary", "gpus=8,,16"]), "vary.gpus")
    assert "whole numbers" in _error(runner.invoke(app, [*base, "--vary", "gpus=8,x"]), "vary.gpus")


def test_a_deepspeed_config_is_costed_under_deepspeed(tmp_path):
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 8,
                              "zero_optimization": {"stage": 3}, "bf16": {"enabled": True}}))
    res = runner.invoke(app, [*EST, "--seq-len", "2048", "--deepspeed-config", str(ds), "--json"])
    assert res.exit_code == 0, res.output
    cfg = json.loads(res.stdout)["config"]
    assert cfg["framework"] == "deepspeed" and cfg["zero_stage"] == 3
    line = _error(runner.invoke(app, [*EST, "--deepspeed-config", str(ds), "--framework", "megatron-lm"]),
                  "framework")
    assert "DeepSpeed's engine" in line
    assert runner.invoke(app, [*EST, "--deepspeed-config", str(ds), "--framework", "megatron-deepspeed"]).exit_code == 0


def test_an_explicit_sp_needs_tensor_parallelism():
    assert "--tp > 1" in _error(runner.invoke(app, [*EST, "--sp", "--tp", "1"]), "sp")
    assert runner.invoke(app, [*EST, "--tp", "1"]).exit_code == 0  # the default asks for nothing
    assert runner.invoke(app, [*EST, "--sp", "--tp", "2"]).exit_code == 0


def test_calibrate_refuses_an_empty_network_as_the_other_commands_do(tmp_path):
    nccl = tmp_path / "n.txt"
    nccl.write_text("# nothing\n")
    _error(runner.invoke(app, ["calibrate", "--gpu", "h100-sxm5-80gb", "--out", str(tmp_path / "c.yaml"),
                               "--nccl-tests", str(nccl), "--network", " "]), "network")


@pytest.mark.parametrize("op", ["all_gather", "reduce_scatter", "all_to_all"])
def test_comm_refuses_a_shared_buffer_that_ranks_cannot_split(op):
    base = ["comm", "--gpu", "h100-sxm5-80gb", "--gpus-per-node", "8", "--gpus", "16", "--op", op]
    line = _error(runner.invoke(app, [*base, "--bytes", "1023"]), "bytes")
    assert "multiple of the 16 GPUs" in line and "the nearest are 1008 and 1024" in line
    assert runner.invoke(app, [*base, "--bytes", "1024"]).exit_code == 0
    allreduce = ["comm", "--gpu", "h100-sxm5-80gb", "--gpus-per-node", "8", "--gpus", "16", "--op", "all_reduce"]
    assert runner.invoke(app, [*allreduce, "--bytes", "1023"]).exit_code == 0  # its size is each rank's buffer


def test_emitted_flags_say_which_stack_was_costed():
    res = runner.invoke(app, [*REC, "--gpus", "16", "--framework", "deepspeed", "--emit", "megatron", "--json"])
    assert res.exit_code == 0, res.output
    notes = json.loads(res.stdout)["emit"]["notes"]
    assert any(n.startswith("costed as deepspeed") for n in notes)
    same = runner.invoke(app, [*REC, "--gpus", "16", "--framework", "nemo", "--emit", "megatron", "--json"])
    assert not any(n.startswith("costed as") for n in json.loads(same.stdout)["emit"]["notes"])
    ds = runner.invoke(app, [*REC, "--gpus", "16", "--framework", "nemo", "--emit", "deepspeed", "--json"])
    ds_notes = json.loads(ds.stdout)["emit"]["notes"]
    assert sum("costed as nemo" in n or "costed for nemo" in n for n in ds_notes) == 1, ds_notes
    own = runner.invoke(app, [*REC, "--gpus", "16", "--framework", "deepspeed", "--emit", "deepspeed", "--json"])
    assert not any("costed as" in n or "costed for" in n for n in json.loads(own.stdout)["emit"]["notes"])


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
