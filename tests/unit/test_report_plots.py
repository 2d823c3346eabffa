"""The report's plots draw what the model computed: bars sum to the totals, one colour per part
in every plot, the heatmap holds the best throughput per (tp, pp), the HTML escapes text."""
from __future__ import annotations

import numpy as np
import pytest
from matplotlib.colors import to_hex

import perfmodel as pm
from perfmodel.report import colors, html
from perfmodel.report.data import collect, default_scaling_gpus, tp_pp_heatmap
from perfmodel.report.figures import PNG_SIGNATURE, candidate_label, png_bytes
from perfmodel.report.plots_breakdown import memory_breakdown_figure, time_breakdown_figure
from perfmodel.report.plots_space import heatmap_figure, scaling_figure
from perfmodel.step import MEMORY_PARTS, TIME_PARTS


@pytest.fixture(scope="module")
def data():
    cluster = pm.ClusterSpec.build(pm.load_gpu("h100-sxm5-80gb"), n_gpus=64)
    job = pm.JobSpec(global_batch=128, seq_len=4096)
    return collect(pm.load_model("llama3-8b"), cluster, job, top=4, scaling_gpus=[16, 32, 64])


def bar_totals(ax) -> np.ndarray:
    """Per bar row, the sum of the stacked segments' widths (containers are the parts)."""
    widths = np.array([[p.get_width() for p in c.patches] for c in ax.containers])
    return widths.sum(axis=0)


def test_time_bars_sum_to_iteration_time(data):
    top = data.top_candidates
    ax = time_breakdown_figure(top).axes[0]
    drawn = [p for p in TIME_PARTS if (top[p] > 0).any()]
    # a part that is zero in every bar (e.g. no offloading) is neither drawn nor in the legend
    assert len(ax.containers) == len(drawn) < len(TIME_PARTS)
    # rows are drawn best on top: y = n-1 .. 0
    assert bar_totals(ax) == pytest.approx(top["iteration_time_s"].to_numpy(), rel=1e-9)


def test_memory_bars_sum_to_memory_and_capacity_line(data):
    top = data.top_candidates
    fig = memory_breakdown_figure(top, data.cluster.gpu.hbm_capacity_gib)
    ax = fig.axes[0]
    assert bar_totals(ax) == pytest.approx(top["memory_gib"].to_numpy(), rel=1e-9)
    capacity = [ln for ln in ax.get_lines() if "HBM" in ln.get_label()]
    assert capacity and capacity[0].get_xdata()[0] == pytest.approx(data.cluster.gpu.hbm_capacity_gib)


def test_every_part_has_its_own_colour_and_plots_use_it(data):
    assert set(colors.TIME_STYLE) >= set(TIME_PARTS), "a new time part needs a colour in report/colors.py"
    assert set(colors.MEMORY_STYLE) >= set(MEMORY_PARTS), "a new memory part needs a colour in report/colors.py"
    assert len({colors.time_color(p) for p in TIME_PARTS}) == len(TIME_PARTS)
    assert len({colors.memory_color(p) for p in MEMORY_PARTS}) == len(MEMORY_PARTS)
    ax = time_breakdown_figure(data.top_candidates).axes[0]
    drawn = [p for p in TIME_PARTS if (data.top_candidates[p] > 0).any()]
    assert [c.get_label() for c in ax.containers] == [colors.time_label(p) for p in drawn]
    for part, container in zip(drawn, ax.containers):
        assert to_hex(container.patches[0].get_facecolor()) == colors.time_color(part)
        assert container.get_label() == colors.time_label(part)


def test_unknown_part_gets_a_fallback_colour():
    assert colors.time_color("future_thing_s") in colors.FALLBACK
    assert colors.time_label("future_thing_s") == "future thing"


def test_heatmap_holds_the_best_throughput_per_tp_pp(data):
    cand = data.result.candidates
    expect = cand.groupby(["pp", "tp"])["tokens_per_s_per_gpu"].max()
    heat = tp_pp_heatmap(data.result)
    for (pp, tp), v in expect.items():
        assert heat.loc[pp, tp] == pytest.approx(v)
    assert np.nanmax(heat.to_numpy()) == pytest.approx(cand["tokens_per_s_per_gpu"].iloc[0])
    best = cand.iloc[0]
    fig = heatmap_figure(heat, int(best.tp), int(best.pp))
    ax = fig.axes[0]
    assert ax.get_xlabel().startswith("tensor-parallel") and ax.get_ylabel().startswith("pipeline-parallel")
    assert len(ax.patches) == 1  # the frame around the winner


def test_scaling_curve_points_and_axes(data):
    s = data.scaling
    assert list(s["n_gpus"]) == [16, 32, 64]
    assert (s["tokens_per_s"] == s["tokens_per_s_per_gpu"] * s["n_gpus"]).all()
    fig = scaling_figure(s, 64)
    ax = fig.axes[0]
    throughput, ideal = ax.get_lines()[:2]
    assert throughput.get_ydata() == pytest.approx(s["tokens_per_s_per_gpu"].to_numpy())
    # linear scaling is the job's own count's per-GPU rate (a flat line), not the smallest count's
    assert ideal.get_ydata() == pytest.approx([s["tokens_per_s_per_gpu"].iloc[-1]] * 2)
    assert "64 GPUs" in ideal.get_label()
    assert "GPUs" in ax.get_xlabel() and "tokens/s per GPU" in ax.get_ylabel()
    # MFU is the right-hand scale of the same curve: tokens/s per GPU x the model's FLOPs per token / peak
    mfu_axis = ax.child_axes[0]
    assert "MFU" in mfu_axis.get_ylabel()
    fig.canvas.draw()
    scale = mfu_axis.get_ylim()[1] / ax.get_ylim()[1]
    assert scale * s["tokens_per_s_per_gpu"].to_numpy() == pytest.approx(100 * s["mfu"].to_numpy())


def test_png_bytes_are_png(data):
    assert png_bytes(time_breakdown_figure(data.top_candidates)).startswith(PNG_SIGNATURE)


def test_default_scaling_counts_are_the_documented_range():
    assert default_scaling_gpus(512) == [64, 128, 256, 512, 1024]  # gpus/8 .. 2 x gpus


def test_candidate_label_names_the_layout():
    rec = dict(tp=8, pp=4, dp=16, cp=2, vpp=5, micro_batch=1, sp=True, zero_stage=1, zeropp="", recompute="selective")
    assert candidate_label(rec, 1) == "#1 tp8 pp4 dp16 cp2-ring vpp5 mb1 sp zero1 rc-selective"
    assert "sp" not in candidate_label({**rec, "tp": 1}).split()


def test_html_escapes_every_text_path():
    evil = '<img src=x onerror="alert(1)">'
    page = html.page(evil, evil, [("a", evil, html.section("a", evil, html.kv_table([(evil, evil)]),
                                                            html.table([evil], [[evil]]), note=evil))])
    assert "<img src=x" not in page
    assert page.count("&lt;img src=x onerror=&quot;alert(1)&quot;&gt;") >= 7


def test_runs_plot_axes_read_plainly():
    """Six runs within a decade drew log axes of minor ticks only ('3x10^3' and '4x10^3' ran together) and a
    histogram counting 0.25 runs; the title gave only the pooled MAPE."""
    import pandas as pd

    from perfmodel.report.plots_runs import runs_figure

    meas = np.array([2100.0, 2500.0, 3000.0, 3500.0, 4000.0, 4400.0])
    runs = pd.DataFrame({"source": ["a"] * 5 + ["b"], "measured_tokens_per_s_per_gpu": meas,
                         "pred_tokens_per_s_per_gpu": meas * np.array([1.1, 0.9, 1.0, 1.05, 0.95, 1.5])})
    runs["error_pct"] = (runs.pred_tokens_per_s_per_gpu / runs.measured_tokens_per_s_per_gpu - 1) * 100
    fig = runs_figure(runs)
    ax, hist = fig.axes[:2]
    fig.canvas.draw()
    assert ax.get_xscale() == "linear" and "," in ax.get_xticklabels()[1].get_text()
    assert all(float(t).is_integer() for t in hist.get_yticks())
    assert "MAPE 13.3% pooled, 28.0% over 2 sources" in ax.get_title(loc="left")
    wide = runs.assign(measured_tokens_per_s_per_gpu=meas * np.geomspace(1, 100, 6),
                       pred_tokens_per_s_per_gpu=meas * np.geomspace(1, 100, 6))
    wide_ax = runs_figure(wide.assign(error_pct=0.0)).axes[0]
    assert wide_ax.get_xscale() == "log" and wide_ax.xaxis.get_minor_formatter().__class__.__name__ == "NullFormatter"


def test_heatmap_tells_no_fit_from_no_layout():
    """'-' stood both for cells where nothing fits in memory and for cells no valid layout has (tp x pp above
    the GPU count)."""
    import pandas as pd

    heat = pd.DataFrame([[900.0, np.nan], [np.nan, np.nan]], index=[1, 2], columns=[1, 8])  # rows pp, columns tp
    heat.attrs["valid"] = [(1, 1), (1, 8), (2, 1)]  # (pp, tp) with a structurally valid configuration
    texts = {t.get_text() for t in heatmap_figure(heat).axes[0].texts}
    assert texts == {"900", "no fit", "-"}


def test_scaling_plot_without_an_mfu_draws_no_mfu_scale():
    """A NaN MFU (a GPU profile without a 16-bit peak) or a zero rate made the MFU scale's limits NaN and the
    plot raise."""
    import pandas as pd

    s = pd.DataFrame({"n_gpus": [8, 16], "tp": [1, 1], "pp": [1, 1], "dp": [8, 16], "cp": [1, 1],
                      "tokens_per_s": [0.0, 16000.0], "tokens_per_s_per_gpu": [0.0, 1000.0], "mfu": [np.nan, np.nan],
                      "status": ["ok", "ok"]})
    fig = scaling_figure(s, 8)
    assert png_bytes(fig).startswith(PNG_SIGNATURE) and not fig.axes[0].child_axes


def test_report_plots_name_their_job_and_the_scaling_band_only_where_drawn(data):
    """Each report PNG is a file of its own: it names the job (model, GPUs, sequence, batch); the scaling
    legend said 'this job: N GPUs' with no band where N lies off the curve's axis (report audit 2026-12-01)."""
    from perfmodel.report.build import figures, job_context

    context = job_context(data)
    assert context.startswith("llama3-8b on 64 x h100-sxm5-80gb, seq len 4,096, global batch 128")
    for name, fig in figures(data).items():
        assert fig._suptitle is not None and fig._suptitle.get_text() == context, name
    on = scaling_figure(data.scaling, 64)
    off = scaling_figure(data.scaling, 4096)
    label = lambda fig: [t.get_text() for t in fig.legends[0].get_texts()]  # noqa: E731
    assert "this job: 64 GPUs" in label(on) and not any("this job" in t for t in label(off))
    assert "log scale" in on.axes[0].get_xlabel()


def test_runs_plot_title_counts_one_run_and_stays_in_its_panel():
    import pandas as pd

    from perfmodel.report.plots_runs import runs_figure

    one = pd.DataFrame({"source": ["a"], "measured_tokens_per_s_per_gpu": [1000.0],
                        "pred_tokens_per_s_per_gpu": [1100.0], "error_pct": [10.0]})
    fig = runs_figure(one)
    title = fig.axes[0].get_title(loc="left")
    assert title.startswith("1 run: ") and "\n" in title  # two lines: one ran into the next panel's title
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    left = fig.axes[0]._left_title
    right = fig.axes[1]._left_title
    assert left.get_window_extent(renderer).x1 < right.get_window_extent(renderer).x0
