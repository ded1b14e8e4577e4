"""Context parallelism as a user meets it: torchtitan's CP run as a shipped example that
validates, plans and tunes on 8 H100s; `tune` splitting a long sequence over ranks; and,
on a CPU, the refusal at `validate` (and `run`, before any process starts) with FS190."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from conftest import ROOT, run_cli
from fsdpspec.cli.main import cli
from fsdpspec.validate import check_file

EXAMPLE = ROOT / "examples" / "torchtitan-llama3.1-8b-cp.yaml"
ON_CPU = ("--set", "resources.accelerator=cpu")


def _invoke(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_the_example_plans_fsdp_over_dp_shard_cp_and_the_ring() -> None:
    result = _invoke("plan", str(EXAMPLE))
    assert result.exit_code == 0, result.output
    assert "FULL_SHARD over 8 (dp_shard 1 × cp 8; each rank holds 32768 tokens" in result.output
    assert "ring attention (context_parallel 8): 140.0 GiB" in result.output
    assert "device: fits: 74.0 of 94.5 GiB" in result.output


def test_tune_splits_a_long_sequence_over_the_ranks_it_needs() -> None:
    long = ("--set", "parallelism.context_parallel=1", "--set", "data.seq_len=131072",
            "--set", "data.global_batch_size=8")
    result = _invoke("tune", str(EXAMPLE), *long, "--vary", "parallelism.context_parallel",
                     "--format", "json")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)["candidates"]
    # 131,072 tokens fit from 4 ranks a sequence on (torchtitan's CP 4 row), not on 1 or 2.
    assert [r["overrides"] for r in rows] == [["parallelism.context_parallel=4"],
                                              ["parallelism.context_parallel=8"]]
    overrides = list(long[1::2])
    for row in rows:
        report = check_file(EXAMPLE, overrides + row["overrides"])
        assert not [d for d in report.diagnostics if d.is_error], row
    short = _invoke("tune", str(EXAMPLE), "--set", "parallelism.context_parallel=1",
                    "--set", "data.seq_len=8192", "--set", "data.global_batch_size=8",
                    "--vary", "parallelism.context_parallel", "--format", "json")
    assert json.loads(short.output)["tried"] == 1  # a short sequence is not split


def test_on_a_cpu_validate_refuses_it_at_the_degree(tmp_path: Path) -> None:
    result = run_cli("validate", str(EXAMPLE), *ON_CPU, "--format", "concise")
    assert result.returncode == 1
    line = next(n for n, text in enumerate(EXAMPLE.read_text().splitlines(), 1)
                if "context_parallel:" in text)
    # (8B parameters in the host memory of one CPU do not fit either: FS201.)
    assert f"{EXAMPLE}:{line}:21: FS190 error context_parallel 8 on a CPU: torch has no " \
        "ring attention for aten._scaled_dot_product_flash_attention_for_cpu" \
        in result.stdout.splitlines()


def test_on_a_cpu_run_stops_at_validation_before_any_process(tmp_path: Path) -> None:
    result = run_cli("run", str(EXAMPLE), *ON_CPU, "--set", f"checkpoint.dir={tmp_path}/run",
                     cwd=tmp_path)
    assert result.returncode == 1
    assert "FS190 error context_parallel 8 on a CPU" in result.stderr + result.stdout
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "run").exists()
