"""`fsdpspec report RUN_DIR` on a real 2-process CPU run (resumed once), opened in real
headless Chromium: every chart drew data, nothing left the page."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import run_cli

# A real 2-process training run (the trained_run fixture, ~40 s on 2 cores).
pytestmark = pytest.mark.slow

def test_report_of_a_resumed_run_draws_every_chart_offline(
        trained_run: dict, view_page, tmp_path: Path) -> None:
    html = tmp_path / "report.html"
    result = run_cli("report", str(trained_run["run_dir"]), "-o", str(html))
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip() == f"wrote {html}"
    charts, outside, text = view_page(html, tmp_path / "report.png")
    assert outside == []
    names = [c["name"] for c in charts]
    assert names == ["loss", "lr", "grad_norm", "tokens_per_s", "mfu", "memory",
                     "planned-vs-measured"]
    for chart in charts:
        assert chart["points"] >= 2 and chart["width"] > 300, chart
    # The resume from step 6 is marked on every curve.
    for chart in charts[:-1]:
        assert f"data-{chart['name']}-resume-0" in chart["ids"], chart
    assert {"data-memory-planned-0-0", "data-memory-measured-0-0"} <= set(charts[-1]["ids"])
    assert "finished" in text and "12 of 12" in text and "tiny-llama" in text
    assert (tmp_path / "report.png").stat().st_size > 10_000
