"""Throughput, MFU, peak memory, and where the numbers go: metrics.jsonl, the console
(with a progress line on a terminal) and TensorBoard."""

from __future__ import annotations

import json
import math
import os
import resource
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

from fsdpspec.catalog.accelerators import CATALOG
from fsdpspec.plan.geometry import GeometryError, geometry_from_config
from fsdpspec.spec.v1 import JobSpec
from fsdpspec_runners.engine.errors import EngineError

_GIB = 1 << 30


def count_parameters(model: nn.Module, config: dict[str, Any] | None) -> int:
    """Parameters one token passes through (a Mixture-of-Experts model's active ones):
    the planner's exact count from the model's config when there is one (FSDP1's flat
    shards report only their local size), else the model's own parameters (FSDP2's
    DTensors report their global shape)."""
    if config is not None:
        try:
            return geometry_from_config(config).active_params
        except GeometryError:
            pass
    return sum(p.numel() for p in model.parameters())


def flops_per_token(num_params: int, config: dict[str, Any] | None, seq_len: int) -> float:
    """Training FLOPs per token: 6·N for the matmuls plus attention scores and values
    (12·layers·width·seq_len), as in the PaLM paper's MFU."""
    flops = 6.0 * num_params
    # A family outside the registry may name its sizes otherwise (GPT-2: n_layer, n_embd):
    # its matmuls are counted, not its attention.
    if config is not None and {"num_hidden_layers", "hidden_size"} <= config.keys():
        flops += 12.0 * config["num_hidden_layers"] * config["hidden_size"] * seq_len
    return flops


def peak_tflops(spec: JobSpec) -> float:
    """The device's dense peak for the compute dtype (0 when unknown)."""
    accel = spec.resources.accelerator
    entry = CATALOG[accel] if isinstance(accel, str) else accel
    dtype = spec.fsdp.mixed_precision.param_dtype
    return {"bfloat16": entry.bf16_tflops, "float16": entry.fp16_tflops}.get(
        dtype, entry.fp32_tflops
    )


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
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("".join(kept), encoding="utf-8")
    os.replace(tmp, path)


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
