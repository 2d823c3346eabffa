"""`perfmodel report` end to end on the three scenarios of the issue, plus escaping and bad input.

Kept fast: --top 3 and a two-point scaling curve per scenario."""
from __future__ import annotations

import base64
import re
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from perfmodel.cli import app
from perfmodel.report.build import CANDIDATES_CSV, HTML_FILE, PNG_FILES
from perfmodel.report.figures import PNG_SIGNATURE
from perfmodel.search.engine import CONTRACT_COLUMNS
from perfmodel.step import MEMORY_PARTS, TIME_PARTS

REPO = Path(__file__).resolve().parents[2]
RUNS_CSV = REPO / "calibration" / "data" / "runs" / "calibration_runs.csv"

SCENARIOS = {
    "llama3-70b-512xh100-8k": ["--model", "llama3-70b", "--gpu", "h100-sxm5-80gb", "--gpus", "512",
                               "--seq-len", "8192", "--global-batch", "512", "--scaling-gpus", "256,512"],
    "gpt3-175b-1024xa100": ["--model", "gpt3-175b", "--gpu", "a100-sxm4-80gb", "--gpus", "1024",
                            "--seq-len", "2048", "--global-batch", "1536", "--scaling-gpus", "512,1024"],
    "llama3.1-405b-16384xh100-8k": ["--model", "llama3.1-405b", "--gpu", "h100-sxm5-80gb", "--gpus", "16384",
                                    "--seq-len", "8192", "--global-batch", "2048", "--scaling-gpus", "8192,16384"],
}
SECTIONS = ("inputs", "top", "time", "memory", "heatmap", "scaling", "runs")


def run(args):
    return CliRunner().invoke(app, ["report", *args])


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    out = {}
    for name, args in SCENARIOS.items():
        d = tmp_path_factory.mktemp(name.replace(".", "_"))
        res = run([*args, "--top", "3", "--out", str(d)])
        assert res.exit_code == 0, res.output
        out[name] = d
    return out


def embedded_pngs(page: str) -> list[bytes]:
    return [base64.b64decode(m) for m in re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)]


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_report_has_every_section_and_is_self_contained(reports, name):
    page = (reports[name] / HTML_FILE).read_text()
    for anchor in SECTIONS:
        assert f'<section id="{anchor}">' in page
    images = embedded_pngs(page)
    assert len(images) == 4  # time, memory, heatmap, scaling (no runs given)
    assert all(img.startswith(PNG_SIGNATURE) and len(img) > 5000 for img in images)
    # nothing is loaded from elsewhere: no scripts, stylesheets or remote sources
    assert "<script" not in page.lower() and "<link" not in page.lower()
    assert not re.search(r'(src|href)="(https?:)?//', page)
    assert "fit quality" in page  # the calibration's provenance is summarised


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_report_writes_valid_pngs_and_candidates_csv(reports, name):
    d = reports[name]
    for plot, file in PNG_FILES.items():
        path = d / file
        if plot == "runs":
            assert not path.exists()
            continue
        assert path.read_bytes().startswith(PNG_SIGNATURE)
    df = pd.read_csv(d / CANDIDATES_CSV)
    assert set(CONTRACT_COLUMNS) <= set(df.columns)
    assert set(TIME_PARTS) | set(MEMORY_PARTS) <= set(df.columns)
    assert len(df) >= 3
    tps = df["tokens_per_s_per_gpu"].to_numpy()
    assert (tps[:-1] >= tps[1:] - 1e-9).all()  # best first
    top = df.head(3)
    assert top[list(TIME_PARTS)].sum(axis=1).to_numpy() == pytest.approx(top["iteration_time_s"].to_numpy(), rel=1e-9)
    assert top[list(MEMORY_PARTS)].sum(axis=1).to_numpy() == pytest.approx(top["memory_gib"].to_numpy(), rel=1e-9)
    # the table on the page shows the same winner
    page = (d / HTML_FILE).read_text()
    assert f"{df['tokens_per_s_per_gpu'].iloc[0]:,.0f}" in page
    scaling = pd.read_csv(d / "scaling.csv")
    assert sorted(scaling["n_gpus"]) == [int(v) for v in SCENARIOS[name][-1].split(",")]


def test_report_with_runs_adds_predicted_vs_measured(tmp_path):
    runs = tmp_path / "runs & <odd> name.csv"
    runs.write_text("".join(RUNS_CSV.read_text().splitlines(keepends=True)[:41]))
    res = run(SCENARIOS["llama3-70b-512xh100-8k"][:-2] + ["--scaling-gpus", "512", "--top", "2",
                                                          "--runs", str(runs), "--out", str(tmp_path / "r")])
    assert res.exit_code == 0, res.output
    page = (tmp_path / "r" / HTML_FILE).read_text()
    assert len(embedded_pngs(page)) == 5
    assert (tmp_path / "r" / PNG_FILES["runs"]).read_bytes().startswith(PNG_SIGNATURE)
    pred = pd.read_csv(tmp_path / "r" / "runs_predicted.csv")
    assert len(pred) > 10 and {"measured_tokens_per_s_per_gpu", "pred_tokens_per_s_per_gpu", "error_pct"} <= set(pred)
    assert "runs &amp; &lt;odd&gt; name.csv" in page and "<odd>" not in page
    # the pooled MAPE (large sources weigh most) and the average of the sources' MAPEs are both named
    assert "over the runs pooled" in page and "averaged over" in page
    # how many candidates a rule rejected before costing, beside how many were costed (the rejection counts
    # are of both)
    assert "other candidates were rejected by a rule before costing" in page


def test_model_name_is_escaped(tmp_path):
    evil = "<script>alert(1)</script>"
    model = tmp_path / "evil.yaml"
    model.write_text(
        f'name: "{evil}"\nn_layers: 32\nhidden_size: 4096\nffn_hidden_size: 14336\nn_heads: 32\n'
        "n_kv_heads: 8\nvocab_size: 128256\nmlp: swiglu\ntied_embeddings: false\n"
    )
    res = run(["--model", str(model), "--gpu", "h100-sxm5-80gb", "--gpus", "16", "--seq-len", "4096",
               "--global-batch", "64", "--top", "2", "--scaling-gpus", "8,16", "--out", str(tmp_path / "r")])
    assert res.exit_code == 0, res.output
    page = (tmp_path / "r" / HTML_FILE).read_text()
    assert evil not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<script" not in page.lower()


@pytest.mark.parametrize("args, field", [
    (["--top", "0"], "top"),
    (["--scaling-gpus", "64,x"], "scaling_gpus"),
    (["--model", "no-such-model"], "model"),
])
def test_bad_input_exits_2_with_one_error_line(tmp_path, args, field):
    base = ["--model", "llama3-8b", "--gpu", "h100-sxm5-80gb", "--gpus", "8", "--global-batch", "16"]
    res = run([*base, *args, "--out", str(tmp_path / "r")])
    assert res.exit_code == 2
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert lines[-1].startswith("error:") and field in lines[-1]
    assert "Traceback" not in res.output
    assert not (tmp_path / "r" / HTML_FILE).exists()


def test_report_folder_holds_one_report_and_counts_every_run(tmp_path):
    """A report without --runs written over one with runs removes the runs plot and table; the runs
    table keeps every row with its status and reason, and the page says how many were scored."""
    runs = tmp_path / "runs.csv"
    lines = RUNS_CSV.read_text().splitlines(keepends=True)
    runs.write_text("".join(lines[:11]))
    base = ["--model", "llama3-8b", "--gpu", "h100-sxm5-80gb", "--gpus", "16", "--seq-len", "4096",
            "--global-batch", "64", "--top", "2", "--scaling-gpus", "16", "--out", str(tmp_path / "r")]
    assert run([*base, "--runs", str(runs)]).exit_code == 0
    assert (tmp_path / "r" / "runs_predicted.csv").is_file() and (tmp_path / "r" / PNG_FILES["runs"]).is_file()
    assert run(base).exit_code == 0
    assert not (tmp_path / "r" / "runs_predicted.csv").exists() and not (tmp_path / "r" / PNG_FILES["runs"]).exists()
    # a run that cannot be costed stays in the table with its reason; the page counts it
    df = pd.read_csv(runs)
    df.loc[0, "tp"] = 7  # tp must divide the heads
    df.loc[1, ["tokens_per_s_per_gpu", "iteration_time_s", "tflops_per_gpu", "mfu"]] = float("nan")
    df.to_csv(runs, index=False)
    assert run([*base, "--runs", str(runs)]).exit_code == 0
    pred = pd.read_csv(tmp_path / "r" / "runs_predicted.csv")
    assert len(pred) == 10 and int(pred["scored"].sum()) == 8
    assert pred.loc[0, "status"] == "invalid" and "tp" in pred.loc[0, "reason"]
    # (an audit: the unscored run's reason cell was empty while the page counted it)
    assert pred.loc[1, "status"] == "ok" and pred.loc[1, "reason"].startswith("not scored: no measured throughput")
    assert pred.loc[pred["scored"], "reason"].isna().all()
    page = (tmp_path / "r" / HTML_FILE).read_text()
    assert "10 runs given, 8 scored (1 invalid, 1 no measured throughput" in page
    cand = pd.read_csv(tmp_path / "r" / CANDIDATES_CSV)
    assert cand["rank"].iloc[0] == 1  # as on the page
    assert "time_to_train_s" not in cand  # objective columns this search did not compute


def test_report_removes_only_an_earlier_reports_files(tmp_path):
    """An audit: a folder without any report, holding the user's own predicted_vs_measured.png and
    runs_predicted.csv, lost both to a report without --runs; only a folder whose report.html perfmodel wrote
    has its runs files removed."""
    base = ["--model", "llama3-8b", "--gpu", "h100-sxm5-80gb", "--gpus", "16", "--seq-len", "4096",
            "--global-batch", "64", "--top", "2", "--scaling-gpus", "16", "--out", str(tmp_path / "r")]
    (tmp_path / "r").mkdir()
    mine = {PNG_FILES["runs"]: b"mine", "runs_predicted.csv": b"mine,1\n"}
    for name, content in mine.items():
        (tmp_path / "r" / name).write_bytes(content)
    assert run(base).exit_code == 0
    assert all((tmp_path / "r" / name).read_bytes() == content for name, content in mine.items())
    assert run(base).exit_code == 0  # over a report of ours that did not write them either: still kept
    assert all((tmp_path / "r" / name).read_bytes() == content for name, content in mine.items())
    runs = tmp_path / "runs.csv"
    runs.write_text("".join(RUNS_CSV.read_text().splitlines(keepends=True)[:6]))
    assert run([*base, "--runs", str(runs)]).exit_code == 0  # writes them (over the user's: same names)
    assert run(base).exit_code == 0  # and the next report without runs removes what its predecessor wrote
    assert not any((tmp_path / "r" / name).exists() for name in mine)


def test_report_names_the_file_it_cannot_write(tmp_path):
    (tmp_path / "r" / CANDIDATES_CSV).mkdir(parents=True)
    res = run(["--model", "llama3-8b", "--gpu", "h100-sxm5-80gb", "--gpus", "16", "--seq-len", "4096",
               "--global-batch", "64", "--top", "2", "--scaling-gpus", "16", "--out", str(tmp_path / "r")])
    assert res.exit_code == 2
    assert res.stderr.strip().startswith(f"error: {tmp_path / 'r' / CANDIDATES_CSV}: out:")
    assert sorted(p.name for p in (tmp_path / "r").iterdir()) == [CANDIDATES_CSV]  # nothing half-written


def test_calibration_box_tells_its_own_fit_from_its_base_profiles(tmp_path):
    from perfmodel.calibration_profile import load_calibration
    from perfmodel.report.inputs import calibration_rows

    shipped = dict(calibration_rows(load_calibration(None), "default"))
    assert "runs fit quality" in shipped
    own = load_calibration(None).model_copy(update={"provenance": {
        **load_calibration(None).provenance,
        "inputs": [{"kind": "nccl-tests", "path": "a.txt", "points": 5, "median_abs_err_pct_ge_1MiB": 0.13}]}})
    rows = dict(calibration_rows(own, "mine.yaml"))
    assert rows["collectives fit quality"].startswith("1 nccl-tests file, median |error| 0.13%")
    assert "runs fit quality (of the base profile, before this calibration)" in rows
    assert "runs fit quality" not in rows


def test_report_with_nothing_feasible_says_why(tmp_path):
    """It said only 'no feasible configuration ...: nothing to report'; recommend says what the smallest
    configuration needs, and so does report now (one line, exit 1, nothing written)."""
    res = run(["--model", "llama3.1-405b", "--gpu", "h100-sxm5-80gb", "--gpus", "8", "--global-batch", "64",
               "--out", str(tmp_path / "r")])
    assert res.exit_code == 1 and not (tmp_path / "r" / HTML_FILE).exists()
    line = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(line) == 1 and "structurally valid configurations fits in memory (the smallest needs" in line[0]
    assert "the GPU has 79.6); nothing to report" in line[0]
