"""The training loop, split as ``train`` / ``train_step`` / ``forward_backward``."""

from __future__ import annotations

import math
import signal
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.distributed.device_mesh import DeviceMesh

from fsdpspec.job.job import Job
from fsdpspec.semantics import mfu
from fsdpspec.spec.v1 import JobSpec
from fsdpspec_runners.engine import faults
from fsdpspec_runners.engine.checkpoint import (
    TrainState,
    checkpoint_root,
    is_complete,
    model_state_held,
    save_checkpoint,
    step_dir_name,
)
from fsdpspec_runners.engine.context import sequence_split
from fsdpspec_runners.engine.dist import Runtime, all_reduce_max, all_reduce_sum, console
from fsdpspec_runners.engine.errors import EngineError
from fsdpspec_runners.engine.evaluate import evaluate
from fsdpspec_runners.engine.export import FINAL_DIR, export_checkpoint
from fsdpspec_runners.engine.fsdp_version import fsdp_adapter
from fsdpspec_runners.engine.loss import causal_lm_loss
from fsdpspec_runners.engine.metrics import MetricsSink, peak_memory_gib
from fsdpspec_runners.engine.offload import activation_offload
from fsdpspec_runners.engine.packing import Sequences
from fsdpspec_runners.engine.preference import Preference, metrics_of
from fsdpspec_runners.engine.signals import StopRequest
from fsdpspec_runners.engine.tensor_parallel import loss_context


@dataclass
class Trainer:
    """Everything the loop needs, built once by ``fsdpspec_runners.engine.train``."""

    job: Job
    runtime: Runtime
    run_dir: Path
    state: TrainState
    scaler: Any
    stop: StopRequest
    sink: MetricsSink
    flops_per_token: float
    peak_flops: float
    eval_sequences: Sequences | None = None
    # Context parallelism (GPUs): the mesh each sequence is split over.
    cp_mesh: DeviceMesh | None = None
    # train.objective dpo: the preference objective (None: next-token cross entropy).
    preference: Preference | None = None

    @property
    def spec(self) -> JobSpec:
        return self.job.spec


@dataclass(frozen=True)
class StepResult:
    """One optimizer step, agreed over all ranks."""

    loss: float
    grad_norm: float
    lr: float
    skipped: bool
    stop_requested: bool
    # The objective's own metrics (DPO's rewards and log-probs), agreed over all ranks.
    metrics: dict[str, float] = field(default_factory=dict)


def forward_backward(
    trainer: Trainer, batch: dict[str, torch.Tensor], accumulation_steps: int
) -> torch.Tensor:
    """Forward and backward of one micro-batch; returns its (unscaled) loss, still on the
    device: reading it here would make the host wait for every micro-batch."""
    device = trainer.runtime.device
    on_device = {k: v.to(device) for k, v in batch.items()}
    split = (sequence_split(trainer.cp_mesh, on_device) if trainer.cp_mesh is not None
             else nullcontext(on_device))
    # Ring attention patches SDPA for the backward too: both run inside the split.
    with split as local:
        with activation_offload(trainer.spec.fsdp.activation_offload, device):
            if trainer.preference is not None:
                loss = trainer.preference.loss(trainer.state.model, local)
            else:
                loss = causal_lm_loss(trainer.state.model, local,
                                      chunks=trainer.spec.train.loss_chunks)
        scaled = loss / accumulation_steps
        (trainer.scaler.scale(scaled) if trainer.scaler else scaled).backward()
    return loss.detach()


def train_step(trainer: Trainer) -> StepResult:
    """Accumulate gradients over the step's micro-batches, clip, check, update."""
    state, runtime = trainer.state, trainer.runtime
    faults.at_step_start(state.step + 1)
    micro_batches = state.batches.next_step()
    adapter = fsdp_adapter(trainer.job.layout)
    losses = []
    for index, batch in enumerate(micro_batches):
        last = index == len(micro_batches) - 1
        with adapter.gradient_sync(state.model, trainer.job.layout.strategy, last):
            losses.append(forward_backward(trainer, batch, len(micro_batches)))
    loss_sum = torch.stack(losses).double().sum().item()
    if trainer.scaler:
        trainer.scaler.unscale_(state.optimizer)
    max_norm = trainer.spec.optimizer.grad_clip_norm
    objective_sums = trainer.preference.take_sums() if trainer.preference else []
    # One collective agrees on the loss, the stop request, (FSDP2) the gradient norm and
    # the objective's metric sums.
    total, stops, squares, *objective_sums = all_reduce_sum(
        [loss_sum, float(trainer.stop.requested), adapter.local_square_norm(state.model),
         *objective_sums],
        runtime.device,
    )
    grad_norm = adapter.clip(state.model, squares, max_norm)
    # Every rank adds its loss: the ranks of one tp group the same one, those of a cp
    # group the mean over their equal shares of the sequence. The mean over every rank is
    # the mean over the data-parallel ranks.
    loss = total / (len(micro_batches) * runtime.world_size)
    # float(): torchao keeps the learning rate as a tensor (no recompile when it changes).
    lr = float(state.scheduler.get_last_lr()[0])
    skipped = _apply_update(trainer, loss, grad_norm)
    state.scheduler.step()
    state.step += 1
    metrics = metrics_of(objective_sums) if objective_sums else {}
    return StepResult(loss, grad_norm, lr, skipped, stops > 0, metrics)


def _apply_update(trainer: Trainer, loss: float, grad_norm: float) -> bool:
    """Step the optimizer unless the loss or gradient norm is non-finite (then stop or
    skip, per ``train.on_nonfinite``); returns whether the update was skipped."""
    state, scaler = trainer.state, trainer.scaler
    # With a loss scaler an infinite gradient is an overflow the scaler itself skips.
    bad_norm = not math.isfinite(grad_norm) and scaler is None
    if not math.isfinite(loss) or bad_norm:
        what = f"loss {loss}" if not math.isfinite(loss) else f"gradient norm {grad_norm}"
        if trainer.spec.train.on_nonfinite == "stop":
            raise EngineError(
                f"non-finite {what} at step {state.step + 1}; stopped (train.on_nonfinite: stop); "
                "the last checkpoint is unchanged"
            )
        state.optimizer.zero_grad(set_to_none=True)
        return True
    if scaler:
        scale = scaler.get_scale()
        scaler.step(state.optimizer)
        scaler.update()
        skipped = scaler.get_scale() < scale
    else:
        state.optimizer.step()
        skipped = False
    state.optimizer.zero_grad(set_to_none=True)
    return skipped


def train(trainer: Trainer) -> bool:
    """Run to ``max_steps`` (or until a signal), checkpointing, evaluating and logging on
    schedule; returns whether the run finished (rather than stopped)."""
    with loss_context(trainer.job):
        return _train(trainer)


def _train(trainer: Trainer) -> bool:
    spec, state = trainer.spec, trainer.state
    interval, saved_at = spec.checkpoint.interval_steps, state.step
    clock = _Clock(state.step)
    while state.step < spec.train.max_steps:
        result = train_step(trainer)
        last = state.step == spec.train.max_steps or result.stop_requested
        if state.step % spec.logging.interval_steps == 0 or state.step == 1 or last:
            trainer.sink.write(_record(trainer, result, clock))
        if result.stop_requested:
            _agree_on_the_signal(trainer)
            _save(trainer)
            trainer.sink.ended("stopped", state.step)
            console(
                trainer.runtime,
                f"stopped by {trainer.stop.signal_name} at step {state.step}; checkpoint saved",
            )
            return False
        if _eval_due(trainer):
            _evaluate(trainer)
        if interval and state.step % interval == 0:
            saved_at = _save(trainer)
    _finish(trainer, saved_at)
    return True


def _agree_on_the_signal(trainer: Trainer) -> None:
    """Every rank learns which signal stopped the run (the highest-numbered one, where
    ranks got different ones), including the ranks no signal reached."""
    (signum,) = all_reduce_max([float(trainer.stop.signum)], trainer.runtime.device)
    trainer.stop.signal_name = signal.Signals(int(signum)).name


def _finish(trainer: Trainer, saved_at: int) -> None:
    """The end of a run: the last evaluation, and the last checkpoint (which the final
    export converts)."""
    spec, step = trainer.spec, trainer.state.step
    if trainer.eval_sequences is not None and not _eval_due(trainer):
        _evaluate(trainer)  # unless the interval just ran it
    final = spec.checkpoint.final.enabled
    checkpoint = checkpoint_root(trainer.run_dir) / step_dir_name(step)
    if (spec.checkpoint.interval_steps or final) and (
        saved_at != step or not is_complete(checkpoint)
    ):
        _save(trainer)
    trainer.sink.ended("finished", step)


def export_final(trainer: Trainer) -> None:
    """Rank 0 converts the run's last checkpoint into ``run_dir/final``. Called after the
    process group is left: the conversion needs no peer, and however long it takes for a
    large model, no other rank waits on a collective with a timeout."""
    if not (trainer.spec.checkpoint.final.enabled and trainer.runtime.is_main):
        return
    checkpoint = checkpoint_root(trainer.run_dir) / step_dir_name(trainer.state.step)
    target = export_checkpoint(checkpoint, trainer.job, trainer.run_dir / FINAL_DIR)
    console(trainer.runtime, f"final weights: {target}")


def _eval_due(trainer: Trainer) -> bool:
    every = trainer.spec.train.eval_interval_steps
    return trainer.eval_sequences is not None and every > 0 and trainer.state.step % every == 0


def _evaluate(trainer: Trainer) -> None:
    """Evaluate and log ``eval_loss`` and ``eval_perplexity`` at the current step."""
    assert trainer.eval_sequences is not None
    if trainer.preference is not None:
        result = trainer.preference.evaluate(trainer.state.model, trainer.eval_sequences,
                                             trainer.job.batch, trainer.job.layout.dims,
                                             trainer.runtime)
        trainer.sink.write({"step": trainer.state.step, **result})
        return
    result = evaluate(trainer.state.model, trainer.eval_sequences, trainer.job.batch,
                      trainer.job.layout.dims, trainer.runtime,
                      loss_chunks=trainer.spec.train.loss_chunks)
    trainer.sink.write({"step": trainer.state.step, **result})


def _save(trainer: Trainer) -> int:
    path = save_checkpoint(
        trainer.state,
        trainer.run_dir,
        trainer.spec.checkpoint.keep_last,
        trainer.runtime,
        full_state_dict=trainer.spec.fsdp.state_dict_type == "FULL_STATE_DICT",
        holds=model_state_held(trainer.job),
    )
    console(trainer.runtime, f"checkpoint: {path}")
    trainer.sink.checkpointed(trainer.state.step, path)
    return trainer.state.step


class _Clock:
    """Wall time, this process's CPU time and steps since the previous log line."""

    def __init__(self, step: int) -> None:
        self.step, self.time, self.cpu = step, time.perf_counter(), time.process_time()

    def lap(self, step: int) -> tuple[int, float, float]:
        now, cpu = time.perf_counter(), time.process_time()
        steps, seconds, cpu_seconds = step - self.step, now - self.time, cpu - self.cpu
        self.step, self.time, self.cpu = step, now, cpu
        return steps, seconds, cpu_seconds


def _record(trainer: Trainer, result: StepResult, clock: _Clock) -> dict[str, Any]:
    """A metrics record: the step's numbers plus throughput since the last record."""
    runtime, batch = trainer.runtime, trainer.job.batch
    steps, seconds, cpu_seconds = clock.lap(trainer.state.step)
    tokens_per_s = (steps * batch.global_size * batch.per_example * batch.seq
                    / max(seconds, 1e-9))
    memory = peak_memory_gib(runtime.device)
    memory = dict(zip(memory, all_reduce_max(list(memory.values()), runtime.device), strict=True))
    return {
        "step": trainer.state.step,
        "loss": result.loss,
        "lr": result.lr,
        "grad_norm": result.grad_norm,
        **result.metrics,
        "skipped": result.skipped,
        "tokens_per_s": tokens_per_s,
        "mfu": mfu(tokens_per_s / runtime.world_size, trainer.flops_per_token,
                   trainer.peak_flops / 1e12),
        "step_time_s": seconds / max(steps, 1),
        # Rank 0's CPU time: on a shared CPU machine, what a step costs whatever the load.
        "step_cpu_s": cpu_seconds / max(steps, 1),
        **memory,
    }
