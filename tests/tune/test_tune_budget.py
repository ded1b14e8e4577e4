"""`fsdpspec tune --tokens N --max-gpus M`: the fastest way to train a token budget on at
most M GPUs, which may be fewer GPUs when the step stops scaling; its winner validates."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from conftest import ROOT, run_cli
from fsdpspec.cli.main import cli

TORCHTITAN = ROOT / "examples" / "torchtitan-llama3-8b.yaml"
# The same job on PCIe L40S at seq 2048 and micro-batch 1 (full checkpointing to fit),
# offload off: communication-bound, so tokens/s per GPU falls fast past a few nodes.
# (With offload open, its rate per GPU rises with the count: a smaller shard to copy.)
ON_L40S = ("--set", "resources.accelerator=L40S", "--set", "data.seq_len=2048",
           "--set", "data.micro_batch_size=1", "--set", "fsdp.activation_checkpointing=full",
           "--set", "fsdp.cpu_offload=false")


def invoke(*args: str) -> dict:
    result = CliRunner().invoke(cli, [*args, "--format", "json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_a_trillion_tokens_on_at_most_64_gpus_ranks_by_hours_and_the_winner_validates(
        tmp_path: Path) -> None:
    best = tmp_path / "best.yaml"
    result = run_cli("tune", str(TORCHTITAN), "--tokens", "1e12", "--max-gpus", "64",
                     "-o", str(best))
    assert result.returncode == 0, result.stderr
    assert "ranked by the time to train 1,000,000,000,000 tokens (--tokens) on at most 64 " \
        "GPUs" in result.stdout
    winner = result.stdout.splitlines()[4]
    assert winner.split()[:2] == ["1", "64"]  # rank 1 on 64 GPUs
    assert "--set resources.nodes=8 --set data.global_batch_size=128" in winner
    checked = run_cli("validate", str(best))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    # Deep enough to reach every count: the tensor-parallel degrees multiply the candidates.
    data = invoke("tune", str(TORCHTITAN), "--tokens", "1e12", "--max-gpus", "64",
                  "--top", "40")
    hours = [c["hours"] for c in data["candidates"]]
    assert hours == sorted(hours)
    assert {c["gpus"] for c in data["candidates"]} == {8, 16, 32, 64}
    assert all(c["gpu_hours"] == c["hours"] * c["gpus"] for c in data["candidates"])


def test_it_chooses_fewer_gpus_where_the_plan_says_scaling_stops_paying() -> None:
    data = invoke("tune", str(TORCHTITAN), *ON_L40S, "--tokens", "1e12", "--max-gpus", "256")
    assert data["past_scaling"] > 0
    winner = data["candidates"][0]
    plan = run_cli("plan", str(TORCHTITAN), *ON_L40S, "--format", "json")
    limit = json.loads(plan.stdout)["scaling"]["holds_to_gpus"]
    assert winner["gpus"] == limit < 256  # 64: the last count within 10 % of 8 GPUs'
    assert max(c["gpus"] for c in data["candidates"]) <= limit


def test_max_gpus_refuses_a_fixed_count_and_measuring() -> None:
    for extra in (("--gpus", "16"), ("--measure", "2")):
        result = run_cli("tune", str(TORCHTITAN), "--max-gpus", "64", *extra)
        assert result.returncode == 2
        assert result.stderr.strip().splitlines()[-1].startswith("Error: ")
