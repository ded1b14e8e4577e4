"""The HTML page around the charts: one file, every style inline, no script, no link
that leaves the page — readable offline on a cluster login node."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

_STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 24px; color: #222; background: #fff; }
h1 { font-size: 20px; margin: 0 0 4px; } h2 { font-size: 16px; margin: 24px 0 8px; }
.status { display: inline-block; padding: 2px 8px; border-radius: 4px; color: #fff; }
.status.ok { background: #2e7d32; } .status.running { background: #1565c0; }
.status.bad { background: #c62828; } .status.other { background: #757575; }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: 2px 16px; }
dl.facts dt { color: #666; } dl.facts dd { margin: 0; }
.charts { display: grid; grid-template-columns: repeat(auto-fill, minmax(560px, 1fr));
          gap: 16px; }
figure.chart { margin: 0; border: 1px solid #ddd; border-radius: 6px; padding: 8px; }
figure.chart figcaption { font-weight: 600; margin-bottom: 4px; }
figure.chart svg { width: 100%; height: auto; }
table { border-collapse: collapse; } td, th { border: 1px solid #ddd; padding: 4px 8px; }
th { background: #f5f5f5; text-align: left; } td.num { text-align: right; }
p.note { color: #666; }
"""


def chart(name: str, title: str, svg: str) -> str:
    """One chart as a figure element; ``name`` is its data-chart attribute."""
    return (f'<figure class="chart" data-chart="{escape(name)}">'
            f"<figcaption>{escape(title)}</figcaption>{svg}</figure>")


def facts(pairs: Sequence[tuple[str, str]]) -> str:
    """A definition list of key facts."""
    rows = "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in pairs)
    return f'<dl class="facts">{rows}</dl>'


def table(header: Sequence[str], rows: Sequence[Sequence[str]], numeric: set[int]) -> str:
    """A table; the columns in ``numeric`` are right-aligned."""
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(
            f'<td{" class=num" if i in numeric else ""}>{escape(cell)}</td>'
            for i, cell in enumerate(row)) + "</tr>"
        for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def document(title: str, body: str) -> str:
    """A complete page. The Content-Security-Policy forbids any fetch, so a page that
    tried one would show it as a blocked request rather than leak it."""
    return (
        "<!DOCTYPE html>\n<html lang=en><head><meta charset=utf-8>"
        "<meta http-equiv=Content-Security-Policy content=\"default-src 'none'; "
        "style-src 'unsafe-inline'; img-src data:\">"
        f"<title>{escape(title)}</title><style>{_STYLE}</style></head>"
        f"<body>{body}</body></html>\n"
    )
