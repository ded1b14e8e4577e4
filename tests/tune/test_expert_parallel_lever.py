"""`fsdpspec tune` varies the expert-parallel degree of a Mixture of Experts (issue 44):
DeepSeek-V3 (its public config.json) on 256 H100-80GB fits under FSDP alone on no
number of GPUs, and tune's winner is an expert-parallel one whose `--set` lines
validate and plan as fitting. A dense model is offered no expert-parallel degree."""

from __future__ import annotations

import json

from conftest import ROOT, run_cli

DEEPSEEK_V3 = ROOT / "tests" / "plan" / "specs" / "deepseek-v3-256-h100.yaml"
EXPERTS, WORLD = 256, 256  # n_routed_experts of tests/models/deepseek-v3; 32 nodes × 8
DENSE = ROOT / "examples" / "llama3-8b-h100.yaml"
EP = "parallelism.expert_parallel"


def _degree(overrides: list[str]) -> int:
    return next((int(o.split("=")[1]) for o in overrides if o.startswith(f"{EP}=")), 1)


def test_a_moe_that_fits_only_with_expert_parallelism_gets_an_ep_winner() -> None:
    result = run_cli("tune", str(DEEPSEEK_V3), "--format", "json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert EP in data["open_levers"]
    candidates = data["candidates"]
    degrees = [_degree(c["overrides"]) for c in candidates]
    # Every degree tune offers splits the experts whole and divides the world; none fits
    # without expert parallelism.
    assert degrees and all(EXPERTS % d == 0 and WORLD % d == 0 and d > 1 for d in degrees)
    winner = candidates[0]["overrides"]
    assert winner == [f"{EP}=8"]  # one node's NVLink: the larger degrees cross nodes
    sets = [a for o in winner for a in ("--set", o)]
    validated = run_cli("validate", str(DEEPSEEK_V3), *sets)
    assert validated.returncode == 0, validated.stdout + validated.stderr
    planned = run_cli("plan", str(DEEPSEEK_V3), *sets)
    assert planned.returncode == 0 and "device: fits: " in planned.stdout, planned.stdout


def test_the_spec_s_own_degree_is_kept_when_it_writes_one() -> None:
    """What a spec writes, it decided: a spec at expert_parallel 8 varies the rest."""
    result = run_cli("tune", str(DEEPSEEK_V3), "--set", f"{EP}=8", "--format", "json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert EP not in data["open_levers"]
    assert data["candidates"][0]["overrides"] == []


def test_a_dense_model_is_offered_no_expert_parallel_degree() -> None:
    """The lever applies to a model with experts only, so a dense job's search is as
    large as before, with `--vary all` too."""
    for args in ([], ["--vary", "all"]):
        result = run_cli("tune", str(DENSE), *args, "--format", "json")
        assert result.returncode == 0, result.stderr
        data = json.loads(result.stdout)
        assert EP not in data["open_levers"], args
        assert all(_degree(c["overrides"]) == 1 for c in data["candidates"])
