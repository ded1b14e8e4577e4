"""float8 as a tune lever: searched when `--vary float8` names it, on GPUs with FP8
tensor cores only, and written as `--set` lines that validate."""

from __future__ import annotations

import json

from conftest import ROOT, run_cli

EXAMPLE = ROOT / "examples" / "llama3-8b-h100.yaml"


def _tune(*args: str) -> dict:
    result = run_cli("tune", str(EXAMPLE), "--format", "json", *args)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_float8_is_searched_when_named_and_wins_on_h100() -> None:
    data = _tune("--vary", "float8")
    assert data["open_levers"] == ["float8"] and data["tried"] == 2
    best, written = data["candidates"]
    assert best["overrides"] == ["float8.recipe=tensorwise"] and written["overrides"] == []
    assert best["tokens_per_s_per_device"] > 1.2 * written["tokens_per_s_per_device"]
    assert "float8" not in _tune()["open_levers"]  # it changes the numerics: opt-in


def test_float8_is_not_tried_without_fp8_tensor_cores() -> None:
    data = _tune("--vary", "float8", "--accelerator", "A100-80GB")
    assert data["tried"] == 1
    assert all(c["overrides"] == [] for c in data["candidates"])
