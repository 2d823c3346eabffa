"""What-if sweeps: the fixed path agrees with ``estimate``, the best path with ``search``;
infeasible points are rows, not exceptions; the command writes a CSV and a PNG."""
from __future__ import annotations

import json

import pandas as pd
import numpy as np
import pytest
from typer.testing import CliRunner

import perfmodel as pm
from perfmodel.cli import app
from perfmodel.errors import InputError
from perfmodel.report.figures import PNG_SIGNATURE
from perfmodel.report.plots_whatif import whatif_figure
from perfmodel.whatif import CONFIG_COLUMNS, METRIC_COLUMNS

MODEL = pm.load_model("llama3-8b")
CLUSTER = pm.ClusterSpec.build(pm.load_gpu("h100-sxm5-80gb"), n_gpus=64)
JOB = pm.JobSpec(global_batch=128, seq_len=4096)
PAR = pm.ParallelSpec(tp=2, pp=2, vpp=2, micro_batch=1, recompute="selective")


def test_fixed_mode_matches_estimate_at_every_point():
    df = pm.whatif(MODEL, CLUSTER, JOB, {"gpus": [32, 64], "scale_out_gbit_per_s": [800, 3200]},
                   mode="fixed", parallel=PAR)
    assert list(df.columns[:2]) == ["gpus", "scale_out_gbit_per_s"]
    assert set(CONFIG_COLUMNS) | set(METRIC_COLUMNS) <= set(df.columns)
    assert len(df) == 4 and (df["status"] == "ok").all()
    for rec in df.to_dict("records"):
        cluster = pm.ClusterSpec.build(CLUSTER.gpu, rec["gpus"], 8, rec["scale_out_gbit_per_s"],
                                       CLUSTER.stated_latency_us)
        par = PAR.model_copy(update={"dp": rec["gpus"] // 4})
        est = pm.estimate(MODEL, cluster, par, JOB)
        assert rec["dp"] == rec["gpus"] // 4
        assert rec["tokens_per_s_per_gpu"] == pytest.approx(est.tokens_per_s_per_gpu, rel=1e-12)
        assert rec["iteration_time_s"] == pytest.approx(est.iteration_time_s, rel=1e-12)
        assert rec["memory_gib"] == pytest.approx(est.memory_gib, rel=1e-12)
        assert rec["mfu"] == pytest.approx(est.mfu, rel=1e-12)


def test_more_bandwidth_never_slows_a_fixed_config():
    df = pm.whatif(MODEL, CLUSTER, JOB, {"scale_out_gbit_per_s": [400, 800, 1600, 3200]}, mode="fixed", parallel=PAR)
    tps = df["tokens_per_s_per_gpu"].to_numpy()
    assert (tps[1:] >= tps[:-1]).all() and tps[-1] > tps[0]


@pytest.mark.parametrize("mode", ["fixed", "best"])
def test_invalid_points_are_rows_with_a_reason(mode):
    df = pm.whatif(MODEL, CLUSTER, JOB, {"gpus": [63, 64]}, mode=mode, parallel=PAR)
    bad, good = df.iloc[0], df.iloc[1]
    why = "gpus: must be a multiple of tp*pp*cp" if mode == "fixed" else "no structurally valid configuration"
    assert bad["status"] == "invalid" and why in bad["reason"] and not bad["fits"]
    assert pd.isna(bad["tokens_per_s_per_gpu"])
    assert good["status"] == "ok" and good["tokens_per_s_per_gpu"] > 0
    wide = pm.ParallelSpec(tp=8, pp=4)
    df = pm.whatif(MODEL, CLUSTER, JOB, {"gpus": [16, 64]}, mode="fixed", parallel=wide)
    assert df["status"].iloc[0] == "invalid" and "tp*pp*cp" in df["reason"].iloc[0]
    assert df["status"].iloc[1] == "ok"


@pytest.mark.parametrize("mode", ["fixed", "best"])
def test_a_gpu_without_the_jobs_tensor_cores(mode):
    """Swapping the GPU keeps the job's precision: an fp8 job on an A100, or a bf16 one on a V100, is
    an invalid point naming it; a job that names no precision (gpu_precision) trains in each GPU's
    default (bf16, fp16 on a V100) and the frame says which."""
    fp8 = JOB.model_copy(update={"precision": "fp8"})
    df = pm.whatif(MODEL, CLUSTER, fp8, {"gpu": ["h100-sxm5-80gb", "a100-sxm4-80gb"]}, mode=mode, parallel=PAR)
    assert list(df["status"]) == ["ok", "invalid"]
    assert df["reason"].iloc[1] == "precision: a100-sxm4-80gb has no fp8 tensor cores (it trains in bf16, fp16)"
    sweep = {"gpu": ["h100-sxm5-80gb", "v100-sxm3-32gb"]}
    bf16 = pm.JobSpec(global_batch=JOB.global_batch, seq_len=JOB.seq_len, precision="bf16")  # stated
    df = pm.whatif(MODEL, CLUSTER, bf16, sweep, mode=mode, parallel=PAR)
    assert df["status"].iloc[1] == "invalid" and "v100-sxm3-32gb has no bf16" in df["reason"].iloc[1]
    for job, flag in ((bf16, True), (JOB, False)):  # told to, or a JobSpec that names no precision
        df = pm.whatif(MODEL, CLUSTER, job, sweep, mode=mode, parallel=PAR, gpu_precision=flag)
        assert list(df["precision"]) == ["bf16", "fp16"] and (df["status"] != "invalid").all()


def test_best_mode_matches_the_search():
    df = pm.whatif(MODEL, CLUSTER, JOB, {"gpu": ["h100-sxm5-80gb", "h200-sxm-141gb"]})
    assert list(df["gpu"]) == ["h100-sxm5-80gb", "h200-sxm-141gb"]
    for rec in df.to_dict("records"):
        cluster = pm.ClusterSpec.build(pm.load_gpu(rec["gpu"]), 64, 8, CLUSTER.scale_out_gbit_per_s_per_node,
                                       CLUSTER.stated_latency_us)
        best = pm.search(MODEL, cluster, JOB, top=1).iloc[0]
        assert rec["tokens_per_s_per_gpu"] == pytest.approx(best["tokens_per_s_per_gpu"], rel=1e-12)
        assert (rec["tp"], rec["pp"], rec["dp"]) == (best["tp"], best["pp"], best["dp"])
    assert df.attrs["sweep"] == ["gpu"] and df.attrs["mode"] == "best"


def test_zeropp_on_uses_zero3_with_all_parts():
    par = pm.ParallelSpec(tp=2, pp=1, micro_batch=1, zero_stage=3)
    df = pm.whatif(MODEL, CLUSTER, JOB, {"zeropp_on": ["off", "on"]}, mode="fixed", parallel=par)
    off, on = df.iloc[0], df.iloc[1]
    assert (off["zero_stage"], off["zeropp"]) == (3, "") and (on["zero_stage"], on["zeropp"]) == (3, "qwz,hpz,qgz")
    on_par = par.model_copy(update={"dp": 32, "zeropp": frozenset({"qwz", "hpz", "qgz"})})
    est = pm.estimate(MODEL, CLUSTER, on_par, JOB)
    assert on["tokens_per_s_per_gpu"] == pytest.approx(est.tokens_per_s_per_gpu, rel=1e-12)
    # best mode is the search: ZeRO++ where the stack has it (DeepSpeed), invalid under Megatron-LM (rule 34)
    ds = JOB.model_copy(update={"framework": "deepspeed"})
    best = pm.whatif(MODEL, CLUSTER, ds, {"zeropp_on": [True]})
    assert best["zero_stage"].iloc[0] == 3 and best["zeropp"].iloc[0] == "qwz,hpz,qgz"
    assert pm.whatif(MODEL, CLUSTER, JOB, {"zeropp_on": [True]})["status"].iloc[0] == "invalid"


def test_calibration_and_job_variables(tmp_path):
    cal = tmp_path / "slow.yaml"
    cal.write_text("frameworks:\n  megatron-lm:\n    kernel_efficiency: 0.5\n")
    df = pm.whatif(MODEL, CLUSTER, JOB, {"calibration": ["default", str(cal)]}, mode="fixed", parallel=PAR)
    assert list(df["calibration"]) == ["default", str(cal)]
    assert df["tokens_per_s_per_gpu"].iloc[1] < df["tokens_per_s_per_gpu"].iloc[0]
    seq = pm.whatif(MODEL, CLUSTER, JOB, {"seq_len": [2048, 8192], "global_batch": [64, 128]},
                    mode="fixed", parallel=PAR)
    assert len(seq) == 4 and seq["memory_gib"].iloc[-1] > seq["memory_gib"].iloc[0]


@pytest.mark.parametrize("sweep, kwargs, field", [
    ({"gpus": [8], "gpu": ["b200"], "seq_len": [1024]}, {}, "sweep"),
    ({"nics": [1]}, {}, "sweep"),
    ({"gpus": [8]}, {"mode": "fixed"}, "parallel"),
    ({"gpus": [8]}, {"mode": "fastest"}, "mode"),
    ({"zeropp_on": ["maybe"]}, {}, "zeropp_on"),
    ({"gpus": [0, 8]}, {}, "sweep.gpus"),
])
def test_bad_sweeps_raise_input_error(sweep, kwargs, field):
    with pytest.raises(InputError) as exc:
        pm.whatif(MODEL, CLUSTER, JOB, sweep, **kwargs)
    assert exc.value.field.startswith(field)


def test_whatif_figure_has_one_series_per_second_variable():
    df = pm.whatif(MODEL, CLUSTER, JOB, {"gpus": [16, 32, 64], "scale_out_gbit_per_s": [800, 3200]},
                   mode="fixed", parallel=PAR)
    fig = whatif_figure(df)
    tput, mfu = fig.axes[:2]
    assert len(tput.get_lines()) == 2 and len(mfu.get_lines()) == 2
    assert tput.get_xlabel() == "GPUs" and "tokens/s" in tput.get_ylabel() and "MFU" in mfu.get_ylabel()


def test_whatif_command_writes_csv_and_png(tmp_path):
    args = ["whatif", "--model", "llama3-8b", "--gpu", "h100-sxm5-80gb", "--gpus", "64", "--global-batch", "128",
            "--seq-len", "4096", "--vary", "scale_out_gbit_per_s=800,3200", "--vary", "gpus=32,64",
            "--mode", "fixed", "--tp", "2", "--pp", "2", "--out", str(tmp_path)]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    df = pd.read_csv(tmp_path / "whatif.csv")
    assert len(df) == 4 and {"scale_out_gbit_per_s", "gpus", "tokens_per_s_per_gpu", "mfu", "memory_gib",
                             "iteration_time_s"} <= set(df.columns)
    assert (tmp_path / "whatif.png").read_bytes().startswith(PNG_SIGNATURE)
    res = CliRunner().invoke(app, [*args[:-2], "--json"])
    assert res.exit_code == 0
    points = json.loads(res.output)["points"]
    assert [p["gpus"] for p in points] == [32, 64, 32, 64]


@pytest.mark.parametrize("vary", ["bandwidth=1,2", "gpus=a,b", "gpus"])
def test_whatif_command_bad_vary_exits_2(vary):
    res = CliRunner().invoke(app, ["whatif", "--model", "llama3-8b", "--gpu", "h100-sxm5-80gb", "--gpus", "8",
                                   "--global-batch", "16", "--vary", vary])
    assert res.exit_code == 2 and "error: vary" in res.output


def test_a_job_without_a_precision_trains_in_the_gpu_s_default_through_the_api():
    """README: a precision left out is bf16, or fp16 on a V100 -- in the Python API as on the command line."""
    v100 = pm.ClusterSpec.build(pm.load_gpu("v100-sxm3-32gb"), 16)
    model, par = pm.load_model("gpt3-1.3b"), pm.ParallelSpec(tp=2, dp=8)
    left_out = pm.JobSpec(global_batch=64, seq_len=2048)
    fp16 = pm.JobSpec(global_batch=64, seq_len=2048, precision="fp16")
    assert not left_out.precision_stated and fp16.precision_stated
    t_left_out = pm.estimate(model, v100, par, left_out).iteration_time_s
    assert t_left_out == pm.estimate(model, v100, par, fp16).iteration_time_s
    assert len(pm.search(model, v100, left_out, top=1)) == 1
    with pytest.raises(InputError, match="no bf16 tensor cores"):  # a stated bf16 stays bf16
        pm.estimate(model, v100, par, pm.JobSpec(global_batch=64, seq_len=2048, precision="bf16"))
    df = pm.whatif(model, v100, left_out, {"gpu": ["v100-sxm3-32gb", "a100-sxm4-80gb"]})
    assert list(df["precision"]) == ["fp16", "bf16"] and (df["status"] == "ok").all()


def test_a_gpu_swap_takes_the_new_gpus_nic_default_unless_the_bandwidth_was_stated():
    """H100 nodes default to 8 x 400 Gbit/s, A100 (DGX A100) to 8 x 200: a what-if onto A100s of a cluster
    whose bandwidth was left to the default gets the A100's, one whose bandwidth was stated keeps it."""
    import perfmodel as pm
    from perfmodel.calibration_profile import load_calibration

    job = pm.JobSpec(global_batch=64, seq_len=4096)
    model = pm.load_model("llama3-8b")
    h100 = pm.load_gpu("h100-sxm5-80gb")
    default = pm.whatif(model, pm.ClusterSpec.build(h100, 64, 8), job, {"gpu": ["a100-sxm4-80gb"]})
    # the same A100 cluster on the H100 cluster's network (the swap keeps its calibrated latency)
    latency = load_calibration(None).for_network(h100, None)[1].scale_out_latency_us
    own = pm.whatif(model, pm.ClusterSpec.build(pm.load_gpu("a100-sxm4-80gb"), 64, 8, None, latency), job,
                    {"gpu": ["a100-sxm4-80gb"]})
    stated = pm.whatif(model, pm.ClusterSpec.build(h100, 64, 8, 3200.0), job, {"gpu": ["a100-sxm4-80gb"]})
    assert default.tokens_per_s_per_gpu.iloc[0] == own.tokens_per_s_per_gpu.iloc[0]
    assert stated.tokens_per_s_per_gpu.iloc[0] > default.tokens_per_s_per_gpu.iloc[0]


def test_a_gpu_swap_keeps_the_network_and_takes_the_new_gpus_node_size():
    """What if the same cluster had other GPUs: the fabric (its scale-out latency, calibrated with the
    starting GPU) stays, so a GPU at least as fast in every respect is never slower at the same layout
    (a V100 used to inherit a 20 us latency against the A100's calibrated 282 us, and win); a node size
    left to the default is the new GPU's, so a what-if onto B200 from GB200 trays equals recommend on B200."""
    import perfmodel as pm
    from perfmodel.calibration_profile import load_calibration

    model = pm.load_model("gpt3-1.3b")
    a100 = pm.ClusterSpec.build(pm.load_gpu("a100-sxm4-80gb"), 64, 8, 3200.0)
    par = pm.ParallelSpec(tp=8, pp=1, dp=4, cp=2, zero_stage=3)
    job = pm.JobSpec(global_batch=512, seq_len=2048, precision="fp16")
    df = pm.whatif(model, a100, job, {"gpu": ["v100-sxm3-32gb", "a100-sxm4-80gb", "h100-sxm5-80gb"]},
                   mode="fixed", parallel=par)
    assert list(df.status) == ["ok"] * 3
    tps = df.tokens_per_s_per_gpu.to_numpy()
    assert tps[0] <= tps[1] <= tps[2]

    model = pm.load_model("llama3-70b")
    job = pm.JobSpec(global_batch=288, seq_len=8192, framework="megatron-bridge")
    gb200 = pm.ClusterSpec.build(pm.load_gpu("gb200"), 144)
    assert not gb200.gpus_per_node_stated and gb200.gpus_per_node == 4
    b200 = pm.ClusterSpec.build(pm.load_gpu("b200"), 144)
    swapped = pm.whatif(model, gb200, job, {"gpu": ["b200"]})
    latency = load_calibration(None).for_network(gb200.gpu, None)[1].scale_out_latency_us
    direct = pm.search(model, b200.model_copy(update={"scale_out_latency_us": latency,
                                                      "scale_out_latency_stated": True}), job, top=1)
    assert swapped.tokens_per_s_per_gpu.iloc[0] == pytest.approx(direct.tokens_per_s_per_gpu.iloc[0], rel=1e-9)
    stated = pm.whatif(model, pm.ClusterSpec.build(pm.load_gpu("gb200"), 144, 4), job, {"gpu": ["b200"]})
    assert stated.tokens_per_s_per_gpu.iloc[0] != swapped.tokens_per_s_per_gpu.iloc[0]  # 4-GPU nodes kept


def test_whatif_names_the_cp_kind_and_takes_the_layout_options_of_estimate(tmp_path):
    """Best mode's winner is named fully (its CP kind); fixed mode accepts --cp-kind / --zeropp /
    --offload-fraction, so it can cost what best mode found; a value listed twice is bad input."""
    import json

    from typer.testing import CliRunner

    from perfmodel.cli import app
    from perfmodel.report.figures import layout_label as _layout

    base = ["whatif", "--model", "llama3-70b", "--gpu", "h100-sxm5-80gb", "--gpus", "512", "--seq-len", "8192",
            "--global-batch", "512", "--vary", "gpus=512", "--json"]
    best = json.loads(CliRunner().invoke(app, base).stdout)["points"][0]
    assert best["cp"] > 1 and best["cp_kind"] in ("ring", "ulysses")
    fixed = ["--mode", "fixed", *[a for k in ("tp", "pp", "cp", "vpp") for a in (f"--{k}", str(best[k]))],
             "--micro-batch", str(best["micro_batch"]), "--zero-stage", str(best["zero_stage"]),
             "--cp-kind", best["cp_kind"], "--recompute", best["recompute"]]
    again = json.loads(CliRunner().invoke(app, base + fixed).stdout)["points"][0]
    assert again["tokens_per_s_per_gpu"] == pytest.approx(best["tokens_per_s_per_gpu"], rel=1e-12)
    assert _layout(dict(tp=2, pp=4, dp=16, cp=4, cp_kind="ulysses")) == "tp2 pp4 dp16 cp4-ulysses"
    assert _layout(dict(tp=2, pp=4, dp=16, cp=4, cp_kind="ring")) == "tp2 pp4 dp16 cp4-ring"
    r = CliRunner().invoke(app, base[:-3] + ["--vary", "gpus=512,512"])
    assert r.exit_code == 2 and "vary.gpus: lists 512 more than once" in r.stderr


def test_numeric_sweeps_are_drawn_in_x_order():
    import perfmodel as pm
    from perfmodel.report.plots_whatif import whatif_figure

    df = pm.whatif(pm.load_model("llama3-8b"), pm.ClusterSpec.build(pm.load_gpu("h100-sxm5-80gb"), 64, 8),
                   pm.JobSpec(global_batch=256, seq_len=4096), {"gpus": [64, 8, 32, 16]})
    line = whatif_figure(df).axes[0].get_lines()[0]
    assert list(line.get_xdata()) == [8.0, 16.0, 32.0, 64.0]


def test_a_gpu_count_sweep_from_a_small_job_takes_the_gpus_node_size():
    """A job of 4 GPUs sits on a 4-GPU slice of an 8-GPU node (build_cluster); swept to 64 GPUs, nodes
    left to the default are whole 8-GPU nodes again, as a 64-GPU job states them; a stated size stays."""
    from perfmodel.cli import build_cluster

    job = pm.JobSpec(global_batch=256, seq_len=4096)
    par = pm.ParallelSpec(tp=2, pp=1, zero_stage=1)
    small = pm.whatif("llama3-8b", build_cluster("h100-sxm5-80gb", 4, None, None, None), job, {"gpus": [64]},
                      mode="fixed", parallel=par)
    big = pm.whatif("llama3-8b", build_cluster("h100-sxm5-80gb", 64, None, None, None), job, {"gpus": [64]},
                    mode="fixed", parallel=par)
    assert small.tokens_per_s_per_gpu.iloc[0] == big.tokens_per_s_per_gpu.iloc[0]
    stated = pm.whatif("llama3-8b", build_cluster("h100-sxm5-80gb", 4, 4, None, None), job, {"gpus": [64]},
                       mode="fixed", parallel=par)
    assert stated.tokens_per_s_per_gpu.iloc[0] != big.tokens_per_s_per_gpu.iloc[0]
    assert build_cluster("h100-sxm5-80gb", 4, None, None, None).resized(64).gpus_per_node == 8


def test_whatif_figure_names_the_job_and_marks_points_without_a_configuration():
    """The figure named neither the model, the GPU count nor the fixed configuration, left the points with no
    configuration out without a mark, and printed MFU bar labels without their '%'."""
    df = pm.whatif(MODEL, CLUSTER, JOB, {"gpus": [1, 16, 32]}, mode="fixed", parallel=PAR)
    assert (df["status"] != "ok").sum() >= 1
    fig = whatif_figure(df, context="llama3-8b on 64 x h100; fixed: tp2 pp2")
    assert fig._suptitle.get_text().endswith("\nllama3-8b on 64 x h100; fixed: tp2 pp2")
    assert "crosses on the axis" in fig._suptitle.get_text()
    crosses = [ln for ln in fig.axes[0].get_lines() if ln.get_marker() == "x" and len(ln.get_xdata())]
    assert len(crosses) == 1 and list(crosses[0].get_xdata()) == list(df.loc[df.status != "ok", "gpus"].astype(float))
    bars = whatif_figure(pm.whatif(MODEL, CLUSTER, JOB, {"gpu": ["h100-sxm5-80gb", "a100-sxm4-80gb"]}))
    assert all(t.get_text().endswith("%") for t in bars.axes[1].texts)


def test_whatif_command_png_title_names_the_fixed_configuration(tmp_path):
    args = ["whatif", "--model", "llama3-8b", "--gpu", "h100-sxm5-80gb", "--gpus", "64", "--global-batch", "128",
            "--seq-len", "4096", "--vary", "scale_out_gbit_per_s=800,3200", "--mode", "fixed", "--tp", "2",
            "--pp", "2", "--recompute", "selective", "--out", str(tmp_path)]
    from unittest import mock

    import perfmodel.report.plots_whatif as plots

    seen = {}
    real = plots.whatif_figure

    def spy(df, sweep=None, context=None):
        seen["context"] = context
        return real(df, sweep, context)

    with mock.patch.object(plots, "whatif_figure", spy):
        res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert seen["context"] == ("llama3-8b on 64 x h100-sxm5-80gb, seq len 4,096, global batch 128, megatron-lm; "
                               "fixed: tp2 pp2 mb1 zero1 recompute selective")


def test_a_long_sweep_labels_a_readable_subset():
    """40 GPU counts x 20 bandwidths (reviewer's scale audit: 40 overprinted tick labels and a 20-entry
    legend over the lines): at most MOST_LABELS tick labels, evenly spaced where they are drawn (log2 axis),
    the first and last among them; at most MOST_LABELS series named, in a colour per bandwidth."""
    import numpy as np

    from perfmodel.report.plots_whatif import MOST_LABELS, thinned

    gpus = [64 * i for i in range(1, 41)]
    bands = [100 * i for i in range(1, 21)]
    df = pm.whatif(MODEL, CLUSTER, pm.JobSpec(global_batch=2560, seq_len=4096),
                   {"gpus": gpus, "scale_out_gbit_per_s": bands}, mode="fixed",
                   parallel=pm.ParallelSpec(tp=8, micro_batch=1))
    fig = whatif_figure(df)
    tput = fig.axes[0]
    ticks = [t.get_text() for t in tput.get_xticklabels()]
    assert len(ticks) <= MOST_LABELS and ticks[0] == "64" and ticks[-1] == "2,560"
    legend = [t.get_text() for t in fig.legends[0].get_texts()]  # one legend below both panels
    named = [t for t in legend if t.replace(",", "").isdigit()]
    assert len(named) <= MOST_LABELS and {"100", "2,000"} <= set(named)
    assert "of 20 series named" in fig.legends[0].get_title().get_text()
    colours = {tuple(line.get_color()) if not isinstance(line.get_color(), str) else line.get_color()
               for line in tput.get_lines() if line.get_label() in {f"{b:,}" for b in bands}}
    assert len(colours) == len(bands)
    # log-spaced where drawn: the labelled ticks' log2 gaps are even, not crowded at the right end
    shown = np.log2(tput.get_xticks())
    assert tput.get_xscale() == "log"
    assert np.diff(shown).min() > 0.5 * (shown[-1] - shown[0]) / (MOST_LABELS - 1)
    just_over = thinned(MOST_LABELS + 1)
    assert just_over[0] == 0 and just_over[-1] == MOST_LABELS and len(just_over) == MOST_LABELS


def test_named_categories_are_all_labelled_and_coloured_apart():
    """Every catalog GPU (14, more than MOST_LABELS and than the 10-colour cycle) keeps its name on its bars
    and in the legend, each in its own colour (reviewer: 6 of 14 bars unlabelled, two GPUs in one colour)."""
    from perfmodel.catalog import gpu_names
    from perfmodel.report.plots_whatif import MOST_LABELS

    names = gpu_names()
    assert len(names) > MOST_LABELS
    rows = [{"gpu": g, "gpus": n, "status": "ok", "tokens_per_s_per_gpu": 1000.0 + i, "mfu": 0.4}
            for i, g in enumerate(names) for n in (8, 16)]
    df = pd.DataFrame(rows)
    ax = whatif_figure(df, sweep=["gpu"]).axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == names
    fig = whatif_figure(df, sweep=["gpus", "gpu"])
    ax, legend = fig.axes[0], fig.legends[0]
    assert [t.get_text() for t in legend.get_texts()] == names
    assert len({tuple(line.get_color()) for line in ax.get_lines()}) == len(names)


def test_series_that_round_alike_keep_their_own_names():
    """Bandwidths 100.0, 100.2, ... formatted as '100' each were both mislabelled and miscounted."""
    bands = [100.0 + 0.2 * i for i in range(14)]
    rows = [{"gpus": n, "scale_out_gbit_per_s": b, "status": "ok", "tokens_per_s_per_gpu": 1000.0 + b, "mfu": 0.4}
            for b in bands for n in (8, 16)]
    legend = whatif_figure(pd.DataFrame(rows), sweep=["gpus", "scale_out_gbit_per_s"]).legends[0]
    texts = [t.get_text() for t in legend.get_texts()]
    assert len(texts) == len(set(texts)) and "100.2" in texts and texts[0] == "100"
    assert f"({len(texts)} of 14 series named)" in legend.get_title().get_text()


def test_whatif_crosses_of_two_series_at_one_x_stay_apart_and_empty_series_are_said():
    """Two series without a configuration at the same x drew one grey cross over the other, and a series with
    none at all kept a legend line as if drawn (report audit 2026-12-01): each series' crosses now sit on a row
    of their own in its colour, and its legend entry says none is feasible."""
    df = pm.whatif(MODEL, CLUSTER, JOB, {"seq_len": [4096, 8192], "gpus": [1, 3, 64]})
    fig = whatif_figure(df)
    crosses = [ln for ln in fig.axes[0].get_lines() if ln.get_marker() == "x" and len(ln.get_xdata())]
    assert len(crosses) >= 2
    assert len({tuple(ln.get_ydata()) for ln in crosses}) == len(crosses)  # one row each
    assert len({ln.get_color() for ln in crosses}) == len(crosses)  # each in its series' colour
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "1 (none feasible)" in labels and "64" in labels


def test_tick_labels_are_spaced_on_the_axis():
    """Close values on a log axis printed over each other ('640768'): the labels kept clear each other."""
    from perfmodel.report.plots_whatif import label_inches, spaced

    values = np.array([64, 96, 128, 192, 256, 320, 384, 448, 512, 640, 768, 1024, 1280, 1536, 2048], float)
    labels = [f"{v:,.0f}" for v in values]
    keep = spaced(np.log2(values), labels, axis_inches=5.0)
    assert keep[0] == 0 and keep[-1] == len(values) - 1 and len(keep) < len(values)
    at = (np.log2(values) - np.log2(values[0])) / (np.log2(values[-1]) - np.log2(values[0])) * 5.0
    for a, b in zip(keep, keep[1:]):
        assert at[b] - at[a] >= (label_inches(labels[a], 10) + label_inches(labels[b], 10)) / 2


@pytest.mark.parametrize("n_gpus_types,layouts_shown", [(2, True), (4, False)])
def test_bar_layout_labels_only_where_a_bar_holds_them(n_gpus_types, layouts_shown):
    """Eight bars or fewer got their layout under the number however narrow they were, and neighbours
    overprinted ('dp512tp1'): a layout is drawn only where the bar is as wide as its label."""
    gpus = ["h100-sxm5-80gb", "h200-sxm-141gb", "b200", "a100-sxm4-80gb"][:n_gpus_types]
    rows = [{"gpu": g, "gpus": n, "status": "ok", "tokens_per_s_per_gpu": 1000.0, "mfu": 0.4, "tp": 2, "pp": 4,
             "dp": 16, "cp": 4, "cp_kind": "ulysses"} for g in gpus for n in ((8,) if n_gpus_types == 2 else (8, 16))]
    df = pd.DataFrame(rows)
    df.attrs["mode"] = "best"
    fig = whatif_figure(df, sweep=["gpu", "gpus"] if n_gpus_types == 4 else ["gpu"])
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert texts and all(("tp2 pp4 dp16 cp4-ulysses" in t) is layouts_shown for t in texts)


def test_two_gpu_profiles_of_one_name_are_told_apart(tmp_path):
    """An edited copy of a catalog GPU file beside the catalog's: both rows read 'h100-sxm5-80gb' before."""
    from perfmodel.catalog import PROFILES_DIR

    text = (PROFILES_DIR / "h100-sxm5-80gb.yaml").read_text()
    assert "hbm_bandwidth_gb_per_s: 3350.0" in text
    edited = tmp_path / "h100_slow_hbm.yaml"
    edited.write_text(text.replace("hbm_bandwidth_gb_per_s: 3350.0", "hbm_bandwidth_gb_per_s: 1675"))
    df = pm.whatif(MODEL, CLUSTER, JOB, {"gpu": ["h100-sxm5-80gb", str(edited), "h200-sxm-141gb"]},
                   mode="fixed", parallel=PAR)
    assert list(df["gpu"]) == ["h100-sxm5-80gb (h100-sxm5-80gb)", f"h100-sxm5-80gb ({edited})", "h200-sxm-141gb"]
    assert df["iteration_time_s"].iloc[1] > df["iteration_time_s"].iloc[0]
    same = pm.whatif(MODEL, CLUSTER, JOB, {"gpu": ["h100-sxm5-80gb", "h200-sxm-141gb"]}, mode="fixed", parallel=PAR)
    assert list(same["gpu"]) == ["h100-sxm5-80gb", "h200-sxm-141gb"]  # distinct names stay bare
