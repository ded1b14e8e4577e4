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

A save writes into ``.tmp-step-N``; once everything is on disk, rank 0 writes
``manifest.json`` (each file's size and sha256), renames the directory to ``step-N`` and
updates ``latest``; a kill at any moment leaves the previous checkpoint intact. Resume
only considers ``step-N`` directories holding DCP's ``.metadata`` or the full state dict
file, and loads one only after its manifest verifies: a truncated, flipped or missing
file makes it fall back to the newest checkpoint that verifies, saying so.

"""

from __future__ import annotations

import dataclasses
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.default_planner import (
    DefaultLoadPlanner,
    create_default_local_load_plan,
)
from torch.distributed.checkpoint.planner import LoadPlan
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_state_dict,
    set_state_dict,
)

from fsdpspec.atomicio import publish_dir, write_text
from fsdpspec.job.job import Job
from fsdpspec.job.rundir import (
    ENTRY_FILES,
    FULL_FILE,
    LATEST,
    RunDir,
    complete_checkpoints,
    is_complete,
    step_dir_name,
)
from fsdpspec_runners.engine import faults
from fsdpspec_runners.engine.dist import Runtime, console
from fsdpspec_runners.engine.errors import EngineError, first_line
from fsdpspec_runners.engine.manifest import verification_problem, write_manifest


@dataclass
class TrainState:
    """Everything a checkpoint holds besides the DCP-managed model and optimizer."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: Any
    batches: Any
    step: int = 0
    # A LoRA run saves its trainable parameters only: the frozen base is read from
    # model.weights (or the seeded initialisation) again on resume.
    trainable_only: bool = False

    def options(self, **kw: Any) -> StateDictOptions:
        return StateDictOptions(ignore_frozen_params=self.trainable_only, **kw)


def model_state_held(job: Job) -> dict[str, Any]:
    """What a checkpoint of ``job`` holds of the model, as its manifest records it: every
    weight, or for a LoRA (``trainable_only``) the adapters of this method, rank, scale
    and targets, and the modules trained whole."""
    peft = job.spec.peft
    if peft is None:
        return {"kind": "full"}
    return {"kind": "adapter", "method": peft.method, "r": peft.r, "alpha": peft.alpha,
            "targets": sorted(job.lora_targets),
            **({"parameters": sorted(peft.target_parameters)} if peft.target_parameters else {}),
            "modules_to_save": sorted(peft.modules_to_save)}


def checkpoint_root(run_dir: Path) -> Path:
    return RunDir(run_dir).checkpoints


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
            f"checkpoint.resume: {path} is not a complete checkpoint (step-N with .metadata "
            f"or {FULL_FILE})"
        )
    problem = verification_problem(path, ENTRY_FILES)
    if problem:
        raise EngineError(f"checkpoint.resume: {path} does not verify: {problem}")
    return path


def _newest_verifying(candidates: list[Path], say) -> Path | None:
    rejected: list[str] = []
    for path in reversed(candidates):
        problem = verification_problem(path, ENTRY_FILES)
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
    model_sd, optim_sd = get_state_dict(state.model, state.optimizer, options=state.options())
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
    options = state.options(full_state_dict=True, cpu_offload=on_gpu)
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
    state: TrainState, run_dir: Path, keep_last: int, runtime: Runtime, *, full_state_dict: bool,
    holds: dict[str, Any],
) -> Path:
    """Save atomically (temp dir → rename → ``latest``), then rotate old checkpoints;
    the manifest records what it ``holds`` (model_state_held)."""
    root = checkpoint_root(run_dir)
    final = root / step_dir_name(state.step)
    tmp = root / f".tmp-{final.name}"
    if runtime.is_main:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    dist.barrier()
    try:
        if full_state_dict:
            _save_full(state, tmp, runtime)
        else:
            dcp.save(_sharded_state(state, runtime), checkpoint_id=str(tmp))
    # DCP wraps each rank's failure in a BaseException; torch's zip writer drops errno.
    except (Exception, CheckpointException) as exc:
        raise EngineError(_save_failure(final, exc)) from None
    dist.barrier()  # every rank's shards and rank 0's metadata (or rank 0's file) are written
    if runtime.is_main:
        write_manifest(tmp, holds)
    faults.in_save()
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
    write_text(final.parent / LATEST, final.name + "\n")


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


class _LoadPlanner(DefaultLoadPlanner):
    """DefaultLoadPlanner without its guess at a checkpoint from torch < 2.4: when the
    metadata has a key this rank's state lacks, it re-flattens the state the 2.3 way and
    uses that if the key is there. Under FSDP1 a rank whose shard holds none of a
    parameter (3 ranks, an MoE layer's experts) drops that ShardedTensor from its state,
    so the guess fired and the load failed ("Missing key in checkpoint state_dict:
    data"). This engine's checkpoints are all 2.4+; a key this rank holds must still be
    in the checkpoint (strict)."""

    def create_local_plan(self) -> LoadPlan:
        assert self.metadata is not None
        return create_default_local_load_plan(self.state_dict, self.metadata,
                                              not self.allow_partial_load)


def _load_sharded(state: TrainState, path: Path, runtime: Runtime) -> None:
    loaded = _sharded_state(state, runtime)
    saved_keys = dcp.FileSystemReader(str(path)).read_metadata().state_dict_metadata
    rng_key = _rng_key(runtime.rank)
    if not any(k.startswith(rng_key + ".") or k == rng_key for k in saved_keys):
        loaded.pop(rng_key)  # saved by fewer ranks: this rank keeps its seeded generator
    dcp.load(loaded, checkpoint_id=str(path), planner=_LoadPlanner())
    _set_model_and_optimizer(state, loaded["model"], loaded["optim"], state.options())
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
                             state.options(full_state_dict=True))
    _restore_extras(state, payload)
    rngs = payload["rng"]
    if runtime.rank < len(rngs):  # saved by fewer ranks: keep this rank's seeded generator
        _restore_rng(rngs[runtime.rank])
