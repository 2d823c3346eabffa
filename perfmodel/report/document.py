"""Assemble the report page from a ``ReportData`` and its rendered plots (PNG bytes)."""
from __future__ import annotations

import datetime as dt

from perfmodel.notes import mfu_peak_text
from perfmodel.report import html as H
from perfmodel.report.data import ReportData
from perfmodel.report.figures import candidate_label
from perfmodel.report.inputs import calibration_rows, cluster_rows, job_rows, model_rows

TOP_HEADER = ("#", "tp", "pp", "dp", "cp", "vpp", "micro batch", "sp", "ZeRO", "recompute", "offload",
              "iteration (s)", "tokens/s/GPU", "MFU", "memory (GiB)")


def _top_rows(data: ReportData) -> list[tuple]:
    rows = []
    for i, r in enumerate(data.top_candidates.to_dict("records"), start=1):
        zero = f"{int(r['zero_stage'])}" + (f" + {r['zeropp']}" if r.get("zeropp") else "")
        # the CP kind where the sequence is split (ring is Megatron's default, Ulysses the all-to-all)
        cp = f"{int(r['cp'])}" + (f" ({r.get('cp_kind') or 'ring'})" if int(r["cp"]) > 1 else "")
        offload = float(r.get("offload_fraction") or 0.0)
        rows.append((i, int(r["tp"]), int(r["pp"]), int(r["dp"]), cp, int(r["vpp"]),
                     int(r["micro_batch"]), "on" if r["sp"] else "off", zero, r["recompute"],
                     f"{offload:g}" if offload > 0 else "-",
                     f"{r['iteration_time_s']:.3f}", f"{r['tokens_per_s_per_gpu']:,.0f}", f"{r['mfu']:.1%}",
                     f"{r['memory_gib']:.1f}"))
    return rows


def _scaling_rows(data: ReportData) -> list[tuple]:
    """Every GPU count of the scaling curve: its fastest configuration, or the status and reason."""
    rows = []
    for r in data.scaling.to_dict("records"):
        if r.get("status", "ok") == "ok":
            rows.append((f"{int(r['n_gpus']):,}", f"{r['tokens_per_s']:,.0f}", f"{r['tokens_per_s_per_gpu']:,.0f}",
                         f"{r['mfu']:.1%}", candidate_label(r)))
        else:
            rows.append((f"{int(r['n_gpus']):,}", "-", "-", "-", f"{r['status']}: {r['reason']}"))
    return rows


def _search_note(data: ReportData) -> str:
    from perfmodel.notes import job_notes

    res = data.result
    why = res.commonest_rejections(3)
    # the candidates a structural rule rejected before costing (the rejection counts below include them)
    n_ruled_out = sum(sum(ev.rejected.values()) for ev in res.evaluated)
    text = (f"Costed {res.n_evaluated:,} structurally valid configurations in {res.search_time_s:.2f} s "
            f"({n_ruled_out:,} other candidates were rejected by a rule before costing); {res.n_feasible:,} fit in "
            f"memory. Most rejected: {why}." if why else
            f"Searched {res.n_evaluated:,} configurations; {res.n_feasible:,} fit in memory.")
    notes = job_notes(data.job, data.cluster, data.calibration, data.model)
    return text + "".join(f" Note: {n}." if not n.endswith(".") else f" Note: {n}" for n in notes)


def _runs_section(data: ReportData, images: dict[str, bytes]) -> str:
    if data.runs is None:
        return H.section("runs", "Predicted vs measured",
                         note="No measured runs were given (perfmodel report --runs RUNS_CSV adds this section).")
    given, runs = data.runs, data.runs[data.runs["scored"]]
    ape = runs["error_pct"].abs()
    by_source = runs.assign(ape=ape).groupby("source").agg(
        runs=("ape", "size"), mape=("ape", "mean"), median_ape=("ape", "median"),
        bias=("error_pct", "median")).sort_values("runs", ascending=False)
    rows = [(src, int(r.runs), f"{r.mape:.1f}%", f"{r.median_ape:.1f}%", f"{r.bias:+.1f}%")
            for src, r in by_source.iterrows()]
    # what was not scored, by why: not costed (status), or costed without a measured throughput
    left = given[~given["scored"]]
    why = left["status"].where(left["status"] != "ok", "no measured throughput").value_counts()
    left_text = (" (" + ", ".join(f"{n:,} {w}" for w, n in why.items()) + "; reasons in runs_predicted.csv)"
                 if len(left) else "")
    stats = (f": MAPE {ape.mean():.1f}% over the runs pooled, {by_source.mape.mean():.1f}% averaged over "
             f"{len(by_source)} source{'s' * (len(by_source) != 1)} (each source's MAPE counts once), median "
             f"|error| {ape.median():.1f}%" if len(runs) else "")
    parts = [H.paragraph(f"Runs file: {data.runs_source or 'given'}; {len(given):,} run{'s' * (len(given) != 1)} given, "
                         f"{len(runs):,} scored{left_text}{stats}.")]
    if "runs" in images:
        parts.append(H.image(images["runs"], "predicted vs measured tokens/s per GPU"))
    parts.append(H.table(("source", "runs", "MAPE", "median |error|", "median error (bias)"), rows, left=1))
    return H.section("runs", "Predicted vs measured", *parts,
                     note="Each run predicted from its own configuration columns only (as perfmodel validate).")


def render(data: ReportData, images: dict[str, bytes]) -> str:
    """The HTML page. ``images`` maps plot names (time, memory, heatmap, scaling, runs) to PNGs."""
    m, c, j = data.model, data.cluster, data.job
    best = data.top_candidates.iloc[0].to_dict()
    title = f"{m.name} on {c.n_gpus:,} x {c.gpu.name}"
    subtitle = (f"seq len {j.seq_len:,}, global batch {j.global_batch:,}, {j.precision}, {j.framework}. "
                f"Best: {candidate_label(best)} at {best['tokens_per_s_per_gpu']:,.0f} tokens/s/GPU, "
                f"MFU {best['mfu']:.1%}. Generated {dt.datetime.now().strftime('%Y-%m-%d %H:%M')} by perfmodel.")
    sections = [
        ("inputs", "Inputs", H.section("inputs", "Inputs", H.grid([
            ("Model", H.kv_table(model_rows(m))), ("Cluster", H.kv_table(cluster_rows(c))),
            ("Job", H.kv_table(job_rows(j))),
            ("Calibration", H.kv_table(calibration_rows(data.calibration, data.calibration_source))),
        ]))),
        ("top", "Top configurations", H.section(
            "top", f"Top {len(data.top_candidates)} configurations",
            H.table(TOP_HEADER, _top_rows(data), highlight_first=True),
            H.paragraph(f"MFU: model FLOPs (PaLM, Chowdhery et al. 2022, App. B) per second per GPU over the "
                        f"{mfu_peak_text(c.gpu)}, whatever the training precision ({j.precision} here)."),
            note=_search_note(data))),
        ("time", "Time breakdown", H.section(
            "time", "Time breakdown", H.image(images["time"], "time breakdown per candidate"),
            note="Communication is the part not hidden behind compute; the bars sum to the iteration time.")),
        ("memory", "Memory", H.section(
            "memory", "Memory per GPU", H.image(images["memory"], "memory breakdown per candidate"),
            note=f"Against the {c.gpu.hbm_capacity_gib:g} GiB of HBM per GPU (dashed line).")),
        ("heatmap", "TP x PP", H.section(
            "heatmap", "TP x PP map", H.image(images["heatmap"], "best throughput per tp and pp"),
            note="Each cell: the fastest configuration with that tp and pp over every other axis; "
                 "the framed cell holds the winner.")),
        ("scaling", "Scaling", H.section(
            "scaling", "Scaling with GPUs", H.image(images["scaling"], "throughput and MFU vs GPU count"),
            H.table(("GPUs", "tokens/s (job)", "tokens/s/GPU", "MFU", "best configuration (or why none)"),
                    _scaling_rows(data)),
            note="Same model, job and GPU; the GPU count varies and the search reruns at each count. Every count "
                 "asked for is listed; one without a feasible configuration says why.")),
    ]
    sections.append(("runs", "Measured runs", _runs_section(data, images)))
    return H.page(title, subtitle, sections)

