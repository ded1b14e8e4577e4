"""Throughput, MFU, peak memory, and where the numbers go: metrics.jsonl, the console
(or the live bar of `fsdpspec run`), the trackers and the run's events."""

from __future__ import annotations

import json
import math
import os
import resource
from pathlib import Path
from typing import Any

import torch
from torch import nn

from fsdpspec.atomicio import write_text
from fsdpspec.job.job import Job
from fsdpspec.job.rundir import RunDir
from fsdpspec.jsonfile import JsonFileError, parse, read_regular
from fsdpspec.runfiles.events import RUN_LIMITS, append_event, open_for_append
from fsdpspec.runfiles.progress import PROGRESS_ENV, progress_line
from fsdpspec.semantics import model_flops_per_token
from fsdpspec.spec.v1 import JobSpec
from fsdpspec_runners.engine.errors import EngineError
from fsdpspec_runners.engine.trackers import Tracker, open_trackers

_GIB = 1 << 30


def flops_per_token(model: nn.Module, job: Job) -> float:
    """MFU's FLOPs per token: the job's (`Job.flops_per_token`, what the plan counts,
    introspected models included). A model without a geometry (a factory without
    `model.geometry`) counts its own parameters (FSDP2's DTensors report their global
    shape) and no attention term."""
    planned = job.flops_per_token()
    if planned is not None:
        return planned
    return model_flops_per_token(parameters=sum(p.numel() for p in model.parameters()),
                                 num_layers=0, q_width=0, seq_len=job.batch.seq)


def peak_tflops(spec: JobSpec) -> float:
    """The device's dense peak for the compute dtype (0 when unknown)."""
    return spec.device().peak_tflops(spec.fsdp.mixed_precision.param_dtype)


def peak_memory_gib(device: torch.device) -> dict[str, float]:
    """CUDA max allocated / reserved; on the CPU the process's peak resident set."""
    if device.type == "cuda":
        return {
            "peak_mem_allocated_gib": torch.cuda.max_memory_allocated(device) / _GIB,
            "peak_mem_reserved_gib": torch.cuda.max_memory_reserved(device) / _GIB,
        }
    return {"peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / _GIB}


def _forget_steps_after(path: Path, step: int) -> None:
    """Drop the records of steps after ``step`` (the checkpoint a run resumes from): they
    are trained again, and a step logged twice breaks every plot. Rewritten atomically."""
    if not os.path.lexists(path):
        return
    try:
        raw = read_regular(path, RUN_LIMITS.max_bytes)
    except JsonFileError as exc:
        raise EngineError(exc.coded()) from None
    lines = raw.decode("utf-8", errors="replace").splitlines(keepends=True)
    kept = [line for line in lines if _logged_step(line) <= step]
    if len(kept) == len(lines):
        return
    write_text(path, "".join(kept))


def _logged_step(line: str) -> float:
    """The step of a metrics line; a line torn by a kill counts as unlogged (dropped)."""
    try:
        step = parse(line, "metrics.jsonl", RUN_LIMITS).get("step")
    except (JsonFileError, AttributeError):
        return math.inf
    return step if isinstance(step, int) and not isinstance(step, bool) else math.inf


class MetricsSink:
    """Rank 0's outputs for one run: metrics.jsonl, the trackers, the console (plain
    lines, or progress records for `fsdpspec run`'s live bar) and events.jsonl."""

    def __init__(self, spec: JobSpec, run_dir: Path, enabled: bool, resumed_step: int) -> None:
        self._enabled = enabled
        self._run_dir = run_dir
        self._max_steps = spec.train.max_steps
        self._jsonl = None
        self._trackers: list[Tracker] = []
        self._progress = enabled and os.environ.get(PROGRESS_ENV) == "1"
        if not enabled:
            return
        if spec.logging.jsonl:
            path = RunDir(run_dir).metrics
            _forget_steps_after(path, resumed_step)
            try:
                self._jsonl = open_for_append(path)
            except OSError as exc:
                raise EngineError(f"{path}: {exc.strerror}") from None
        self._trackers = open_trackers(spec, run_dir)

    def started(self, step: int, world_size: int, resumed_from: Path | None) -> None:
        """Record a launch: fresh, or resumed from a checkpoint at ``step``."""
        if self._enabled:
            append_event(self._run_dir, "start", step=step, max_steps=self._max_steps,
                         world_size=world_size,
                         resumed_from=str(resumed_from) if resumed_from else None)
            self._emit_progress({"kind": "start", "step": step, "total": self._max_steps})

    def write(self, record: dict[str, Any]) -> None:
        """One metrics record: a jsonl line, tracker scalars, a console line (on a
        terminal a progress record instead, but the last step is always a line)."""
        if not self._enabled:
            return
        if self._jsonl is not None:
            self._jsonl.write(json.dumps(record) + "\n")
            self._jsonl.flush()
        scalars = {k: v for k, v in record.items()
                   if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool)}
        for tracker in self._trackers:
            tracker.log(scalars, record["step"])
        evaluated = "eval_loss" in record  # an evaluation is always a line of its own
        if not evaluated:
            self._emit_progress({"kind": "step", **record})
        if evaluated or not self._progress or record["step"] == self._max_steps:
            print(_console_line(record, self._max_steps), flush=True)

    def checkpointed(self, step: int, path: Path) -> None:
        """Record a saved checkpoint."""
        if self._enabled:
            append_event(self._run_dir, "checkpoint", step=step, path=str(path))
            self._emit_progress({"kind": "checkpoint", "step": step, "path": path.name})

    def ended(self, outcome: str, step: int, message: str | None = None) -> None:
        """Record how this launch ended: finished, stopped or failed."""
        if self._enabled:
            append_event(self._run_dir, "end", outcome=outcome, step=step, message=message)

    def _emit_progress(self, record: dict[str, Any]) -> None:
        if self._progress:
            print(progress_line(record), flush=True)

    def close(self) -> None:
        if self._jsonl is not None:
            self._jsonl.close()
        for tracker in self._trackers:
            tracker.close()


def _console_line(record: dict[str, Any], max_steps: int) -> str:
    if "eval_loss" in record:
        quality = (f"perplexity {record['eval_perplexity']:.2f}" if "eval_perplexity" in record
                   else f"reward accuracy {record['eval_rewards/accuracies']:.2f}")  # DPO
        return f"step {record['step']}/{max_steps}  eval_loss {record['eval_loss']:.4f}  {quality}"
    accuracy = record.get("rewards/accuracies")  # DPO
    return (
        f"step {record['step']}/{max_steps}  loss {record['loss']:.4f}  "
        + (f"reward accuracy {accuracy:.2f}  " if accuracy is not None else "")
        + f"lr {record['lr']:.3g}  grad_norm {record['grad_norm']:.3f}  "
        f"tok/s {record['tokens_per_s']:.0f}  mfu {record['mfu']:.2%}"
    )
