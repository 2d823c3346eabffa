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
    assert len(ax.containers) == len(TIME_PARTS)
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
    for part, container in zip(TIME_PARTS, ax.containers):
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
    throughput = ax.get_lines()[0]
    assert throughput.get_ydata() == pytest.approx(s["tokens_per_s"].to_numpy() / 1e6)
    assert "GPUs" in ax.get_xlabel() and "tokens/s" in ax.get_ylabel()
    assert "MFU" in fig.axes[1].get_ylabel()


def test_png_bytes_are_png(data):
    assert png_bytes(time_breakdown_figure(data.top_candidates)).startswith(PNG_SIGNATURE)


def test_default_scaling_counts_are_the_documented_range():
    assert default_scaling_gpus(512) == [64, 128, 256, 512, 1024]  # gpus/8 .. 2 x gpus


def test_candidate_label_names_the_layout():
    rec = dict(tp=8, pp=4, dp=16, cp=2, vpp=5, micro_batch=1, sp=True, zero_stage=1, zeropp="", recompute="selective")
    assert candidate_label(rec, 1) == "#1 tp8 pp4 dp16 cp2 vpp5 mb1 sp zero1 rc-selective"
    assert "sp" not in candidate_label({**rec, "tp": 1}).split()


def test_html_escapes_every_text_path():
    evil = '<img src=x onerror="alert(1)">'
    page = html.page(evil, evil, [("a", evil, html.section("a", evil, html.kv_table([(evil, evil)]),
                                                            html.table([evil], [[evil]]), note=evil))])
    assert "<img src=x" not in page
    assert page.count("&lt;img src=x onerror=&quot;alert(1)&quot;&gt;") >= 7
