"""Expert parallelism on CPU processes (gloo), issue 44: tiny Mixtral, Qwen3-MoE, gpt-oss
(expert biases) and OLMoE (q/k norms), each on two shapes: EP 2 on 2 processes (the
experts' FSDP degree 1) and data-parallel 2 × EP 2 on 4 (dp_shard 4, the experts
FSDP-sharded over efsdp 2, their gradients summed there and divided locally). Against
EP 1 on the same processes (the same global batch and seed), every family on every shape
trains alike (losses, which carry the load-balancing loss, and gradient norms to 1e-5),
resumes bit-identically, resumes onto EP 1 and from EP 1 (DCP reshards), and its
`final/` loads in transformers with the logits of the checkpoint it was written from.
Through `fsdpspec run`, one run directory goes EP 2 → EP 1 → EP 2 as layout changes.

One launch a shape (engine_jobs.train_then_probe): each family's five jobs one after
another (a resume reads the checkpoint an earlier job of the launch wrote), then the
logits probe; the imports, not the training, are a tiny job's cost."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from engine_jobs import (  # noqa: E402
    BASE,
    assert_trains_alike,
    by_step,
    final_weights,
    merged,
    ok,
    train_then_probe,
    write_spec,
)

from conftest import run_cli  # noqa: E402
from fsdpspec.catalog.presets import preset_config  # noqa: E402
from fsdpspec.runfiles.fault_settings import SIGNAL_AT_STEP_ENV  # noqa: E402

pytestmark = pytest.mark.slow

STEPS = 5
MIDDLE = 3
FAMILIES = ("tiny-mixtral", "tiny-qwen3-moe", "tiny-gpt-oss", "tiny-olmoe")
# Each shape: its processes and the experts' mesh the engine reports for it.
SHAPES = {"ep2": (2, "mesh dp_shard 2, experts efsdp 1 × ep 2"),
          "dp2-ep2": (4, "mesh dp_shard 4, experts efsdp 2 × ep 2")}
DEGREE = "parallelism.expert_parallel"


# Mixtral with 2 experts (one a rank under EP 2): on 4 processes the experts' FSDP
# degree 2 exceeds the rank's one expert, so its tensors are sharded on dim 1.
TWO_EXPERTS = "two-experts"


# What runs beside expert parallelism (the lint rules accept it), on Mixtral on EP 2.
BESIDE = {"full-ac": {"fsdp": {"activation_checkpointing": "full"}},
          "op-ac": {"fsdp": {"activation_checkpointing": "op"}},
          "lora": {"peft": {"method": "lora"}}}


def family_job(family: str, nproc: int, ep: int = 2) -> dict[str, Any]:
    return merged(BASE, {
        "resources": {"accelerator": "cpu", "gpus_per_node": nproc},
        "model": {"preset": family} if family in FAMILIES else {"preset": None,
                                                                 "hf_config": family},
        "parallelism": {"expert_parallel": ep},
        "train": {"max_steps": STEPS}, "checkpoint": {"interval_steps": MIDDLE, "keep_last": 0}})


def resumed(job: dict[str, Any], run_dir: Path, final: bool = True) -> dict[str, Any]:
    return merged(job, {"checkpoint": {"resume": str(run_dir / "checkpoints" /
                                                     f"step-{MIDDLE:08d}"),
                                       "final": {"enabled": final}}})


@dataclass(frozen=True)
class Shape:
    """A shape's run directories per family and job (``ep1``, ``ep``, ``resumed``,
    ``from-ep1``, ``onto-ep1``), rank 0's output of each, and the ``ep`` runs' logits
    (the probe's: the checkpoint's, the weights', transformers')."""

    name: str
    root: Path
    outputs: dict[str, str]
    logits: dict[str, dict[str, Any]]

    def run(self, family: str, kind: str) -> Path:
        return self.root / family / kind


@pytest.fixture(scope="session", params=list(SHAPES))
def shape(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Shape:
    nproc, _ = SHAPES[request.param]
    root = tmp_path_factory.mktemp(request.param)
    jobs: dict[str, dict[str, Any]] = {}
    for f in FAMILIES:
        ep1, ep = family_job(f, nproc, ep=1), family_job(f, nproc)
        jobs |= {f"{f}/ep1": ep1, f"{f}/ep": ep,
                 f"{f}/resumed": resumed(ep, root / f / "ep"),
                 f"{f}/from-ep1": resumed(ep, root / f / "ep1"),
                 f"{f}/onto-ep1": resumed(ep1, root / f / "ep", final=False)}
    if nproc == 4:
        config = root / TWO_EXPERTS
        config.mkdir()
        (config / "config.json").write_text(json.dumps(
            preset_config("tiny-mixtral") | {"num_local_experts": 2}))
        jobs |= {f"{TWO_EXPERTS}/ep1": family_job(str(config), nproc, ep=1),
                 f"{TWO_EXPERTS}/ep": family_job(str(config), nproc)}
    for name, beside in BESIDE.items() if nproc == 2 else ():
        jobs |= {f"{name}/ep1": merged(family_job("tiny-mixtral", nproc, ep=1), beside),
                 f"{name}/ep": merged(family_job("tiny-mixtral", nproc), beside)}
    specs = [write_spec(root / name, job) for name, job in jobs.items()]
    results, logits = train_then_probe(
        specs, [(root / f / "ep", jobs[f"{f}/ep"]) for f in FAMILIES], nproc)
    for name, result in zip(jobs, results, strict=True):
        assert result.returncode == 0, (name, (result.stdout + result.stderr)[-3000:])
    outputs = {name: r.stdout for name, r in zip(jobs, results, strict=True)}
    return Shape(request.param, root, outputs, dict(zip(FAMILIES, logits, strict=True)))


@pytest.mark.parametrize("family", FAMILIES)
def test_trains_as_ep1(shape: Shape, family: str) -> None:
    _, mesh = SHAPES[shape.name]
    assert mesh in shape.outputs[f"{family}/ep"]
    assert "experts" not in shape.outputs[f"{family}/ep1"]
    assert_trains_alike(shape.run(family, "ep"), shape.run(family, "ep1"), range(1, STEPS + 1))


@pytest.mark.parametrize("family", FAMILIES)
def test_resumes_exactly(shape: Shape, family: str) -> None:
    straight, again = by_step(shape.run(family, "ep")), by_step(shape.run(family, "resumed"))
    assert sorted(again) == [4, 5]
    assert [again[s]["loss"] for s in again] == [straight[s]["loss"] for s in again]
    a, b = final_weights(shape.run(family, "ep")), final_weights(shape.run(family, "resumed"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("family", FAMILIES)
def test_resumes_onto_and_from_ep1(shape: Shape, family: str) -> None:
    """DCP reshards the experts' step-3 checkpoint between EP 2 and EP 1, both ways:
    steps 4–5 as the run the checkpoint came from."""
    after = range(MIDDLE + 1, STEPS + 1)
    assert_trains_alike(shape.run(family, "onto-ep1"), shape.run(family, "ep"), after)
    assert_trains_alike(shape.run(family, "from-ep1"), shape.run(family, "ep1"), after)


@pytest.mark.parametrize("family", FAMILIES)
def test_final_gives_the_checkpoints_logits(shape: Shape, family: str) -> None:
    """The EP run's final/ loads in transformers (and back into the engine under EP as
    model.weights) with the logits of the expert-parallel model resumed from its newest
    checkpoint."""
    logits = shape.logits[family]
    assert torch.allclose(logits["transformers"], logits["checkpoint"], atol=1e-5, rtol=0)
    assert torch.allclose(logits["weights"], logits["checkpoint"], atol=1e-5, rtol=0)


@pytest.mark.parametrize("shape", ["ep2"], indirect=True)
@pytest.mark.parametrize("beside", list(BESIDE))
def test_trains_as_ep1_beside(shape: Shape, beside: str) -> None:
    """Full and op-level activation checkpointing recompute the layer, its two
    all-to-alls included, in backward; LoRA trains adapters beside the frozen experts."""
    assert "experts efsdp 1 × ep 2" in shape.outputs[f"{beside}/ep"]
    assert_trains_alike(shape.run(beside, "ep"), shape.run(beside, "ep1"), range(1, STEPS + 1))


@pytest.mark.parametrize("shape", ["dp2-ep2"], indirect=True)
def test_fewer_experts_a_rank_than_their_fsdp_degree_shard_on_dim_1(shape: Shape) -> None:
    """Mixtral with 2 experts on dp_shard 4 × EP 2: each rank's one expert is sharded on
    dim 1 over efsdp 2 (each rank saves a quarter of the stacked tensor, half an expert),
    and it trains as EP 1 (where the degree 4 exceeds the 2 experts: dim 1 too)."""
    from torch.distributed.checkpoint import FileSystemReader

    run = shape.run(TWO_EXPERTS, "ep")
    assert_trains_alike(run, shape.run(TWO_EXPERTS, "ep1"), range(1, STEPS + 1))
    saved = FileSystemReader(str(run / "checkpoints" / f"step-{MIDDLE:08d}")).read_metadata()
    for key in ("gate_up_proj", "down_proj"):
        held = saved.state_dict_metadata[f"model.model.layers.0.mlp.experts.{key}"]
        experts, rows, columns = held.size
        assert experts == 2
        assert sorted(tuple(c.sizes) for c in held.chunks) == [(1, rows // 2, columns)] * 4


@pytest.mark.parametrize("shape", ["ep2"], indirect=True)
def test_export_hf_of_an_ep_run_gives_the_checkpoints_logits(shape: Shape,
                                                             tmp_path: Path) -> None:
    """`fsdpspec export hf RUN` of the EP run's newest checkpoint (in this process:
    torch is loaded here already)."""
    from click.testing import CliRunner
    from transformers import AutoModelForCausalLM

    from fsdpspec.cli.main import cli

    run, exported = shape.run("tiny-mixtral", "ep"), tmp_path / "hf"
    result = CliRunner().invoke(cli, ["export", "hf", str(run), "-o", str(exported)])
    assert result.exit_code == 0, result.output
    logits = shape.logits["tiny-mixtral"]
    model = AutoModelForCausalLM.from_pretrained(exported, dtype=torch.float32)
    with torch.no_grad():
        assert torch.allclose(model(logits["input_ids"]).logits, logits["checkpoint"],
                              atol=1e-5, rtol=0)


@pytest.mark.parametrize("shape", ["ep2"], indirect=True)
def test_a_changed_expert_parallel_degree_continues_in_the_same_run_directory(
        shape: Shape, tmp_path: Path) -> None:
    """`fsdpspec run` of Mixtral on EP 2, stopped at step 2, comes back on EP 1, stopped
    at step 4, and back on EP 2 to step 5: two layout changes in one run directory, each
    one line, the checkpoint resharded by DCP; every step as EP 1's uninterrupted run."""
    spec, run = tmp_path / "mixtral.yaml", tmp_path / "run"
    spec.write_text(json.dumps(merged(family_job("tiny-mixtral", 2), {
        "checkpoint": {"dir": str(run), "final": {"enabled": False}}})))
    said = []
    for degree, stop in ((2, 2), (1, 4), (2, None)):
        env = {"OMP_NUM_THREADS": "1", **({SIGNAL_AT_STEP_ENV: str(stop)} if stop else {})}
        result = run_cli("run", str(spec), "--set", f"{DEGREE}={degree}", cwd=tmp_path,
                         env=env, timeout=600)
        if stop:
            assert (f"stopped by SIGTERM at step {stop}; checkpoint saved"
                    in result.stdout + result.stderr)
        else:
            ok(result)
        said.append(result.stderr.splitlines())
    for lines, (before, after) in zip(said[1:], ((2, 1), (1, 2)), strict=True):
        assert (f"new layout: the same 2 processes ({DEGREE} {before} → {after}); the "
                "checkpoint is resharded and the run continues at its step and data "
                "position (global batch 4)") in lines
    steps = by_step(run)
    assert sorted(steps) == list(range(1, STEPS + 1))
    assert_trains_alike(run, shape.run("tiny-mixtral", "ep1"), range(1, STEPS + 1))


def test_trace_refuses_expert_parallelism_in_one_line(tmp_path: Path) -> None:
    spec = tmp_path / "mixtral.yaml"
    spec.write_text(json.dumps(merged(family_job("tiny-mixtral", 2), {
        "fsdp": {"mixed_precision": "bf16"}})))
    result = run_cli("plan", str(spec), "--trace", cwd=tmp_path, timeout=300)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1].endswith(
        "trace with parallelism.expert_parallel: 1")
