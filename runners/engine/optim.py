"""Optimizer, learning-rate schedule, gradient clipping and the fp16 gradient scaler."""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
from torch import nn
from torch.distributed.tensor import DTensor
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
    """Fraction of the peak lr after ``step`` scheduler steps: linear warmup, then the
    schedule decays to ``min_lr_ratio`` at ``max_steps``."""
    if step < schedule.warmup_steps:
        return (step + 1) / schedule.warmup_steps
    if schedule.name == "constant":
        return 1.0
    progress = min(1.0, (step - schedule.warmup_steps) / max(1, max_steps - schedule.warmup_steps))
    floor = schedule.min_lr_ratio
    if schedule.name == "linear":
        return 1.0 - (1.0 - floor) * progress
    return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


def build_scheduler(optimizer: torch.optim.Optimizer, spec: JobSpec) -> LambdaLR:
    schedule, max_steps = spec.optimizer.scheduler, spec.train.max_steps
    return LambdaLR(optimizer, lambda step: lr_multiplier(step, schedule, max_steps))


def clip_gradients(model: nn.Module, max_norm: float | None) -> float:
    """Clip to ``max_norm`` by the total norm over all shards; returns that norm (also
    measured when clipping is off, for the metrics and the non-finite check)."""
    limit = math.inf if max_norm is None else max_norm
    fsdp1_clip = getattr(model, "clip_grad_norm_", None)  # FSDP1 reduces over its shards
    if fsdp1_clip is not None:
        return float(fsdp1_clip(limit))
    params = [p for p in model.parameters() if p.grad is not None]
    norm = torch.nn.utils.clip_grad_norm_(params, limit, foreach=True)
    if isinstance(norm, DTensor):
        norm = norm.full_tensor()
    return float(norm)


def build_grad_scaler(spec: JobSpec) -> object | None:
    """A sharded dynamic loss scaler for fp16 parameters; None otherwise."""
    if spec.fsdp.mixed_precision.param_dtype != "float16" or spec.train.loss_scaling == "none":
        return None
    from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

    device = "cuda" if torch.cuda.is_available() else "cpu"
    return ShardedGradScaler(device=device)
