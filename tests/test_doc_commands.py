"""Every command shown in a code block of README.md and docs/*.md is run by a test as typed.

What a shown command is: in a fenced block that is not data (```yaml, ```json, ```toml), a
line that starts, after an optional `$ ` prompt, with one of PROGRAMS and a space; a line
ending in `\\` goes on on the next, and a ` # comment` after it is not part of it. Commands
in running text and tables are synopses (`[--force]`, `FILE…`), not commands.

Each shown command is in exactly one table below, and a command no table holds fails:
- RUN_HERE: cheap; run here through the `fsdpspec` CLI as typed, in a scratch directory
  holding the repository files it names (and the placeholder files the page assumes, such
  as its `job.yaml`), checked for its exit status and a piece of its output;
- RUN_ELSEWHERE: another test runs it as typed: that test holds the command's exact text;
- NOT_HERE: the suite cannot run it (the network, a cluster, hours, the suite itself): the
  reason, and the test that covers what it does.
"""

from __future__ import annotations

import ast
import re
import shlex
import shutil
from functools import cache
from pathlib import Path
from typing import NamedTuple

import pytest

from conftest import ROOT, run_cli

PROGRAMS = ("fsdpspec", "python", "python3", "bash", "nice", "pip", "sbatch", "kubectl",
            "huggingface-cli")
DATA_BLOCKS = ("yaml", "yml", "json", "toml")
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


class Run(NamedTuple):
    exit: int
    says: str  # a piece of stdout + stderr; "" when the command must print nothing
    files: dict[str, str] = {}  # a placeholder the page assumes -> the repository file it is


# The pages' placeholders, as the repository's own files.
QUICKSTART = {"job.yaml": "examples/quickstart.yaml"}
LLAMA_8B = {"job.yaml": "examples/llama3-8b-h100.yaml"}
MULTINODE = {"job.yaml": "examples/llama3-70b-multinode.yaml"}
CONFIGS = "tests/convert/configs"
DPO_PAIRS = {"examples/dpo-pairs.jsonl": "examples/dpo-pairs.jsonl"}  # the example's data
DEEPSEEK_V3 = {"tests/models/deepseek-v3/config.json": "tests/models/deepseek-v3/config.json"}

RUN_HERE: dict[str, Run] = {
    # README.md
    "fsdpspec validate examples/quickstart.yaml": Run(0, ""),
    "fsdpspec validate tests/cases/invalid/enum-typo.yaml": Run(
        1, "tests/cases/invalid/enum-typo.yaml:7:22: FS023 error string 'FULL_SHARDD' is not "
        "one of: FULL_SHARD, "),
    "fsdpspec validate job.yaml --set fsdp.sharding_strategy=SHARD_GRAD_OP --format json": Run(
        0, '"valid": true', QUICKSTART),
    "fsdpspec plan examples/llama3-8b-h100.yaml": Run(
        0, "device: fits: 51.2 of 79.1 GiB (headroom 35.2%, wanted 10%)"),
    # docs/lora.md
    "fsdpspec plan examples/lora-llama3-8b-l40s.yaml": Run(0, "device: fits: 26.6 of 44.4 GiB"),
    "fsdpspec plan examples/lora-llama3-8b-l40s.yaml --set peft=": Run(
        1, "--set peft.method=lora "),
    "fsdpspec plan examples/lora-llama3-8b-l40s.yaml --set model.preset=llama3-70b --set "
    "peft.method=qlora --set resources.gpus_per_node=2 --set resources.accelerator=H100-80GB":
        Run(0, "device: fits: 37.9 of 79.1 GiB"),
    # docs/memory.md
    "fsdpspec plan job.yaml": Run(0, "device: fits: 51.2 of 79.1 GiB", LLAMA_8B),
    "fsdpspec plan job.yaml --gpus 16 --accelerator H200-141GB --set data.seq_len=8192": Run(
        0, "16 × H200-141GB, FULL_SHARD over 16, micro-batch 1 × 8192", LLAMA_8B),
    "fsdpspec plan job.yaml --format json": Run(0, '"total": 8030261248', LLAMA_8B),
    "fsdpspec plan job.yaml --trace": Run(
        0, "trace (FakeTensorMode, fake process group of 2", QUICKSTART),
    # docs/dpo.md: the three references side by side (tests/plan/test_dpo_plan.py checks
    # the figures: the difference between model and precomputed is the frozen copy)
    "fsdpspec plan examples/dpo-llama3-8b-h100.yaml": Run(
        0, "(GiB): model (this job) 33.19 / 35.85, precomputed 31.32 / 33.88", DPO_PAIRS),
    "fsdpspec plan examples/dpo-llama3-8b-h100.yaml --set train.dpo.reference=precomputed": Run(
        0, "(GiB): model 33.19 / 35.85, precomputed (this job) 31.32 / 33.88", DPO_PAIRS),
    "fsdpspec plan examples/dpo-llama3-8b-h100.yaml --set peft.method=lora --set "
    "train.dpo.reference=adapter": Run(
        0, "model 19.89 / 21.89, adapter (this job) 18.02 / 19.92, precomputed 18.02 / 19.92",
        DPO_PAIRS),
    "fsdpspec import axolotl tests/convert/configs/axolotl/qwen2-dpo.yaml -o dpo-import.yaml":
        Run(0, "wrote dpo-import.yaml"),
    "fsdpspec import trainer tests/convert/trl_dpo/accelerate-multi-gpu-lora.sh -o "
    "trl-dpo-lora.yaml": Run(0, "wrote trl-dpo-lora.yaml"),
    # docs/parallelism.md: Mixtral 8x7B on 64 H100s (experts on dim 1), then on EP 8;
    # DeepSeek-V3 fits under FSDP alone on no count, on 256 with EP 8
    # (tests/plan/test_expert_parallel_plan.py checks the figures)
    "fsdpspec plan tests/plan/specs/mixtral-8x7b-64-h100.yaml": Run(
        0, "device: fits: 28.1 of 79.1 GiB"),
    "fsdpspec plan tests/plan/specs/mixtral-8x7b-64-h100.yaml "
    "--set parallelism.expert_parallel=8": Run(0, "device: fits: 17.7 of 79.1 GiB"),
    "fsdpspec plan tests/plan/specs/deepseek-v3-256-h100.yaml": Run(
        1, "fewest H100-80GB that fit: none up to 4096 nodes; 256 with --set "
        "parallelism.expert_parallel=8", DEEPSEEK_V3),
    "fsdpspec plan tests/plan/specs/deepseek-v3-256-h100.yaml "
    "--set parallelism.expert_parallel=8": Run(0, "device: fits: 63.4 of 79.1 GiB", DEEPSEEK_V3),
    # tune's EP winner (tests/tune/test_expert_parallel_lever.py validates and plans it) and
    # torchtitan's degree imported (tests/convert/test_import_expert_parallel.py)
    "fsdpspec tune tests/plan/specs/deepseek-v3-256-h100.yaml": Run(
        0, "63.4 of 79.1  --set parallelism.expert_parallel=8", DEEPSEEK_V3),
    "fsdpspec import torchtitan tests/convert/configs/torchtitan/pr2465-qwen3_30b_a3b.toml "
    "-o qwen3-ep.yaml": Run(0, "wrote qwen3-ep.yaml"),
    # docs/tune.md
    "fsdpspec plan examples/torchtitan-llama3-8b.yaml --tokens 1e12 --price-per-gpu-hour 2.5":
        Run(0, "budget: 1.00T tokens (--tokens) on 8 GPUs at 44,960 tokens/s: "),
    # docs/accelerate.md, docs/import.md
    "fsdpspec import accelerate accelerate_config.yaml -o job.yaml": Run(
        0, "wrote job.yaml", {"accelerate_config.yaml": f"{CONFIGS}/fsdp2-qwen-ac.yaml"}),
    "fsdpspec export accelerate job.yaml -o exported_config.yaml": Run(
        0, "wrote exported_config.yaml", QUICKSTART),
    "fsdpspec import trainer train.sh -o job.yaml": Run(
        0, "wrote job.yaml", {"train.sh": f"{CONFIGS}/trainer/alpaca-readme-llama.sh"}),
    "fsdpspec import axolotl axolotl.yaml -o job.yaml": Run(
        0, "wrote job.yaml", {"axolotl.yaml": f"{CONFIGS}/axolotl/llama-3-lora-1b.yml"}),
    "fsdpspec import torchtitan llama3_8b.toml -o job.yaml": Run(
        0, "wrote job.yaml", {"llama3_8b.toml": f"{CONFIGS}/torchtitan/2024-llama3_8b.toml"}),
    "fsdpspec validate job.yaml && fsdpspec run --dry-run job.yaml": Run(
        0, "-m fsdpspec_runners.engine --spec ", QUICKSTART),
    # docs/clusters.md
    "fsdpspec export slurm job.yaml -o job.sbatch": Run(0, "wrote job.sbatch", MULTINODE),
    "fsdpspec export kubernetes job.yaml -o job.k8s.yaml": Run(0, "wrote job.k8s.yaml", MULTINODE),
    "fsdpspec export kubernetes job.yaml --api trainjob -o job.k8s.yaml": Run(
        0, "wrote job.k8s.yaml", MULTINODE),
}

TUNE_SHOWN = "tests/tune/test_tune_cli.py::test_the_documented_commands_run_as_shown"
RUN_ELSEWHERE: dict[str, str] = {
    # Training runs: real torchrun on 2 CPU processes, a minute and more each.
    "fsdpspec run examples/quickstart.yaml":
        "tests/local/test_run.py::test_quickstart_trains_and_leaves_a_run_directory",
    "fsdpspec run examples/quickstart.yaml --set parallelism.tensor_parallel=2":
        "tests/engine/test_tensor_parallel.py::test_the_shown_tp_command_trains",
    "fsdpspec run examples/fsdp1-seed-recipe.yaml --set model.preset=tiny-llama --set "
    "resources.accelerator=cpu --set resources.gpus_per_node=2 --set fsdp.cpu_offload=false "
    "--set fsdp.min_num_params=20000 --set data.seq_len=64 --set data.global_batch_size=4 "
    "--set train.max_steps=4 --set checkpoint.interval_steps=2":
        "tests/engine/test_validated_specs_train.py::test_the_shown_seed_recipe_command_trains",
    # docs/dpo.md's run: stopped at step 2 (the reference log-probs computed), resumed.
    **dict.fromkeys(("fsdpspec validate dpo.yaml",
                     "fsdpspec run dpo.yaml --set train.max_steps=2", "fsdpspec run dpo.yaml"),
                    "tests/cli/test_dpo_docs.py::test_the_docs_dpo_run_as_typed"),
    "fsdpspec tune job.yaml --measure 2 --steps 2 --rounds 1 --vary data.micro_batch_size":
        "tests/tune/test_tune_cli.py::test_measure_calibrates_and_trains_the_top_two",
    # docs/tune.md's commands, with its table's columns.
    "fsdpspec tune examples/llama3-8b-h100.yaml": TUNE_SHOWN,
    "fsdpspec tune examples/llama3-8b-h100.yaml --vary all": TUNE_SHOWN,
    "fsdpspec tune examples/llama3-8b-h100.yaml --gpus 64 --accelerator A100-80GB --set "
    "launch.rdzv_endpoint=node0:29500 --vary fsdp.activation_checkpointing": TUNE_SHOWN,
    "fsdpspec tune examples/llama3-8b-h100.yaml --vary fsdp.activation_checkpointing "
    "-o best.yaml": TUNE_SHOWN,
    "fsdpspec tune examples/torchtitan-llama3-8b.yaml --tokens 1e12 --max-gpus 64": TUNE_SHOWN,
}

SET_UP = "tests/test_doc_commands.py::test_the_set_up_is_what_ci_runs"
RECORDED_TRACES = "tests/plan/test_recorded_traces.py::test_every_recorded_row_meets_the_targets"
NOT_HERE: dict[str, tuple[str, str]] = {
    'python3 -m venv .venv && . .venv/bin/activate && pip install torch==2.13.0 && pip '
    'install -e ".[train]" && fsdpspec run examples/quickstart.yaml': (
        "installs from the network into a new environment; .ci/run installs the same torch "
        "(checked by the test named), and the quickstart run is test_run's", SET_UP),
    "bash .ci/run": ("CI itself: a fresh environment from the network, then this suite", SET_UP),
    "sbatch job.sbatch": ("needs a Slurm cluster: the Slurm tests start one and submit the "
                          "exported script with sbatch",
                          "tests/runners/test_slurm_cluster.py::"
                          "test_exported_quickstart_trains_to_completion"),
    "kubectl apply -f job.k8s.yaml": (
        "needs a Kubernetes cluster: the manifest is checked against the CRD's and the pod's "
        "own schemas instead",
        "tests/runners/test_kubernetes_schemas.py::"
        "test_the_multi_node_pytorchjob_meets_its_crd_and_the_pod_schema"),
    # docs/memory.md's sweep: hours of fake-tensor tracing; the suite rechecks the plan
    # against the traces such a sweep recorded.
    "nice -n 19 python benchmarks/plan_accuracy.py --sweep --part 0/2 --traces t.jsonl &": (
        "traces every registered family for hours", RECORDED_TRACES),
    "nice -n 19 python benchmarks/plan_accuracy.py --sweep --part 1/2 --traces t.jsonl &": (
        "traces every registered family for hours", RECORDED_TRACES),
    "nice -n 19 python benchmarks/plan_accuracy.py --sweep --match ac:selective --traces "
    "t.jsonl": ("traces for an hour and more", RECORDED_TRACES),
    "python benchmarks/plan_accuracy.py --sweep --traces t.jsonl": (
        "reads the t.jsonl the three lines above write; the suite runs it on the recorded "
        "traces", RECORDED_TRACES),
}


def shown_commands(pages: list[Path] = PAGES) -> dict[str, list[str]]:
    """Command → where the pages show it (`page:line`), by the rule of the docstring."""
    shown: dict[str, list[str]] = {}
    for page in pages:
        block, pending, start = None, "", 0
        for number, line in enumerate(page.read_text().splitlines(), 1):
            text = line.strip()
            if text.startswith("```"):
                block = None if block is not None else text[3:].strip().lower()
                continue
            if block is None or block in DATA_BLOCKS:
                continue
            if not pending:
                text = text.removeprefix("$ ")
                if not text.startswith(tuple(f"{p} " for p in PROGRAMS)):
                    continue
                start = number
            text = re.sub(r"\s+#\s.*$", "", pending + text)
            if text.endswith("\\"):
                pending = text[:-1] + " "
                continue
            pending = ""
            command = " ".join(text.split())
            where = page.relative_to(ROOT) if page.is_relative_to(ROOT) else page
            shown.setdefault(command, []).append(f"{where}:{start}")
    return shown


@cache
def _module(path: str) -> ast.Module:
    return ast.parse((ROOT / path).read_text())


def _function(node_id: str) -> ast.FunctionDef | None:
    path, name = node_id.split("::")
    return next((node for node in _module(path).body
                 if isinstance(node, ast.FunctionDef) and node.name == name), None)


def _strings_reaching(node_id: str) -> set[str]:
    """The string constants of a test function (its decorators included) and of the
    module-level assignments it names."""
    function = _function(node_id)
    assert function is not None, f"{node_id}: no such test"
    names = {node.id for node in ast.walk(function) if isinstance(node, ast.Name)}
    module = _module(node_id.split("::")[0])
    reached = [function, *(node for node in module.body if isinstance(node, ast.Assign)
                           and any(getattr(t, "id", None) in names for t in node.targets))]
    return {node.value for tree in reached for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)}


def test_every_shown_command_is_run_by_a_test() -> None:
    shown = shown_commands()
    tables = [RUN_HERE, RUN_ELSEWHERE, NOT_HERE]
    unlisted = {c: where for c, where in shown.items() if not any(c in t for t in tables)}
    assert not unlisted, ("shown but run by no test (add it to a table of "
                          f"tests/test_doc_commands.py): {unlisted}")
    stale = [c for table in tables for c in table if c not in shown]
    assert not stale, f"listed but no longer shown: {stale}"
    twice = [c for c in shown if sum(c in t for t in tables) > 1]
    assert not twice, f"in more than one table: {twice}"


def test_the_rule_reads_commands_as_a_page_shows_them(tmp_path: Path) -> None:
    """The rule on a page of every shape it reads: a prompt, a comment, a continuation, a
    data block and a synopsis in running text."""
    page = tmp_path / "page.md"
    page.write_text("Run `fsdpspec plan FILE [--gpus N]`.\n\n```yaml\nfsdpspec: not a command\n"
                    "```\n\n```console\n$ fsdpspec plan a.yaml \\\n    --gpus 2   # two\n"
                    "Error: fsdpspec output\n```\n\n```\npython x.py\n```\n")
    assert shown_commands([page]) == {"fsdpspec plan a.yaml --gpus 2": [f"{page}:8"],
                                      "python x.py": [f"{page}:14"]}


@pytest.mark.parametrize("command", RUN_ELSEWHERE)
def test_the_test_named_runs_the_command_as_typed(command: str) -> None:
    assert command in _strings_reaching(RUN_ELSEWHERE[command])


@pytest.mark.parametrize("command", NOT_HERE)
def test_what_cannot_run_here_names_the_test_that_covers_it(command: str) -> None:
    reason, node_id = NOT_HERE[command]
    assert reason and _function(node_id) is not None, node_id


def _scratch(command: str, run: Run, root: Path) -> None:
    """The repository files the command names, at the same paths, and its placeholders."""
    named = {arg: arg for arg in shlex.split(command) if (ROOT / arg).is_file()}
    for name, source in {**named, **run.files}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / source, root / name)


@pytest.mark.parametrize("command", RUN_HERE)
def test_the_shown_command_runs_as_typed(command: str, tmp_path: Path) -> None:
    run = RUN_HERE[command]
    _scratch(command, run, tmp_path)
    *before, last = command.split(" && ")
    for part in before:  # `a && b`: b runs when a succeeded
        result = run_cli(*shlex.split(part)[1:], cwd=tmp_path, timeout=120)
        assert result.returncode == 0, result.stdout + result.stderr
    program, *args = shlex.split(last)
    assert program == "fsdpspec"
    result = run_cli(*args, cwd=tmp_path, timeout=120)
    output = result.stdout + result.stderr
    assert result.returncode == run.exit, output
    assert run.says in output if run.says else output == ""


def test_the_set_up_is_what_ci_runs() -> None:
    """The README's set-up installs the torch that .ci/run installs, and the test command
    the README names is the one .ci/run ends with."""
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    pinned = set(re.findall(r"torch==[\d.]+", readme))
    assert pinned and pinned == set(re.findall(r"torch==[\d.]+", ci))
    assert 'pip install -e ".[train]"' in readme and '-e ".[train,test]"' in ci
    suite = ci.strip().splitlines()[-1]
    assert suite == "python -m pytest -q -n 3 --dist loadgroup"
    assert f"`{suite}`" in readme
