"""matplotlib figures rendered off-screen (Agg) to inline SVG or PNG bytes.

Every artist that draws data gets an SVG id starting ``data-``, so a page can be checked
for charts that drew nothing."""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

PALETTE = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3",
           "#8c8c8c", "#ccb974", "#64b5cd", "#1f3a5f", "#a0522d", "#2e8b57", "#b8860b")


class ChartsUnavailable(RuntimeError):
    """matplotlib is not installed; the message says how to get it."""


def pyplot() -> Any:
    """matplotlib's pyplot on the Agg backend, set up for small, text-searchable SVG."""
    try:
        import matplotlib
    except ImportError:
        raise ChartsUnavailable(
            "charts need matplotlib: pip install 'fsdpspec[report]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({
        "svg.fonttype": "none",  # text stays text: smaller, and searchable in the page
        "svg.hashsalt": "fsdpspec",  # stable ids, so the same input draws the same file
        "font.size": 9, "axes.spines.top": False, "axes.spines.right": False,
        "axes.grid": True, "grid.alpha": 0.3,
    })
    return plt


def figure(width: float = 6.0, height: float = 3.0) -> tuple[Any, Any]:
    """A new figure with one axes."""
    return pyplot().subplots(figsize=(width, height), layout="constrained")


def mark_data(artists: Sequence[Any], name: str) -> None:
    """Give each data artist an id ``data-<name>-<i>`` in the SVG."""
    for index, artist in enumerate(artists):
        artist.set_gid(f"data-{name}-{index}")


def svg_text(fig: Any) -> str:
    """The figure as an SVG element (no XML prolog or doctype), for inlining."""
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", metadata={"Date": None})
    pyplot().close(fig)
    text = buffer.getvalue()
    return text[text.index("<svg"):]


def png_bytes(fig: Any, dpi: int = 120) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    pyplot().close(fig)
    return buffer.getvalue()
