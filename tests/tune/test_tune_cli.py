"""`fsdpspec tune` as a user runs it: the ranked table, what-if options, `-o`, the
errors, and one tiny `--measure` on 2 CPU processes."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import ROOT, run_cli
from fsdpspec.cli.main import cli
from fsdpspec.tune.measure import read_calibration
from fsdpspec.validate import check_file

EXAMPLE = ROOT / "examples" / "llama3-8b-h100.yaml"
TINY = ROOT / "tests" / "tune" / "tiny-job.yaml"


def tune(*args: str):
    """`fsdpspec tune ARGS` through click's runner (the installed entry point's group)."""
    return CliRunner().invoke(cli, ["tune", *args], catch_exceptions=False)


def _sets(row: dict) -> list[str]:
    return [a for o in row["overrides"] for a in ("--set", o)]


def test_the_ranked_table_is_fastest_first_and_each_row_validates() -> None:
    result = tune(str(EXAMPLE), "--vary", "all", "--format", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    rates = [c["tokens_per_s_per_device"] for c in data["candidates"]]
    assert len(rates) == 8 and rates == sorted(rates, reverse=True)
    assert data["tried"] > 100 and data["fitting"] >= len(rates)
    assert all(c["device_bytes"] <= 0.9 * c["capacity_bytes"] for c in data["candidates"])
    for row in data["candidates"][:3]:  # what tune printed is what validate accepts
        report = check_file(EXAMPLE, row["overrides"])
        assert not [d for d in report.diagnostics if d.is_error], row


def test_text_table_shows_memory_step_bound_and_set_lines() -> None:
    result = tune(str(EXAMPLE), "--vary", "fsdp.activation_checkpointing", "--top", "3")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith("tune llama3-8b-sft: 8 × H100-80GB; varying "
                               "fsdp.activation_checkpointing")
    assert "tokens/s/GPU" in lines[2] and "memory GiB" in lines[2]
    assert "(the spec as written)" in lines[3] and "compute" in lines[3]
    # Op-level checkpointing recomputes least of the modes that save memory.
    assert "--set fsdp.activation_checkpointing=op" in lines[4]
    assert "--set fsdp.activation_checkpointing=selective" in lines[5]


def test_the_spec_decides_what_it_writes_unless_vary_names_it() -> None:
    """The example sets strategy, checkpointing and micro-batch: only the tensor-parallel
    degree and CPU offload are open (and context parallelism, which has no values for
    its 8,192-token sequences)."""
    data = json.loads(tune(str(EXAMPLE), "--format", "json").output)
    assert data["open_levers"] == ["parallelism.tensor_parallel", "parallelism.context_parallel",
                                   "fsdp.shard_group_size", "fsdp.ac_every", "fsdp.cpu_offload"]
    assert data["tried"] == 4 * 2  # degrees 1, 2, 4, 8 within its node of 8


def test_what_if_64_a100_ranks_checkpointing_by_its_recompute() -> None:
    result = tune(str(EXAMPLE), "--gpus", "64", "--accelerator", "A100-80GB",
                  "--set", "launch.rdzv_endpoint=node0:29500",
                  "--vary", "fsdp.activation_checkpointing", "--format", "json")
    assert result.exit_code == 0, result.output
    order = [c["overrides"] for c in json.loads(result.output)["candidates"]]
    # torchtitan on 64 A100s: selective-op 2,973 tokens/s/GPU over selective-layer 2,904.
    assert order == [[], ["fsdp.activation_checkpointing=op"],
                     ["fsdp.activation_checkpointing=selective"],
                     ["fsdp.activation_checkpointing=full"]]


def test_several_nodes_without_a_rendezvous_endpoint_are_ranked() -> None:
    """FS025 (several nodes need launch.rdzv_endpoint) is `fsdpspec run`'s by hand, not
    validation's (the Slurm and Kubernetes exports derive the endpoint): a what-if of 8
    nodes is ranked as written."""
    result = run_cli("tune", str(EXAMPLE), "--nodes", "8")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("tune llama3-8b-sft: 64 × H100-80GB; ")
    assert "FS025" not in result.stdout + result.stderr


@pytest.mark.parametrize(("args", "message"), [
    (["--vary", "fsdp.mixed_precision"], "Invalid value for '--vary'"),
    (["--gpus", "12"], "--gpus 12 is not a whole number of nodes of 8"),
    (["--calibration", str(EXAMPLE)], "--calibration needs --measure"),
])
def test_usage_errors_exit_2_with_one_line(args: list[str], message: str) -> None:
    result = CliRunner().invoke(cli, ["tune", str(EXAMPLE), *args])
    assert result.exit_code == 2 and message in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_o_writes_the_winner_with_its_comments_and_never_replaces_without_force(
        tmp_path: Path) -> None:
    source = tmp_path / "job.yaml"
    source.write_text(EXAMPLE.read_text())
    best = tmp_path / "best.yaml"
    args = [str(source), "--vary", "fsdp.activation_checkpointing", "--set",
            "data.global_batch_size=8", "-o", str(best)]
    result = tune(*args)
    assert result.exit_code == 0, result.output
    text = best.read_text()
    assert "# Llama 3 8B full chat fine-tune on one 8×H100 node" in text
    assert "global_batch_size: 8" in text
    report = check_file(best)
    assert not [d for d in report.diagnostics if d.is_error]
    best.write_text("mine\n")
    again = run_cli(*["tune", *args])
    assert again.returncode == 1
    assert again.stderr.strip() == f"Error: FS049 {best}: it exists; pass --force to replace it"
    assert best.read_text() == "mine\n"
    assert tune(*args, "--force").exit_code == 0 and best.read_text() == text


# The commands docs/tune.md shows, run exactly as written.
SHOWN = (
    "fsdpspec tune examples/llama3-8b-h100.yaml",
    "fsdpspec tune examples/llama3-8b-h100.yaml --vary all",
    "fsdpspec tune examples/llama3-8b-h100.yaml --gpus 64 --accelerator A100-80GB "
    "--set launch.rdzv_endpoint=node0:29500 --vary fsdp.activation_checkpointing",
    "fsdpspec tune examples/llama3-8b-h100.yaml --vary fsdp.activation_checkpointing "
    "-o best.yaml",
    "fsdpspec tune examples/torchtitan-llama3-8b.yaml --tokens 1e12 --max-gpus 64",
)
MEASURE = ("fsdpspec tune job.yaml --measure 2 --steps 2 --rounds 1 "
           "--vary data.micro_batch_size")


@pytest.mark.parametrize("command", SHOWN)
def test_the_documented_commands_run_as_shown(command: str, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "examples").mkdir()
    for example in (EXAMPLE, ROOT / "examples" / "torchtitan-llama3-8b.yaml"):
        (tmp_path / "examples" / example.name).write_text(example.read_text())
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, shlex.split(command)[1:], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "rank  " in result.output and "  tokens/s/GPU" in result.output
    assert ("best.yaml" in command) == (tmp_path / "best.yaml").is_file()


def test_a_calibration_file_that_is_not_one_stops_before_any_run(tmp_path: Path) -> None:
    bad = tmp_path / "accelerator.yaml"
    bad.write_text("accelerator: {name: x}\n")
    result = CliRunner().invoke(cli, ["tune", str(EXAMPLE), "--measure", "1",
                                      "--calibration", str(bad)])
    assert result.exit_code == 1
    assert result.output.strip() == (f"Error: {bad}: expected a `resources:` mapping, as "
                                     "`fsdpspec tune --measure` writes")


@pytest.mark.slow
def test_measure_calibrates_and_trains_the_top_two(tmp_path: Path) -> None:
    """The documented `--measure` command: the real launcher on 2 CPU processes, 2 steps
    per candidate; the calibration it used (the fixed costs included) is printed and
    written as a reusable accelerator; a second candidate predicted too close to the
    first to be told apart is said to be skipped."""
    (tmp_path / "job.yaml").write_text(TINY.read_text())
    result = run_cli(*shlex.split(MEASURE)[1:], cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "calibration (2 process(es), gloo): float32_tflops" in result.stderr
    assert "collective_latency_us" in result.stderr and "layer_overhead_us" in result.stderr
    written = tmp_path / "runs" / "tune-tiny-tune" / "accelerator.yaml"
    accelerator = read_calibration(written)["accelerator"]
    assert accelerator["device"] == "cpu" and accelerator["fp32_tflops"] > 0
    assert accelerator["layer_overhead_us"] > 0 and accelerator["optimizer_gbps"] > 0
    lines = result.stdout.splitlines()
    start = lines.index("measured on this machine (rank 0's median CPU time per step, "
                        "after each run's first step):")
    rows = [r for r in lines[start + 2:] if not r.startswith("Spearman")]
    assert [int(r.split()[0]) for r in rows] == [1, 2][:len(rows)]
    assert all(float(r.split()[2]) > 0 for r in rows)
    skipped = "measuring 1 of 2: the other candidates are predicted within 5%"
    assert (len(rows) == 1) == (skipped in result.stderr)
    assert (len(rows) == 2) == lines[-1].startswith(
        "Spearman rank correlation, predicted vs measured")
    reuse = f"resources.accelerator={json.dumps(accelerator)}"
    report = check_file(tmp_path / "job.yaml", [reuse])
    assert not [d for d in report.diagnostics if d.is_error]


def test_docs_show_only_the_commands_tested_here() -> None:
    shown = set()
    for doc in (ROOT / "docs" / "tune.md", ROOT / "README.md"):
        for line in doc.read_text().splitlines():
            line = line.strip()
            if line.startswith("fsdpspec tune "):
                shown.add(" ".join(shlex.split(line)))
    assert shown and shown <= {*SHOWN, MEASURE}, shown - {*SHOWN, MEASURE}
