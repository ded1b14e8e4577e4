"""Throughput, MFU, peak memory, and where the numbers go: metrics.jsonl, the console
(with a progress line on a terminal) and TensorBoard."""

from __future__ import annotations

import json
import math
import resource
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

from fsdpspec.atomicio import write_text
from fsdpspec.plan.geometry import GeometryError, geometry_from_config
from fsdpspec.semantics import model_flops_per_token
from fsdpspec.spec.v1 import JobSpec
from fsdpspec_runners.engine.errors import EngineError

_GIB = 1 << 30


def flops_per_token(model: nn.Module, config: dict[str, Any] | None, seq_len: int) -> float:
    """MFU's FLOPs per token (`fsdpspec.semantics.model_flops_per_token`) from the
    planner's geometry of the model's config, so MFU and plan agree; a Mixture-of-Experts
    model counts the parameters one token passes through (its active ones). A model
    without a countable config (a factory) counts its own parameters (FSDP2's DTensors
    report their global shape) and no attention term."""
    try:
        g = geometry_from_config(config) if config is not None else None
    except GeometryError:
        g = None
    if g is None:
        return model_flops_per_token(parameters=sum(p.numel() for p in model.parameters()),
                                     num_layers=0, q_width=0, seq_len=seq_len)
    return model_flops_per_token(parameters=g.active_params, num_layers=g.num_layers,
                                 q_width=g.q_width, seq_len=seq_len)


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
    if not path.exists():
        return
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines(keepends=True)
    kept = [line for line in lines if _logged_step(line) <= step]
    if len(kept) == len(lines):
        return
    write_text(path, "".join(kept))


def _logged_step(line: str) -> float:
    """The step of a metrics line; a line torn by a kill counts as unlogged (dropped)."""
    try:
        return int(json.loads(line)["step"])
    except (ValueError, KeyError, TypeError):
        return math.inf


class MetricsSink:
    """Rank 0's outputs for one run."""

    def __init__(self, spec: JobSpec, run_dir: Path, enabled: bool, resumed_step: int) -> None:
        self._enabled = enabled
        self._max_steps = spec.train.max_steps
        self._jsonl = None
        if enabled and spec.logging.jsonl:
            path = run_dir / "metrics.jsonl"
            _forget_steps_after(path, resumed_step)
            self._jsonl = open(path, "a", encoding="utf-8")
        # Every rank checks for TensorBoard so a missing package fails all ranks alike.
        writer = _summary_writer() if spec.logging.tensorboard else None
        self._board = writer(log_dir=str(run_dir / "tensorboard")) if writer and enabled else None
        self._tty = enabled and sys.stdout.isatty()
        self._started = time.monotonic()
        self._first_step: int | None = None

    def write(self, record: dict[str, Any]) -> None:
        """One metrics record: a jsonl line, a console line, TensorBoard scalars."""
        if not self._enabled:
            return
        if self._jsonl is not None:
            self._jsonl.write(json.dumps(record) + "\n")
            self._jsonl.flush()
        if self._board is not None:
            for key, value in record.items():
                if key != "step" and isinstance(value, (int, float)):
                    self._board.add_scalar(key, value, record["step"])
        print(self._console_line(record), flush=True)

    def _console_line(self, record: dict[str, Any]) -> str:
        if "eval_loss" in record:
            return (f"step {record['step']}/{self._max_steps}  eval_loss "
                    f"{record['eval_loss']:.4f}  perplexity {record['eval_perplexity']:.2f}")
        line = (
            f"step {record['step']}/{self._max_steps}  loss {record['loss']:.4f}  "
            f"lr {record['lr']:.3g}  grad_norm {record['grad_norm']:.3f}  "
            f"tok/s {record['tokens_per_s']:.0f}  mfu {record['mfu']:.2%}"
        )
        return line + self._eta(record["step"]) if self._tty else line

    def _eta(self, step: int) -> str:
        """A progress suffix with the remaining time, for terminals."""
        if self._first_step is None:
            self._first_step, self._started = step, time.monotonic()
            return ""
        rate = (time.monotonic() - self._started) / max(1, step - self._first_step)
        done = step / self._max_steps
        return f"  [{'#' * int(20 * done):<20}] eta {rate * (self._max_steps - step):.0f}s"

    def close(self) -> None:
        if self._jsonl is not None:
            self._jsonl.close()
        if self._board is not None:
            self._board.close()


def _summary_writer() -> Any:
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        raise EngineError("logging.tensorboard needs the tensorboard package installed") from None
    return SummaryWriter
