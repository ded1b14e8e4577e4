"""The budget question through `fsdpspec plan`: hours, GPU-hours, cost and where scaling
stops paying, on torchtitan's Llama 3 8B job, checked against torchtitan's published
tokens/s for that job."""

from __future__ import annotations

import json

import pytest
from ruamel.yaml import YAML

from conftest import ROOT, run_cli
from fsdpspec.job.job import resolve
from fsdpspec.plan.budget import SCALING_LOSS, step_at
from fsdpspec.plan.steptime import STEP_TIME_BAND
from fsdpspec.validate import check_file

TORCHTITAN = ROOT / "examples" / "torchtitan-llama3-8b.yaml"
PUBLISHED = ROOT / "benchmarks" / "published_runs.yaml"
# The row this example reproduces (its source: torchtitan's
# benchmarks/llama3_h100_202412_torchtitan.md, Table 1, FSDP on 8 H100).
ROW = "llama3.1-8b 8xH100 selective-op"


def _published_tokens_per_s_per_gpu() -> float:
    rows = YAML(typ="safe").load(PUBLISHED.read_text())["rows"]
    return next(r for r in rows if r["name"] == ROW)["tokens_per_s"]


def _plan_json(*args: str) -> dict:
    result = run_cli("plan", str(TORCHTITAN), "--format", "json", *args)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_hours_for_a_trillion_tokens_agree_with_torchtitans_published_rate() -> None:
    data = _plan_json("--tokens", "1e12", "--price-per-gpu-hour", "2.5")
    budget = data["budget"]
    published_hours = 1e12 / (_published_tokens_per_s_per_gpu() * 8) / 3600  # 6,027 h
    assert budget["band"] == STEP_TIME_BAND
    assert abs(budget["hours"] / published_hours - 1) <= STEP_TIME_BAND
    low, high = budget["hours_range"]
    assert low <= published_hours <= high
    assert budget["gpus"] == 8 and budget["tokens_from"] == "--tokens"
    assert budget["gpu_hours"] == budget["hours"] * 8
    assert budget["cost"] == budget["gpu_hours"] * 2.5
    assert budget["cost_range"] == pytest.approx([x * 2.5 for x in budget["gpu_hours_range"]])
    scaling = data["scaling"]
    assert scaling["start_gpus"] == 8
    floor = (1 - SCALING_LOSS) * scaling["start_tokens_per_s_per_device"]
    assert scaling["holds_tokens_per_s_per_device"] >= floor
    assert scaling["past"]["tokens_per_s_per_device"] < floor


# The command docs/tune.md shows, run as written; its output lines are docs/tune.md's.
SHOWN = "plan examples/torchtitan-llama3-8b.yaml --tokens 1e12 --price-per-gpu-hour 2.5"


def test_plan_prints_hours_gpu_hours_cost_and_the_scaling_line_as_documented() -> None:
    result = run_cli(*SHOWN.split())
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    budget = next(line for line in lines if line.startswith("budget:"))
    assert budget.startswith("budget: 1.00T tokens (--tokens) on 8 GPUs at 44,960 tokens/s: ")
    assert " h (" in budget and "GPU-hours" in budget and "at 2.50 per GPU-hour" in budget
    scaling = next(line for line in lines if line.startswith("scaling:"))
    assert scaling.startswith("scaling: tokens/s per GPU stays within 10% of 8 GPUs' 5,620 up to")
    doc = (ROOT / "docs" / "tune.md").read_text()
    assert f"fsdpspec {SHOWN}\n" in doc
    assert f"\n{budget}\n{scaling}\n" in doc


def test_the_budget_defaults_to_the_specs_steps_times_its_global_batch() -> None:
    budget = _plan_json()["budget"]
    assert budget["tokens"] == 1000 * 16 * 8192  # train.max_steps × global batch × seq_len
    assert budget["tokens_from"] == "train.max_steps × global batch"
    assert budget["cost"] is None


def test_scaling_stops_at_the_last_whole_node_within_the_loss() -> None:
    data = _plan_json()["scaling"]
    job = resolve(check_file(TORCHTITAN).spec, TORCHTITAN.parent)
    device = job.spec.device()
    floor = (1 - SCALING_LOSS) * step_at(job, device, 8).tokens_per_s
    assert step_at(job, device, data["holds_to_gpus"]).tokens_per_s >= floor
    assert data["past"]["gpus"] == data["holds_to_gpus"] + 8  # bisected to one node
    assert step_at(job, device, data["past"]["gpus"]).tokens_per_s < floor


def test_a_device_without_a_peak_says_the_budget_is_unknown(tmp_path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text("apiVersion: fsdpspec/v1\nkind: TrainingJob\nmetadata: {name: job}\n"
                    "resources: {gpus_per_node: 8, accelerator: {name: mine, memory_gib: 80.0}}"
                    "\nmodel: {preset: llama3-8b}\nfsdp: {mixed_precision: bf16}\n"
                    "data: {seq_len: 2048, global_batch_size: 8}\n")
    result = run_cli("plan", str(spec), "--tokens", "1e12")
    assert result.returncode == 0, result.stderr
    assert ("budget: unknown (no predicted step: set resources.accelerator.bf16_tflops)"
            in result.stdout.splitlines())
    assert "scaling:" not in result.stdout
