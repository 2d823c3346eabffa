"""The report as one self-contained HTML page: inline CSS, plots as base64 PNG ``data:`` URIs,
no script and no external load, so it opens anywhere without a network. Every piece of text
that comes from the user or from files (model names, paths, sources) goes through
``html.escape``; only this module writes markup."""
from __future__ import annotations

import base64
import html
from typing import Iterable, Sequence

CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;margin:0 auto;max-width:1250px;
padding:24px 32px;color:#222;line-height:1.4}
h1{font-size:1.6em;margin-bottom:.2em} h2{font-size:1.25em;border-bottom:2px solid #4e79a7;padding-bottom:4px;
margin-top:2em} .sub{color:#666;margin-top:0} nav a{margin-right:14px;color:#4e79a7}
table{border-collapse:collapse;font-size:.9em;margin:.6em 0} th,td{padding:4px 10px;border-bottom:1px solid #ddd;
text-align:right} th{background:#f3f5f8} td.l,th.l{text-align:left} .kv td:first-child{color:#555;text-align:left}
.kv td{text-align:left} .grid{display:grid;grid-template-columns:repeat(auto-fit,minmax(360px,1fr));gap:18px}
.grid h3{font-size:1em;margin:.4em 0} img{max-width:100%;height:auto;border:1px solid #eee}
.note{color:#555;font-size:.9em} tr.best td{font-weight:600;background:#eef4fb}
"""

Rows = Sequence[tuple[str, str]]


def esc(value) -> str:
    return html.escape(str(value), quote=True)


def kv_table(rows: Rows) -> str:
    body = "".join(f"<tr><td>{esc(k)}</td><td>{esc(v)}</td></tr>" for k, v in rows)
    return f'<table class="kv">{body}</table>'


def table(header: Sequence[str], rows: Iterable[Sequence], left: int = 0, highlight_first: bool = False) -> str:
    """A plain table; the first ``left`` columns are left-aligned (text)."""
    def cells(row, tag):
        return "".join(f'<{tag}{" class=l" if i < left else ""}>{esc(c)}</{tag}>' for i, c in enumerate(row))

    head = f"<tr>{cells(header, 'th')}</tr>"
    body = "".join(
        f'<tr{" class=best" if highlight_first and i == 0 else ""}>{cells(r, "td")}</tr>' for i, r in enumerate(rows)
    )
    return f"<table>{head}{body}</table>"


def image(png: bytes, alt: str) -> str:
    data = base64.b64encode(png).decode("ascii")
    return f'<img src="data:image/png;base64,{data}" alt="{esc(alt)}">'


def section(anchor: str, title: str, *parts: str, note: str | None = None) -> str:
    """A section; ``parts`` are markup made by this module's functions (already escaped)."""
    text = f'<p class="note">{esc(note)}</p>' if note else ""
    return f'<section id="{esc(anchor)}"><h2>{esc(title)}</h2>{text}{"".join(parts)}</section>'


def grid(items: Sequence[tuple[str, str]]) -> str:
    """Side-by-side blocks: (heading, markup)."""
    return '<div class="grid">' + "".join(f"<div><h3>{esc(h)}</h3>{m}</div>" for h, m in items) + "</div>"


def paragraph(text: str) -> str:
    return f"<p>{esc(text)}</p>"


#: in every page's head: how a later report knows the folder holds one of ours (build.write_report)
GENERATOR_META = '<meta name="generator" content="perfmodel report">'


def page(title: str, subtitle: str, sections: Sequence[tuple[str, str, str]]) -> str:
    """The whole document; ``sections`` are (anchor, nav label, markup from ``section``)."""
    nav = " ".join(f'<a href="#{esc(a)}">{esc(label)}</a>' for a, label, _ in sections)
    body = "\n".join(markup for _, _, markup in sections)
    return (
        f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">{GENERATOR_META}"
        f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>{esc(title)}</title>"
        f"<style>{CSS}</style></head><body><h1>{esc(title)}</h1><p class=\"sub\">{esc(subtitle)}</p>"
        f"<nav>{nav}</nav>\n{body}\n</body></html>\n"
    )
