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


def local_square_norm(model: nn.Module) -> float | None:
    """This rank's share of the squared gradient norm (FSDP2), so that the sum over all
    ranks is the total. Summing it with the step's other numbers keeps the step at one
    collective. None for FSDP1, whose ``clip_grad_norm_`` reduces by itself."""
    if hasattr(model, "clip_grad_norm_"):
        return None
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    if not grads:
        return 0.0
    locals_ = [g.to_local() if isinstance(g, DTensor) else g for g in grads]
    square = torch.stack([n.double() for n in torch._foreach_norm(locals_)]).square().sum()
    # Replicas (HSDP, NO_SHARD) hold the same shard: count each shard once.
    mesh = getattr(grads[0], "device_mesh", None)
    replicas = mesh.size(0) if mesh is not None and mesh.ndim == 2 else 1
    return square.item() / replicas


def clip_to_norm(model: nn.Module, total_norm: float, max_norm: float | None) -> None:
    """Scale the gradients down to ``max_norm`` when their total norm exceeds it (the
    same coefficient as ``torch.nn.utils.clip_grad_norm_``)."""
    if max_norm is None or not total_norm > max_norm:
        return
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    locals_ = [g.to_local() if isinstance(g, DTensor) else g for g in grads]
    torch._foreach_mul_(locals_, max_norm / (total_norm + 1e-6))


def fsdp1_clip(model: nn.Module, max_norm: float | None) -> float:
    """FSDP1's own clipping over its flat shards; returns the total norm (measured also
    when clipping is off, for the metrics and the non-finite check)."""
    return float(model.clip_grad_norm_(math.inf if max_norm is None else max_norm))


def build_grad_scaler(spec: JobSpec, device: torch.device) -> object | None:
    """A sharded dynamic loss scaler for fp16 parameters, on the gradients' device; None
    otherwise."""
    if spec.fsdp.mixed_precision.param_dtype != "float16" or spec.train.loss_scaling == "none":
        return None
    from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

    return ShardedGradScaler(device=device.type)
