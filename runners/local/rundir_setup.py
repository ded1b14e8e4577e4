"""The run directory: created for a new job, reused only by the same job.

A directory holding another job's resolved-spec.json is never reused: the engine would
resume from that job's checkpoints. The same job may change how long it trains, how it
logs and saves, and how it is launched; anything else (model, data, sharding,
optimizer…) makes it another job.

Launching includes the layout: after a preemption a job often gets fewer or more nodes.
A run resumed on another node or process count (and so perhaps another micro-batch), or
with another tensor- or context-parallel degree, with the same global batch reshards its
checkpoint (DCP reshards a sharded one; a full
state dict is sharded anew as it loads) and continues from the same step and data
position, which count global sequences, not per-rank ones.
"""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path
from typing import Any

from fsdpspec.job.rundir import complete_checkpoints
from fsdpspec.jsonfile import JsonFileError, load_object
from fsdpspec.runfiles.resolved import (
    FILENAME,
    MODEL_CONFIG_DIGEST,
    RESOLVED_LIMITS,
    model_config_digest,
    resolved_job,
    write_resolved_spec,
)
from fsdpspec.spec.v1 import JobSpec
from fsdpspec_runners.local.runlock import is_lock_file

# Fields a resumed run may change that lay it out anew (the global batch stays): the
# parallel degrees too, since DCP reshards a checkpoint onto any mesh.
LAYOUT_CHANGES = ("resources.nodes", "resources.gpus_per_node", "data.micro_batch_size",
                  "parallelism.tensor_parallel", "parallelism.context_parallel",
                  "parallelism.expert_parallel")
# Fields that may differ between a run and its resumption (dotted prefixes).
RESUMABLE_CHANGES = (
    *LAYOUT_CHANGES, "resources.cpus_per_node", "resources.host_memory_gib",
    "train.max_steps", "logging.", "checkpoint.interval_steps", "checkpoint.keep_last",
    "checkpoint.final.", "checkpoint.resume", "launch.", "metadata.description",
    "metadata.labels", "lint.",
    # The directory is the job's identity already: "./runs/x", "runs/x/" and the
    # absolute path are one directory, however checkpoint.dir spells it.
    "checkpoint.dir",
)


# Written by a scheduler before `fsdpspec run` starts (the job's log and its spec), so a
# new run directory may already hold it.
SCHEDULER_DIR = "slurm"


class RunDirError(ValueError):
    """The run directory cannot be used for this job; the message is one line."""


def _flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(data, dict):
        return {prefix: data}
    flat: dict[str, Any] = {}
    for key, value in data.items():
        flat.update(_flatten(value, f"{prefix}{key}" if not prefix else f"{prefix}.{key}"))
    return flat


def job_differences(previous: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """Dotted fields whose values differ and that make it another job."""
    old, new = _flatten(previous), _flatten(current)
    changed = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))
    return [k for k in changed if not k.startswith(RESUMABLE_CHANGES)]


def run_dir_path(spec: JobSpec) -> Path:
    """checkpoint.dir as one absolute path (relative to the working directory, `~`
    expanded, `.` and `..` folded), so that every spelling names one directory."""
    return Path(os.path.abspath(os.path.expanduser(spec.run_dir())))


def _previous_document(run_dir: Path) -> dict[str, Any] | None:
    path = run_dir / FILENAME
    if not os.path.lexists(path):
        return None
    try:
        document = load_object(path, RESOLVED_LIMITS)
    except JsonFileError as exc:
        raise RunDirError(f"{exc.coded()}: remove {run_dir} or set checkpoint.dir to another "
                          "directory") from None
    spec = document.get("spec")
    if not isinstance(spec, dict) or not isinstance(spec.get("metadata"), dict):
        raise RunDirError(f"{path} holds no spec: remove {run_dir} or set checkpoint.dir")
    return document


def _builds_the_same_attention(spec: JobSpec, document: dict[str, Any]) -> bool:
    """Whether the run recorded in ``document`` built the attention ``spec`` builds: a
    run recorded before `auto` was the default wrote its then default, sdpa, and a run
    since records what `auto` resolved to; `auto` is the same job as what it resolves to."""
    recorded = document.get("job") or {}
    written = document["spec"].get("model", {}).get("attention")
    built = recorded.get("attention") or (written if written != "auto" else None)
    job = resolved_job(spec)
    return built is not None and job is not None and built == job.attention


def _check_same_job(spec: JobSpec, run_dir: Path, document: dict[str, Any]) -> None:
    previous = document["spec"]
    name = previous["metadata"].get("name")
    if name != spec.metadata.name:
        raise RunDirError(f"{run_dir} holds a run of job {name!r}, not "
                          f"{spec.metadata.name!r}: set checkpoint.dir to another directory")
    differences = job_differences(previous, spec.as_json_data())
    if "model.attention" in differences and _builds_the_same_attention(spec, document):
        differences.remove("model.attention")
    if differences:
        shown = ", ".join(differences[:3]) + (" …" if len(differences) > 3 else "")
        raise RunDirError(f"{run_dir} holds a run of {name!r} with a different {shown}: "
                          "set checkpoint.dir to a new directory, or remove the old run")
    if document.get(MODEL_CONFIG_DIGEST) != model_config_digest(spec):
        raise RunDirError(f"{run_dir} holds a run of {name!r} whose model config.json had "
                          "other contents: set checkpoint.dir to a new directory, or "
                          "remove the old run")


def resumes_a_checkpoint(spec: JobSpec, run_dir: Path) -> bool:
    """Whether the engine will continue from a checkpoint: one named by checkpoint.resume,
    or (auto) one the run directory holds; a run stopped before its first checkpoint
    starts again at step 1."""
    return spec.checkpoint.resume != "auto" or bool(complete_checkpoints(run_dir))


def layout_change(spec: JobSpec, run_dir: Path) -> str | None:
    """One line saying how a resumed run's layout differs from its run directory's; None
    for a new run, the same layout, or a directory the same-job check refuses."""
    try:
        document = _previous_document(run_dir) if run_dir.is_dir() else None
    except RunDirError:
        return None
    if document is None or job_differences(document["spec"], spec.as_json_data()) \
            or not resumes_a_checkpoint(spec, run_dir):
        return None
    old, new = _flatten(document["spec"]), _flatten(spec.as_json_data())
    changed = [f"{k} {old.get(k)} → {new.get(k)}" for k in LAYOUT_CHANGES
               if old.get(k) != new.get(k)]
    if not changed:
        return None
    before = old["resources.nodes"] * old["resources.gpus_per_node"]
    processes = f"{spec.world_size} process{'es' if spec.world_size > 1 else ''}"
    count = f"{processes}, was {before}" if before != spec.world_size else f"the same {processes}"
    return (f"new layout: {count} ({', '.join(changed)}); "
            "the checkpoint is resharded and the run continues at its step and data "
            f"position (global batch {spec.data.global_batch_size})")


def _bookkeeping(path: Path) -> bool:
    """Whether ``path`` is a lock or the scheduler's directory, not a run's output."""
    return is_lock_file(path) or (path.name == SCHEDULER_DIR and path.is_dir())


# The files of a run that fsdpspec and the engine read and append to.
RUN_FILES = ("metrics.jsonl", "events.jsonl", "checkpoints/latest")


def _check_run_files(run_dir: Path) -> None:
    """Refuse a run directory whose run files are not regular files: a FIFO would block
    the engine's first read or append forever, a link would be written through."""
    for name in RUN_FILES:
        path = run_dir / name
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise RunDirError(f"{path} cannot be read ({exc.strerror})") from None
        if not stat.S_ISREG(mode):
            raise RunDirError(f"{path} is not a regular file (a FIFO, a link, a device …): "
                              f"remove it, or set checkpoint.dir to another directory")


def prepare_run_dir(spec: JobSpec, run_dir: Path) -> bool:
    """Create (or check and reuse) the run directory and write resolved-spec.json.

    Returns True when the directory already held this job (the engine resumes it).
    """
    if run_dir.exists() and not run_dir.is_dir():
        raise RunDirError(f"run directory {run_dir} exists and is not a directory")
    previous = _previous_document(run_dir) if run_dir.is_dir() else None
    if previous is not None:
        _check_same_job(spec, run_dir, previous)
        _check_run_files(run_dir)
        if spec.checkpoint.resume == "never":
            raise RunDirError(f"{run_dir} already holds a run of {spec.metadata.name!r} and "
                              "checkpoint.resume is never: remove it, or use resume: auto")
    elif run_dir.is_dir() and any(not _bookkeeping(p) for p in run_dir.iterdir()):
        raise RunDirError(f"{run_dir} exists and is not an fsdpspec run directory: "
                          "set checkpoint.dir to another directory")
    try:
        write_resolved_spec(spec, run_dir)
    except OSError as exc:
        raise RunDirError(f"cannot write to {run_dir}: {exc.strerror or exc}") from None
    return previous is not None


def join_run_dir(spec: JobSpec, run_dir: Path, *, timeout_s: float = 300.0) -> None:
    """On a node after the first of a multi-node job: wait for the first node to write
    resolved-spec.json into the shared run directory, then check that it is this job.
    Every node preparing the directory at once would race (and each would find the
    others' file)."""
    path = run_dir / FILENAME
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > deadline:
            raise RunDirError(f"{path} did not appear in {timeout_s:.0f} s: start node 0 "
                              "first, on a run directory every node shares")
        time.sleep(0.5)
    previous = _previous_document(run_dir)
    assert previous is not None  # the file exists
    _check_same_job(spec, run_dir, previous)
