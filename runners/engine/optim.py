"""Optimizer, learning-rate schedule and the fp16 gradient scaler (clipping: adapter.py)."""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
from torch import nn
from torch.optim.lr_scheduler import LambdaLR

from fsdpspec.spec.v1 import JobSpec, Optimizer, Scheduler


def build_optimizer(params: Iterable[nn.Parameter], spec: Optimizer) -> torch.optim.Optimizer:
    """AdamW or SGD with the spec's hyper-parameters."""
    if spec.name == "sgd":
        return torch.optim.SGD(
            params, lr=spec.lr, momentum=spec.momentum, weight_decay=spec.weight_decay
        )
    return torch.optim.AdamW(
        params, lr=spec.lr, betas=spec.betas, eps=spec.eps, weight_decay=spec.weight_decay
    )


def lr_multiplier(step: int, schedule: Scheduler, max_steps: int) -> float:
    """Fraction of the peak lr for scheduler index ``step`` (optimizer step ``step + 1``):
    linear warmup, then the schedule decays to ``min_lr_ratio`` at the last step, index
    ``max_steps - 1``."""
    if step < schedule.warmup_steps:
        return (step + 1) / schedule.warmup_steps
    if schedule.name == "constant":
        return 1.0
    decay_steps = max(1, max_steps - 1 - schedule.warmup_steps)
    progress = min(1.0, (step - schedule.warmup_steps) / decay_steps)
    floor = schedule.min_lr_ratio
    if schedule.name == "linear":
        return 1.0 - (1.0 - floor) * progress
    return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


def build_scheduler(optimizer: torch.optim.Optimizer, spec: JobSpec) -> LambdaLR:
    schedule, max_steps = spec.optimizer.scheduler, spec.train.max_steps
    return LambdaLR(optimizer, lambda step: lr_multiplier(step, schedule, max_steps))


def build_grad_scaler(spec: JobSpec, device: torch.device) -> object | None:
    """A sharded dynamic loss scaler for fp16 parameters, on the gradients' device; None
    otherwise."""
    if spec.fsdp.mixed_precision.param_dtype != "float16" or spec.train.loss_scaling == "none":
        return None
    from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

    return ShardedGradScaler(device=device.type)
