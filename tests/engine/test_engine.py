"""The engine, for real: torchrun with 2 processes on gloo (CPU), tiny models.

Runs are kept few and short (5–10 steps, seq_len 32) and shared between assertions where
one run honestly answers several questions; the runs nothing signals or fails train in one
launch (tests/conftest.py's plain_runs).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from engine_jobs import (  # noqa: E402
    BASE,
    engine_alone,
    final_weights,
    losses,
    metrics,
    ok,
    torchrun,
    write_spec,
)

from conftest import CONFIGS  # noqa: E402
from fsdpspec.spec.v1 import JobSpec  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("name", list(CONFIGS))
def test_configuration_trains_five_steps(plain_runs: dict[str, Any], name: str) -> None:
    """Each sharding / wrapping / precision / offload / checkpointing choice trains."""
    run_dir, result = plain_runs[name]
    ok(result)
    steps = losses(run_dir)
    assert sorted(steps) == [1, 2, 3, 4, 5]
    assert all(math.isfinite(v) for v in steps.values())
    fsdp = CONFIGS[name]["fsdp"]
    head = f"fsdp{fsdp.get('version', 2)} {fsdp.get('sharding_strategy', 'FULL_SHARD')}"
    assert head in result.stdout
    assert (
        f"activation checkpointing {fsdp.get('activation_checkpointing', 'none')}" in result.stdout
    )
    if fsdp.get("auto_wrap_policy") == "size":  # the size policy really chose units
        assert "0 units" not in result.stdout
    if fsdp.get("state_dict_type") == "FULL_STATE_DICT":  # one rank-0 file a checkpoint
        assert (run_dir / "checkpoints" / "step-00000004" / "full_state_dict.pt").is_file()


def test_two_ranks_equal_one_process(straight_run: Path, tmp_path: Path) -> None:
    """FSDP2 FULL_SHARD on 2 ranks vs 1 process, fp32, same seed and data: the first
    5 steps (the lr is constant, so these are a 5-step run) agree to 1e-5."""
    ok(torchrun(write_spec(tmp_path, {"resources": {"gpus_per_node": 1}}), nproc=1))
    two, one = losses(straight_run), losses(tmp_path)
    assert sorted(one) == [1, 2, 3, 4, 5]
    print(f"2 ranks vs 1 process: max |loss diff| {max(abs(two[s] - one[s]) for s in one):.2e}")
    for step in range(1, 6):
        assert abs(two[step] - one[step]) <= 1e-5, (step, two[step], one[step])


def test_resume_is_exact(straight_run: Path, plain_runs: dict[str, Any]) -> None:
    """The straight run's step-5 checkpoint resumed in a run directory of its own:
    identical losses 6–10 and final weights. (A run stopped by a signal and resumed in
    place: tests/local/test_run.py, test_lora.py and test_finetune.py.)"""
    run_dir, second = plain_runs["resumed"]
    assert "resumed from" in ok(second).stdout and "(step 5)" in second.stdout
    straight, resumed = losses(straight_run), losses(run_dir)
    assert [resumed[s] for s in range(6, 11)] == [straight[s] for s in range(6, 11)]
    a, b = final_weights(straight_run), final_weights(run_dir)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    # keep_last: 2 kept the straight run's step 5 beside step 10.
    assert sorted(p.name for p in (straight_run / "checkpoints").iterdir()) == [
        "latest", "step-00000005", "step-00000010"]


def test_no_shard_trains_as_ddp_like_full_shard_and_resumes_exactly(
    straight_run: Path, plain_runs: dict[str, Any]
) -> None:
    """NO_SHARD in full precision runs as DDP (`runs_as_ddp`): its first 4 steps (two
    micro-batches each, the first without an all-reduce) are FULL_SHARD's, losses and
    gradient norms (each rank holds the whole gradient: counted once), and a resume from
    its step-2 checkpoint replays steps 3–4 and the final weights exactly."""
    (ddp, first), (resumed, second) = plain_runs["no-shard"], plain_runs["no-shard-resumed"]
    assert "fsdp2 NO_SHARD: as DDP (25 MiB buckets)" in ok(first).stdout
    sharded = {m["step"]: m for m in metrics(straight_run)}
    for ours in metrics(ddp):
        assert ours["loss"] == pytest.approx(sharded[ours["step"]]["loss"], rel=1e-5)
        assert ours["grad_norm"] == pytest.approx(sharded[ours["step"]]["grad_norm"], rel=1e-5)
    ok(second)
    assert [losses(resumed)[s] for s in (3, 4)] == [losses(ddp)[s] for s in (3, 4)]
    final, again = final_weights(ddp), final_weights(resumed)
    assert final.keys() == again.keys() and all(final[k].equal(again[k]) for k in final)


def test_export_loads_with_from_pretrained(straight_run: Path, plain_runs: dict[str, Any]) -> None:
    """final/ gives the sharded model's logits (fp32, 1e-5); it also loads back into
    the engine as model.weights, sharded, with the same logits."""
    _, probe = plain_runs["straight-logits"]
    assert probe is not None, "a job of the launch failed: nothing was probed"
    logits = probe["transformers"]
    print(f"final/ vs sharded logits: max |diff| {(logits - probe['checkpoint']).abs().max():.2e}")
    assert torch.allclose(logits, probe["checkpoint"], atol=1e-5, rtol=0)
    assert torch.allclose(logits, probe["weights"], atol=1e-5, rtol=0)


def test_nonfinite_loss_stops_with_one_line(tmp_path: Path) -> None:
    """A diverging run stops with one clear line; the last good checkpoint stays latest."""
    spec = write_spec(
        tmp_path,
        {
            "resources": {"gpus_per_node": 1},
            "optimizer": {"lr": 1e30, "grad_clip_norm": None},
            "checkpoint": {"interval_steps": 1},
            "train": {"max_steps": 4},
        },
    )
    result = engine_alone(spec)
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if "error" in line.lower()]
    assert len(errors) == 1 and "non-finite" in errors[0], result.stderr
    assert "Traceback" not in result.stderr
    assert "at step 2" in errors[0] and max(losses(tmp_path)) == 1
    assert (tmp_path / "checkpoints" / "latest").read_text().strip() == "step-00000001"


def test_missing_weights_is_one_line_error(tmp_path: Path) -> None:
    spec = write_spec(
        tmp_path,
        {"resources": {"gpus_per_node": 1}, "model": {"weights": str(tmp_path / "nowhere")}},
    )
    result = engine_alone(spec)
    assert result.returncode == 1
    assert (
        result.stderr.strip().splitlines()[-1].startswith("fsdpspec engine: error: model.weights")
    )
    assert "Traceback" not in result.stderr


# Pure pieces of the engine, in-process (no process group needed).


def test_lr_schedule_warmup_then_decay() -> None:
    from fsdpspec.spec.v1 import Scheduler
    from fsdpspec_runners.engine.optim import lr_multiplier

    cosine = Scheduler(name="cosine", warmup_steps=4, min_lr_ratio=0.1)
    assert [lr_multiplier(s, cosine, 20) for s in range(4)] == [0.25, 0.5, 0.75, 1.0]
    assert lr_multiplier(4, cosine, 20) == 1.0  # decay starts from the peak
    # The last optimizer step (index 19 of 20) trains at the floor, not one step past it.
    assert lr_multiplier(19, cosine, 20) == pytest.approx(0.1)
    assert lr_multiplier(18, cosine, 20) > 0.1
    linear = Scheduler(name="linear", warmup_steps=0, min_lr_ratio=0.0)
    assert lr_multiplier(0, linear, 11) == 1.0
    assert lr_multiplier(5, linear, 11) == pytest.approx(0.5)
    assert lr_multiplier(10, linear, 11) == pytest.approx(0.0)
    assert lr_multiplier(7, Scheduler(name="constant"), 10) == 1.0


def test_ranks_split_each_global_batch_exactly() -> None:
    """Rank slices of a step are disjoint and together are the step's global batch,
    whatever the world size; so 1 and N processes see the same data."""
    from fsdpspec.job.layout import layout
    from fsdpspec_runners.engine.data import Batches, SequenceSource

    spec = JobSpec.model_validate(BASE | {"data": {
        "source": "synthetic", "seq_len": 8, "micro_batch_size": 1, "global_batch_size": 4}})
    source = SequenceSource(spec.data, vocab_size=320, seed=3)

    def step_rows(world: int) -> list[tuple[int, ...]]:
        rows = []
        for rank in range(world):
            batches = Batches(source, layout(spec, world).batch, rank)
            batches.load_state_dict({"position": 4})  # the second step
            rows += [tuple(b["input_ids"][0].tolist()) for b in batches.next_step()]
        return sorted(rows)

    expected = sorted(tuple(source.sequence(i)["input_ids"].tolist()) for i in range(4, 8))
    assert step_rows(1) == step_rows(2) == expected


def test_jsonl_error_names_file_and_line(tmp_path: Path) -> None:
    from fsdpspec.spec.v1 import Data
    from fsdpspec_runners.engine.data import read_documents
    from fsdpspec_runners.engine.errors import EngineError

    path = tmp_path / "docs.jsonl"
    path.write_text('{"text": "fine"}\n{"body": "no text"}\n')
    with pytest.raises(EngineError, match=r"docs.jsonl:2: .*'text'"):
        list(read_documents(Data(source="jsonl", path=str(path))))


def test_size_policy_skips_containers() -> None:
    from torch import nn

    from fsdpspec.job.introspect import module_tree
    from fsdpspec.job.units import Wrap, choose_units

    model = nn.Sequential(nn.ModuleList([nn.Linear(10, 10), nn.Linear(10, 10)]), nn.Linear(4, 4))
    units = choose_units(module_tree(model), Wrap("size", 100, (), ac_mode="none", ac_every=2))
    assert list(units.names()) == ["0.0", "0.1"]


def test_resume_picks_newest_complete_checkpoint(tmp_path: Path) -> None:
    from fsdpspec_runners.engine.checkpoint import find_resume_checkpoint
    from fsdpspec_runners.engine.errors import EngineError
    from fsdpspec_runners.engine.manifest import write_manifest

    root = tmp_path / "checkpoints"
    for name, complete in (
        ("step-00000002", True),
        ("step-00000004", True),
        (".tmp-step-00000006", True),
        ("step-00000008", False),
    ):
        (root / name).mkdir(parents=True)
        if complete:
            (root / name / ".metadata").write_bytes(b"")
            write_manifest(root / name, {"kind": "full"})
    assert find_resume_checkpoint("auto", tmp_path) == root / "step-00000004"
    assert find_resume_checkpoint("never", tmp_path) is None
    assert find_resume_checkpoint("auto", tmp_path / "fresh") is None
    with pytest.raises(EngineError, match="not a complete checkpoint"):
        find_resume_checkpoint(str(root / "step-00000008"), tmp_path)


def test_a_resumed_run_forgets_the_metrics_of_steps_it_trains_again(tmp_path: Path) -> None:
    """Steps logged after the checkpoint a run resumes from are trained again: their old
    records (and a line torn by the kill) go, so every step is logged once."""
    from fsdpspec_runners.engine.metrics import MetricsSink

    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps({"step": s, "loss": 1.0}) + "\n" for s in range(1, 7))
                    + '{"step": 7, "lo')
    spec = JobSpec.model_validate(BASE)
    MetricsSink(spec, tmp_path, True, resumed_step=4).close()
    assert [json.loads(line)["step"] for line in path.read_text().splitlines()] == [1, 2, 3, 4]
