"""Tensor parallelism through `fsdpspec run`, on CPU processes (gloo), for three families:
Llama, Gemma 3 (tied embeddings, per-head q/k norms) and GPT-NeoX (fused per-head qkv,
biases, LayerNorm), each on two shapes: TP 2 on 2 processes and data-parallel 2 × TP 2
on 4. Against TP 1 on one process (the same global batch and seed), every family on
every shape trains alike (losses and gradient norms to 1e-5), resumes bit-identically,
resumes onto TP 1 and from TP 1 onto the shape (DCP reshards), and its `final/` loads in
transformers with the logits of the checkpoint it was written from. HSDP × TP (replicated
2 × TP 2) trains alike too, and a chat fine-tune with evaluation trains with a full state
dict and resumes from one exactly.

Three launches a shape (engine_jobs.torchrun_jobs, train_then_probe), several engine
jobs to a launch (the per-process imports, not the training, are a tiny job's cost): on
one process the TP 1 references; on the shape each family's run (checkpointed at step 3),
the resumes and the logits probe; on one process the resumes onto TP 1. `fsdpspec run`
as users type it trains TP 2 below (the docs' command, and the chat fine-tune)."""

from __future__ import annotations

import json
import math
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from chat_assets import chat_parquet, chat_tokenizer, tiny_llama  # noqa: E402
from engine_jobs import (  # noqa: E402
    BASE,
    assert_trains_alike,
    by_step,
    chat_job,
    final_weights,
    merged,
    metrics,
    ok,
    torchrun,
    torchrun_jobs,
    train_then_probe,
    write_spec,
)

from conftest import run_cli, shown_argv  # noqa: E402

pytestmark = pytest.mark.slow

STEPS = 5
MIDDLE = 3
FAMILIES = ("tiny-llama", "tiny-gemma3", "tiny-gpt-neox")
CPU = {"resources": {"accelerator": "cpu"},
       "checkpoint": {"interval_steps": MIDDLE, "keep_last": 0}}
TP1 = {"resources": {"gpus_per_node": 1}, "parallelism": {"tensor_parallel": 1}}
# Each shape: its processes and the mesh the engine reports for it.
SHAPES = {"tp2": (2, "mesh dp_shard 1 × tp 2"), "dp2-tp2": (4, "mesh dp_shard 2 × tp 2")}


def family_job(family: str, nproc: int = 2, tp: int = 2) -> dict[str, Any]:
    return merged(BASE, merged(CPU, {
        "model": {"preset": family}, "resources": {"gpus_per_node": nproc},
        "parallelism": {"tensor_parallel": tp}, "train": {"max_steps": STEPS}}))


def fsdpspec_run(job: dict[str, Any], run_dir: Path,
                 env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`fsdpspec run job.yaml` as a user types it, the run in ``run_dir``."""
    run_dir.mkdir(parents=True, exist_ok=True)
    spec = run_dir.parent / f"{run_dir.name}.yaml"
    spec.write_text(json.dumps(merged(job, {"checkpoint": {"dir": str(run_dir)}})))
    result = run_cli("run", str(spec), cwd=run_dir.parent, timeout=600,
                     env={"OMP_NUM_THREADS": "1", **(env or {})})
    return ok(result)


def checkpoint(run_dir: Path, step: int = MIDDLE) -> str:
    return str(run_dir / "checkpoints" / f"step-{step:08d}")


def resumed(job: dict[str, Any], run_dir: Path, step: int = MIDDLE) -> dict[str, Any]:
    return merged(job, {"checkpoint": {"resume": checkpoint(run_dir, step)}})


def assert_resumed_exactly(run_dir: Path, again: Path, step: int = MIDDLE) -> None:
    """The steps after ``step`` lost the same, bit for bit, with the same final weights."""
    straight, resumed_run = by_step(run_dir), by_step(again)
    after = sorted(s for s in straight if s > step)
    assert after and [resumed_run[s]["loss"] for s in after] == [
        straight[s]["loss"] for s in after]
    a, b = final_weights(run_dir), final_weights(again)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def trained(results: list[subprocess.CompletedProcess], names: list[str]) -> dict[str, str]:
    """Each batched job's rank-0 output by name, once all of them succeeded."""
    for name, result in zip(names, results, strict=True):
        assert result.returncode == 0, (name, result.stdout[-3000:] + result.stderr[-3000:])
    return {name: result.stdout for name, result in zip(names, results, strict=True)}


@dataclass(frozen=True)
class Shape:
    """A shape's runs, per family: ``tp1`` (TP 1 on one process, the reference),
    ``runs`` (`fsdpspec run`, 5 steps), ``resumed`` (from its step 3), ``from_tp1``
    (from TP 1's step 3), ``onto_tp1`` (its step 3 on one process) and ``logits`` (the
    probe's: the checkpoint's, the weights', transformers'). Each shape trains its own
    TP 1 references (one launch), so that the shapes share no fixture and run on two
    workers (tests/conftest.py groups by fixture and parameter)."""

    tp1: dict[str, Path]
    runs: dict[str, Path]
    resumed: dict[str, Path]
    from_tp1: dict[str, Path]
    onto_tp1: dict[str, Path]
    logits: dict[str, dict[str, Any]]


@pytest.fixture(scope="session", params=list(SHAPES))
def shape(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Shape:
    nproc, mesh = SHAPES[request.param]
    root = tmp_path_factory.mktemp(request.param)
    tp1, runs, onto = ({f: root / f / kind for f in FAMILIES}
                       for kind in ("tp1", "run", "onto-tp1"))
    # On one process: the TP 1 references.
    outputs = trained(torchrun_jobs([write_spec(tp1[f], merged(family_job(f), TP1))
                                     for f in FAMILIES], nproc=1), list(FAMILIES))
    assert all("mesh dp_shard 1," in out for out in outputs.values())
    # On the shape: each family's run, then its step 3 and TP 1's resumed, then the
    # logits of its runs.
    jobs = {f"{f}/run": (runs[f], family_job(f, nproc)) for f in FAMILIES} | {
        f"{f}/{kind}": (root / f / kind, job) for f in FAMILIES for kind, job in (
            ("resumed", resumed(family_job(f, nproc), runs[f])),
            ("from-tp1", resumed(family_job(f, nproc), tp1[f])))}
    results, logits = train_then_probe([write_spec(d, j) for d, j in jobs.values()],
                                       [(runs[f], family_job(f, nproc)) for f in FAMILIES],
                                       nproc)
    outputs = trained(results, list(jobs))
    assert all(mesh in out for name, out in outputs.items() if name.endswith("/run"))
    assert all(f"(step {MIDDLE})" in out for name, out in outputs.items()
               if not name.endswith("/run"))
    # On one process: the shape's step 3 resumed onto TP 1.
    no_final = merged(TP1, {"checkpoint": {"final": {"enabled": False}}})
    outputs = trained(torchrun_jobs([write_spec(onto[f], merged(resumed(family_job(f), runs[f]),
                                                                no_final))
                                     for f in FAMILIES], nproc=1), list(FAMILIES))
    assert all("mesh dp_shard 1," in out for out in outputs.values())
    return Shape(tp1, runs, {f: root / f / "resumed" for f in FAMILIES},
                 {f: root / f / "from-tp1" for f in FAMILIES}, onto,
                 dict(zip(FAMILIES, logits, strict=True)))


@pytest.mark.parametrize("family", FAMILIES)
def test_trains_as_tp1(shape: Shape, family: str) -> None:
    """4 micro-batches a step on one data-parallel rank (TP 2) or 2 on each of two
    (dp 2 × TP 2), against 4 on one process: the same losses and clipped-norm inputs."""
    assert_trains_alike(shape.runs[family], shape.tp1[family], range(1, STEPS + 1))


@pytest.mark.parametrize("family", FAMILIES)
def test_resumes_exactly(shape: Shape, family: str) -> None:
    assert_resumed_exactly(shape.runs[family], shape.resumed[family])


@pytest.mark.parametrize("family", FAMILIES)
def test_resumes_onto_tp1(shape: Shape, family: str) -> None:
    """The shape's step-3 checkpoint resharded by DCP onto one process (the same
    micro-batches a step): steps 4–5 as the shape's."""
    assert_trains_alike(shape.onto_tp1[family], shape.runs[family], range(MIDDLE + 1, STEPS + 1))


@pytest.mark.parametrize("family", FAMILIES)
def test_resumes_from_tp1(shape: Shape, family: str) -> None:
    """TP 1's step-3 checkpoint resharded onto the shape: steps 4–5 as TP 1's."""
    assert_trains_alike(shape.from_tp1[family], shape.tp1[family],
                        range(MIDDLE + 1, STEPS + 1))


@pytest.mark.parametrize("family", FAMILIES)
def test_export_gives_the_checkpoints_logits(shape: Shape, family: str, tmp_path: Path) -> None:
    """`fsdpspec export hf RUN` of the shape's newest checkpoint, and the run's final/,
    load in transformers with the logits of the TP-sharded model resumed from that
    checkpoint; final/ also loads back into the engine on the shape as model.weights.
    The CLI runs in this process (click's runner): torch is loaded here already."""
    from click.testing import CliRunner
    from transformers import AutoModelForCausalLM

    from fsdpspec.cli.main import cli

    exported = tmp_path / "hf"
    result = CliRunner().invoke(cli, ["export", "hf", str(shape.runs[family]), "-o", str(exported)])
    assert result.exit_code == 0, result.output
    logits = shape.logits[family]
    model = AutoModelForCausalLM.from_pretrained(exported, dtype=torch.float32)
    with torch.no_grad():
        assert torch.allclose(model(logits["input_ids"]).logits, logits["checkpoint"],
                              atol=1e-5, rtol=0)
    assert torch.allclose(logits["transformers"], logits["checkpoint"], atol=1e-5, rtol=0)
    assert torch.allclose(logits["transformers"], logits["weights"], atol=1e-5, rtol=0)


@pytest.mark.parametrize("shape", ["dp2-tp2"], indirect=True)
def test_hsdp_tp_trains_as_tp1(shape: Shape, tmp_path: Path) -> None:
    """HYBRID_SHARD with one rank a shard group under TP 2 on 4 processes: replicated
    2 × TP 2, the gradient norm counting each replica once. A launch of its own: a
    batch's jobs share one mesh shape (engine_batch.py)."""
    job = merged(family_job("tiny-llama", 4), {
        "fsdp": {"sharding_strategy": "HYBRID_SHARD", "shard_group_size": 1},
        "checkpoint": {"interval_steps": 0}})
    (out,) = trained(torchrun_jobs([write_spec(tmp_path / "hsdp", job)], 4), ["hsdp"]).values()
    assert "mesh dp_replicate 2 × dp_shard 1 × tp 2" in out
    assert_trains_alike(tmp_path / "hsdp", shape.tp1["tiny-llama"], range(1, STEPS + 1))


def test_chat_fine_tune_with_eval_trains_and_resumes_under_tp(tmp_path: Path) -> None:
    """A chat fine-tune of a saved Llama with an evaluation split, TP 2, checkpointed as
    one full state dict at steps 2 and 4; its final weights are written from it, and it
    resumes from step 2's full state dict bit-identically."""
    from transformers import AutoTokenizer

    tokenizer = chat_tokenizer(tmp_path / "inputs" / "tokenizer")
    vocab = len(AutoTokenizer.from_pretrained(tokenizer))
    tiny_llama(tmp_path / "inputs" / "model", vocab + vocab % 2, hidden_size=64,
               num_hidden_layers=2)
    chat_parquet(tmp_path / "inputs" / "chats", train=16, test=4)
    job = merged(BASE, merged(chat_job(tmp_path / "inputs", 4, 2), {
        "resources": {"accelerator": "cpu"}, "parallelism": {"tensor_parallel": 2},
        "fsdp": {"state_dict_type": "FULL_STATE_DICT"}}))
    run_dir = tmp_path / "chat"
    datasets_cache = {"HF_DATASETS_CACHE": str(tmp_path / "datasets-cache")}
    fsdpspec_run(job, run_dir, env=datasets_cache)
    evals = [m for m in metrics(run_dir) if "eval_loss" in m]
    assert [m["step"] for m in evals] == [2, 4]
    assert all(math.isfinite(m["eval_loss"]) for m in evals)
    assert by_step(run_dir)[4]["loss"] < by_step(run_dir)[1]["loss"]
    assert (run_dir / "checkpoints" / "step-00000002" / "full_state_dict.pt").is_file()
    assert (run_dir / "final" / "config.json").is_file()
    again = tmp_path / "chat-resumed"
    ok(torchrun(write_spec(again, resumed(job, run_dir, 2)), env=datasets_cache))
    assert_resumed_exactly(run_dir, again, 2)


def test_the_shown_tp_command_trains(tmp_path: Path) -> None:
    """docs/parallelism.md's TP command, as shown: the quickstart on TP 2, 40 steps."""
    command = "fsdpspec run examples/quickstart.yaml --set parallelism.tensor_parallel=2"
    result = run_cli(*shown_argv(command), cwd=tmp_path, timeout=600,
                     env={"OMP_NUM_THREADS": "1"})
    assert "mesh dp_shard 1 × tp 2" in ok(result).stdout
    trained = by_step(tmp_path / "runs" / "quickstart")
    assert sorted(trained) == [1, *range(5, 41, 5)] and trained[40]["loss"] < trained[1]["loss"]
    assert (tmp_path / "runs" / "quickstart" / "final" / "model.safetensors").is_file()
