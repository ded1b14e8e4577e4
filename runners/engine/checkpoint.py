"""Checkpoints, saved atomically, in the layout ``fsdp.state_dict_type`` names.

Layout under the run directory::

    checkpoints/step-00000500/   a complete checkpoint
    checkpoints/latest           "step-00000500", rewritten after the rename
    checkpoints/.tmp-step-…      a save in progress (never resumed from)

SHARDED_STATE_DICT: ``torch.distributed.checkpoint`` (DCP) — every rank writes its own
shards (``__R_0.distcp``) and rank 0 the ``.metadata``. FULL_STATE_DICT: the seed
recipe's ``FullStateDictConfig(offload_to_cpu=True, rank0_only=True)`` — the whole model
and optimizer state are gathered to rank 0 on the CPU, and rank 0 alone writes them,
with the schedule, data position, step and every rank's RNG, as one file
``full_state_dict.pt`` (``torch.load`` reads it); on resume every rank maps the file and
keeps its own shards.

A save writes into ``.tmp-step-N``, renames it to ``step-N`` once everything is on disk,
then updates ``latest``; a kill at any moment leaves the previous checkpoint intact.
Resume only considers ``step-N`` directories holding DCP's ``.metadata`` or the full
state dict file, so a half-written save is never chosen.

Test hook: ``FSDPSPEC_TEST_PAUSE_IN_SAVE=<seconds>`` sleeps after the shards are written
and before the rename, so a test can kill a rank mid-save.
"""

from __future__ import annotations

import dataclasses
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
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_state_dict,
    set_state_dict,
)

from fsdpspec_runners.engine.dist import Runtime
from fsdpspec_runners.engine.errors import EngineError, first_line

PAUSE_ENV = "FSDPSPEC_TEST_PAUSE_IN_SAVE"
FULL_FILE = "full_state_dict.pt"
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
    """A checkpoint is complete once DCP's metadata (or the full state dict file) is
    inside its final name."""
    return path.name.startswith(_PREFIX) and (
        (path / ".metadata").is_file() or (path / FULL_FILE).is_file())


def complete_checkpoints(run_dir: Path) -> list[Path]:
    """Complete checkpoints, oldest first."""
    root = checkpoint_root(run_dir)
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and is_complete(p))


def find_resume_checkpoint(resume: str, run_dir: Path) -> Path | None:
    """The checkpoint to continue from: ``never`` → None; ``auto`` → the newest complete
    one in the run directory (None on a fresh run); otherwise the given path."""
    if resume == "never":
        return None
    if resume == "auto":
        found = complete_checkpoints(run_dir)
        return found[-1] if found else None
    path = Path(resume)
    if not is_complete(path):
        raise EngineError(
            f"checkpoint.resume: {path} is not a complete checkpoint (step-N with .metadata "
            f"or {FULL_FILE})"
        )
    return path


def _rng_key(rank: int) -> str:
    return f"rng_rank{rank}"


def _rng_state() -> dict[str, torch.Tensor]:
    state = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def _extras(state: TrainState) -> dict[str, Any]:
    """What a checkpoint holds besides model, optimizer and RNG."""
    return {
        "scheduler": state.scheduler.state_dict(),
        "data": state.batches.state_dict(),
        "step": state.step,
    }


def _restore_extras(state: TrainState, extras: dict[str, Any]) -> None:
    state.scheduler.load_state_dict(extras["scheduler"])
    state.batches.load_state_dict(extras["data"])
    state.step = int(extras["step"])


def _restore_rng(rng: dict[str, torch.Tensor]) -> None:
    torch.set_rng_state(rng["cpu"])
    if "cuda" in rng:
        torch.cuda.set_rng_state(rng["cuda"])


def _sharded_state(state: TrainState, runtime: Runtime) -> dict[str, Any]:
    model_sd, optim_sd = get_state_dict(state.model, state.optimizer)
    return {
        "model": model_sd,
        "optim": optim_sd,
        **_extras(state),
        # Unique per rank, so DCP keeps every rank's own generator state.
        _rng_key(runtime.rank): _rng_state(),
    }


def _save_full(state: TrainState, directory: Path, runtime: Runtime) -> None:
    """Gather the full state to rank 0 (on the CPU); rank 0 alone writes one file.

    From GPUs the gather lands in rank 0's host memory only (``cpu_offload``). A CPU run
    is gathered on every rank: FSDP1 cannot offload from the CPU to the CPU (it
    crashes), and the memory is host memory either way."""
    on_gpu = runtime.device.type == "cuda"
    options = StateDictOptions(full_state_dict=True, cpu_offload=on_gpu)
    model_sd, optim_sd = get_state_dict(state.model, state.optimizer, options=options)
    rngs: list[Any] | None = [None] * runtime.world_size if runtime.is_main else None
    dist.gather_object(_rng_state(), rngs, dst=0)
    if not runtime.is_main:
        return
    payload = {"model": model_sd, "optim": optim_sd, **_extras(state), "rng": rngs}
    with open(directory / FULL_FILE, "wb") as fh:
        torch.save(payload, fh)
        fh.flush()
        os.fsync(fh.fileno())


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
    if full_state_dict:
        _save_full(state, tmp, runtime)
    else:
        dcp.save(_sharded_state(state, runtime), checkpoint_id=str(tmp))
    dist.barrier()  # every rank's shards and rank 0's metadata (or rank 0's file) are written
    pause = float(os.environ.get(PAUSE_ENV, "0") or 0)
    if pause > 0:
        time.sleep(pause)
    if runtime.is_main:
        _publish(tmp, final)
        _rotate(run_dir, keep_last)
    dist.barrier()
    return final


def _publish(tmp: Path, final: Path) -> None:
    """Rename the finished save into place, then point ``latest`` at it."""
    if final.exists():  # a fresh run (resume: never) overwriting an old step of the same number
        trash = final.with_name(f".trash-{final.name}")
        os.replace(final, trash)
        shutil.rmtree(trash)
    os.replace(tmp, final)
    _fsync_dir(final.parent)
    marker = final.parent / "latest"
    marker_tmp = final.parent / ".latest.tmp"
    marker_tmp.write_text(final.name + "\n", encoding="utf-8")
    os.replace(marker_tmp, marker)
    _fsync_dir(final.parent)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


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


def load_checkpoint(state: TrainState, path: Path, runtime: Runtime) -> None:
    """Restore model, optimizer, schedule, data position, RNG and step from ``path``, in
    whichever layout it was saved."""
    if (path / FULL_FILE).is_file():
        _load_full(state, path, runtime)
    else:
        _load_sharded(state, path, runtime)


def _load_sharded(state: TrainState, path: Path, runtime: Runtime) -> None:
    loaded = _sharded_state(state, runtime)
    saved_keys = dcp.FileSystemReader(str(path)).read_metadata().state_dict_metadata
    rng_key = _rng_key(runtime.rank)
    if not any(k.startswith(rng_key + ".") or k == rng_key for k in saved_keys):
        loaded.pop(rng_key)  # saved by fewer ranks: this rank keeps its seeded generator
    dcp.load(loaded, checkpoint_id=str(path))
    _set_model_and_optimizer(state, loaded["model"], loaded["optim"], StateDictOptions())
    _restore_extras(state, loaded)
    if rng_key in loaded:
        _restore_rng(loaded[rng_key])


def _set_model_and_optimizer(
    state: TrainState, model_sd: dict[str, Any], optim_sd: dict[str, Any],
    options: StateDictOptions,
) -> None:
    """Not strict: a parameter may have no optimizer state yet (every step so far
    skipped by the fp16 loss scaler, or a rank's FSDP1 shard holding none of it), and
    then it starts fresh exactly as it would have. The model's keys are the engine's
    own, saved from the same model."""
    set_state_dict(state.model, state.optimizer, model_state_dict=model_sd,
                   optim_state_dict=optim_sd, options=dataclasses.replace(options, strict=False))


def _load_full(state: TrainState, path: Path, runtime: Runtime) -> None:
    """Every rank maps the one file (no copy in memory until a tensor is read) and keeps
    its own shards of it: no rank waits on another's broadcast."""
    try:
        payload = torch.load(path / FULL_FILE, map_location="cpu", weights_only=True, mmap=True)
    except Exception as exc:  # a truncated or foreign file: say which
        raise EngineError(f"cannot read {path / FULL_FILE}: {first_line(exc)}") from None
    _set_model_and_optimizer(state, payload["model"], payload["optim"],
                             StateDictOptions(full_state_dict=True))
    _restore_extras(state, payload)
    rngs = payload["rng"]
    if runtime.rank < len(rngs):  # saved by fewer ranks: keep this rank's seeded generator
        _restore_rng(rngs[runtime.rank])
