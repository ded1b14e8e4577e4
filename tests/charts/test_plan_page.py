"""`fsdpspec plan --html/--svg/--png`: the plan's charts, opened in real headless Chromium
(every chart drew data, nothing left the page), and the single-chart images."""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from conftest import ROOT, run_cli

MULTINODE = ROOT / "examples" / "llama3-70b-multinode.yaml"


def test_plan_page_draws_every_chart_offline(view_page, tmp_path: Path) -> None:
    html = tmp_path / "plan.html"
    result = run_cli("plan", str(MULTINODE), "--html", "-o", str(html))
    assert result.returncode == 0, result.stderr
    assert "peak" in result.stdout  # the text plan still prints
    charts, outside, text = view_page(html, tmp_path / "plan.png")
    assert outside == []
    assert [c["name"] for c in charts] == ["device", "host", "gpus"]
    for chart in charts:
        assert chart["points"] >= 2 and chart["width"] > 300, chart
    gpus = charts[2]["ids"]
    assert "data-mark-this-0" in gpus and "data-mark-fewest-0" in gpus
    assert "fewest GPUs that fit\n32" in text or "fewest GPUs that fit\t32" in text, text
    assert "fsdp.cpu_offload=true" in text  # the ranked suggestions


def test_svg_and_png_hold_the_device_memory_chart(tmp_path: Path) -> None:
    svg, png = tmp_path / "memory.svg", tmp_path / "memory.png"
    assert run_cli("plan", str(MULTINODE), "--svg", "-o", str(svg)).returncode == 0
    assert run_cli("plan", str(MULTINODE), "--png", "-o", str(png)).returncode == 0
    ids = [e.get("id") for e in ET.parse(svg).iter() if (e.get("id") or "").startswith("data-")]
    assert len(ids) >= 5  # one bar per term at the peak
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5_000


def test_plan_without_pictures_never_loads_matplotlib() -> None:
    code = ("import sys\nfrom fsdpspec.cli.main import cli\n"
            f"try:\n    cli(['plan', {str(MULTINODE)!r}])\nexcept SystemExit:\n    pass\n"
            "print('matplotlib' in sys.modules, file=sys.stderr)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60)
    assert result.stderr.strip().splitlines()[-1] == "False", result.stderr


def test_output_without_a_picture_flag_is_a_usage_error() -> None:
    result = run_cli("plan", str(MULTINODE), "-o", "x.html")
    assert result.returncode == 2
    assert "-o/--output needs --html, --svg or --png" in result.stderr


def test_an_unwritable_output_is_one_line_and_leaves_nothing(tmp_path: Path) -> None:
    target = tmp_path / "missing" / "plan.html"
    result = run_cli("plan", str(MULTINODE), "--html", "-o", str(target))
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        f"Error: FS049 {target}: directory {target.parent} does not exist")
    assert not (tmp_path / "missing").exists()
