"""NO_SHARD in full precision runs as DDP (`fsdpspec.job.layout.runs_as_ddp`): the same
training as FSDP2's, checkpointed and resumed exactly, on 2 processes (gloo)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")

from engine_jobs import final_weights, losses, merged, metrics, ok, torchrun, write_spec  # noqa: E402

pytestmark = pytest.mark.slow

# Two micro-batches a step (the first without a gradient all-reduce), clipping that
# bites, and a sharded checkpoint at step 2.
JOB = {
    "fsdp": {"sharding_strategy": "NO_SHARD"},
    "data": {"global_batch_size": 4, "micro_batch_size": 1},
    "optimizer": {"lr": 3e-3, "grad_clip_norm": 0.5},
    "train": {"max_steps": 4},
    "checkpoint": {"interval_steps": 2, "keep_last": 0},
}


def test_no_shard_trains_as_ddp_like_full_shard_and_resumes_exactly(tmp_path: Path) -> None:
    ddp, sharded, resumed = tmp_path / "ddp", tmp_path / "full-shard", tmp_path / "resumed"
    started = ok(torchrun(write_spec(ddp, JOB)))
    assert "fsdp2 NO_SHARD: as DDP (25 MiB buckets)" in started.stdout
    ok(torchrun(write_spec(sharded, merged(JOB, {"fsdp": {"sharding_strategy": "FULL_SHARD"}}))))
    # DDP's averaged gradients and its norm (each rank holds all of it) are FSDP2's.
    for ours, theirs in zip(metrics(ddp), metrics(sharded), strict=True):
        assert ours["loss"] == pytest.approx(theirs["loss"], rel=1e-5)
        assert ours["grad_norm"] == pytest.approx(theirs["grad_norm"], rel=1e-5)
    assert all(m["grad_norm"] > 0.5 for m in metrics(ddp))  # the clipping was applied
    checkpoint = str(ddp / "checkpoints" / "step-00000002")
    ok(torchrun(write_spec(resumed, merged(JOB, {"checkpoint": {"resume": checkpoint}}))))
    assert [losses(resumed)[s] for s in (3, 4)] == [losses(ddp)[s] for s in (3, 4)]
    final, again = final_weights(ddp), final_weights(resumed)
    assert final.keys() == again.keys() and all(final[k].equal(again[k]) for k in final)
