"""Sharded checkpoints with ``torch.distributed.checkpoint`` (DCP), saved atomically.

Layout under the run directory::

    checkpoints/step-00000500/   a complete checkpoint (DCP shards + .metadata)
    checkpoints/latest           "step-00000500", rewritten after the rename
    checkpoints/.tmp-step-…      a save in progress (never resumed from)

A save writes into ``.tmp-step-N``; once every rank's shards and the metadata are on
disk, rank 0 writes ``manifest.json`` (each file's size and sha256), renames the
directory to ``step-N`` and updates ``latest``; a kill at any moment leaves the previous
checkpoint intact. Resume only considers ``step-N`` directories holding DCP's
``.metadata``, and loads one only after its manifest verifies: a truncated, flipped or
missing file makes it fall back to the newest checkpoint that verifies, saying so.

Test hook: ``FSDPSPEC_TEST_PAUSE_IN_SAVE=<seconds>`` sleeps after the shards are written
and before the rename, so a test can kill a rank mid-save.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_state_dict,
    set_state_dict,
)

from fsdpspec.atomicio import publish_dir, write_text
from fsdpspec_runners.engine.dist import Runtime, console
from fsdpspec_runners.engine.errors import EngineError, first_line
from fsdpspec_runners.engine.manifest import verification_problem, write_manifest

PAUSE_ENV = "FSDPSPEC_TEST_PAUSE_IN_SAVE"
_PREFIX = "step-"


@dataclass
class TrainState:
    """Everything a checkpoint holds besides the DCP-managed model and optimizer."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: Any
    batches: Any
    step: int = 0


def checkpoint_root(run_dir: Path) -> Path:
    return run_dir / "checkpoints"


def step_dir_name(step: int) -> str:
    return f"{_PREFIX}{step:08d}"


def is_complete(path: Path) -> bool:
    """A checkpoint is complete once DCP's metadata is inside its final name."""
    return path.name.startswith(_PREFIX) and (path / ".metadata").is_file()


def complete_checkpoints(run_dir: Path) -> list[Path]:
    """Complete checkpoints, oldest first."""
    root = checkpoint_root(run_dir)
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and is_complete(p))


def find_resume_checkpoint(resume: str, run_dir: Path, say=print) -> Path | None:
    """The checkpoint to continue from: ``never`` → None; ``auto`` → the newest complete
    one in the run directory that verifies (None on a fresh run; one line through
    ``say`` when newer ones do not verify); otherwise the given path, verified."""
    if resume == "never":
        return None
    if resume == "auto":
        return _newest_verifying(complete_checkpoints(run_dir), say)
    path = Path(resume)
    if not is_complete(path):
        raise EngineError(
            f"checkpoint.resume: {path} is not a complete checkpoint (step-N with .metadata)"
        )
    problem = verification_problem(path)
    if problem:
        raise EngineError(f"checkpoint.resume: {path} does not verify: {problem}")
    return path


def _newest_verifying(candidates: list[Path], say) -> Path | None:
    rejected: list[str] = []
    for path in reversed(candidates):
        problem = verification_problem(path)
        if problem is None:
            if rejected:
                say(f"checkpoint {'; '.join(rejected)}: resuming from {path.name} instead")
            return path
        rejected.append(f"{path.name} does not verify ({problem})")
    if rejected:
        raise EngineError(f"no checkpoint verifies: {'; '.join(rejected)}; remove "
                          f"{candidates[0].parent} or set checkpoint.resume: never")
    return None


def choose_resume_checkpoint(resume: str, run_dir: Path, runtime: Runtime) -> Path | None:
    """find_resume_checkpoint on rank 0 (one reader of every byte, one message), its
    answer broadcast to every rank."""
    answer: list = [None, None]
    if runtime.is_main:
        try:
            answer[0] = find_resume_checkpoint(resume, run_dir, lambda m: console(runtime, m))
        except EngineError as exc:
            answer[1] = str(exc)
    dist.broadcast_object_list(answer, src=0)
    if answer[1] is not None:
        raise EngineError(answer[1])
    return answer[0]


def _rng_key(rank: int) -> str:
    return f"rng_rank{rank}"


def _rng_state() -> dict[str, torch.Tensor]:
    state = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def _layout(full_state_dict: bool, runtime: Runtime) -> StateDictOptions:
    """SHARDED_STATE_DICT: each rank's shards. FULL_STATE_DICT: unsharded tensors; from
    GPUs gathered to rank 0 on the CPU, on a CPU run every rank holds them (DCP writes
    each tensor once either way)."""
    on_gpu = runtime.device.type == "cuda"
    return StateDictOptions(full_state_dict=full_state_dict, cpu_offload=full_state_dict and on_gpu)


def _checkpoint_state(state: TrainState, runtime: Runtime, full_state_dict: bool) -> dict[str, Any]:
    options = _layout(full_state_dict, runtime)
    model_sd, optim_sd = get_state_dict(state.model, state.optimizer, options=options)
    return {
        "model": model_sd,
        "optim": optim_sd,
        "scheduler": state.scheduler.state_dict(),
        "data": state.batches.state_dict(),
        "step": state.step,
        # Unique per rank, so DCP keeps every rank's own generator state.
        _rng_key(runtime.rank): _rng_state(),
    }


def save_checkpoint(
    state: TrainState, run_dir: Path, keep_last: int, runtime: Runtime, *, full_state_dict: bool
) -> Path:
    """Save atomically (temp dir → rename → ``latest``), then rotate old checkpoints."""
    root = checkpoint_root(run_dir)
    final = root / step_dir_name(state.step)
    tmp = root / f".tmp-{final.name}"
    if runtime.is_main:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    dist.barrier()
    try:
        dcp.save(_checkpoint_state(state, runtime, full_state_dict), checkpoint_id=str(tmp))
    # DCP wraps each rank's failure in a BaseException; torch's zip writer drops errno.
    except (Exception, CheckpointException) as exc:
        raise EngineError(_save_failure(final, exc)) from None
    dist.barrier()  # every rank's shards and rank 0's metadata are written
    if runtime.is_main:
        write_manifest(tmp)
    pause = float(os.environ.get(PAUSE_ENV, "0") or 0)
    if pause > 0:
        time.sleep(pause)
    if runtime.is_main:
        _publish(tmp, final)
        _rotate(run_dir, keep_last)
    dist.barrier()
    return final


_FULL_BELOW = 64 << 20  # bytes free under which a failed save is blamed on a full disk


def _save_failure(final: Path, exc: BaseException) -> str:
    """One line for a save that failed: a full disk by name (the usual cause, which
    torch reports as "unexpected pos"), anything else by its first line."""
    free = shutil.disk_usage(final.parent).free
    if free < _FULL_BELOW:
        return (f"checkpoint {final.name}: no space left on the device holding "
                f"{final.parent} ({free >> 20} MiB free); free space or lower "
                "checkpoint.keep_last")
    inner = getattr(exc, "failures", {})
    cause = next(iter(inner.values()))[0] if inner else exc
    return f"checkpoint {final.name} failed: {first_line(cause)}"


def _publish(tmp: Path, final: Path) -> None:
    """Rename the finished save into place, then point ``latest`` at it."""
    publish_dir(tmp, final)  # a fresh run (resume: never) may replace an old step-N
    write_text(final.parent / "latest", final.name + "\n")


def _rotate(run_dir: Path, keep_last: int) -> None:
    """Delete all but the newest ``keep_last`` checkpoints (0 keeps all), and what
    interrupted saves or deletions left behind. A checkpoint is renamed out of the
    ``step-`` namespace before it is deleted, so a half-deleted one is never resumed."""
    root = checkpoint_root(run_dir)
    complete = complete_checkpoints(run_dir)
    expired = complete[:-keep_last] if keep_last and len(complete) > keep_last else []
    for old in expired:
        os.replace(old, old.with_name(f".trash-{old.name}"))
    for leftover in [*root.glob(".tmp-*"), *root.glob(".trash-*")]:
        shutil.rmtree(leftover, ignore_errors=True)


def load_checkpoint(
    state: TrainState, path: Path, runtime: Runtime, *, full_state_dict: bool
) -> None:
    """Restore model, optimizer, schedule, data position, RNG and step from ``path``."""
    loaded = _checkpoint_state(state, runtime, full_state_dict)
    saved_keys = dcp.FileSystemReader(str(path)).read_metadata().state_dict_metadata
    rng_key = _rng_key(runtime.rank)
    if not any(k.startswith(rng_key + ".") or k == rng_key for k in saved_keys):
        loaded.pop(rng_key)  # saved by fewer ranks: this rank keeps its seeded generator
    dcp.load(loaded, checkpoint_id=str(path))
    # A full state dict is complete on rank 0 (only there, from GPUs): rank 0 sends it.
    options = StateDictOptions(
        full_state_dict=full_state_dict, broadcast_from_rank0=full_state_dict
    )
    set_state_dict(
        state.model,
        state.optimizer,
        model_state_dict=loaded["model"],
        optim_state_dict=loaded["optim"],
        options=options,
    )
    state.scheduler.load_state_dict(loaded["scheduler"])
    state.batches.load_state_dict(loaded["data"])
    state.step = int(loaded["step"])
    if rng_key in loaded:
        torch.set_rng_state(loaded[rng_key]["cpu"])
        if "cuda" in loaded[rng_key]:
            torch.cuda.set_rng_state(loaded[rng_key]["cuda"])
