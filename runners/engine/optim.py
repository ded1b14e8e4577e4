"""Optimizer, learning-rate schedule and the fp16 gradient scaler (clipping: adapter.py)."""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
from torch import nn
from torch.optim.lr_scheduler import LambdaLR

from fsdpspec.spec.v1 import JobSpec, Optimizer, Scheduler


def build_optimizer(params: Iterable[nn.Parameter], opt: Optimizer) -> torch.optim.Optimizer:
    """AdamW (its moments in ``state_dtype``) or SGD with the spec's hyper-parameters."""
    if opt.name == "sgd":
        return torch.optim.SGD(
            params, lr=opt.lr, momentum=opt.momentum, weight_decay=opt.weight_decay
        )
    options = dict(lr=opt.lr, betas=tuple(opt.betas), eps=opt.eps,
                   weight_decay=opt.weight_decay)
    if opt.state_dtype == "bfloat16":
        return AdamWBf16States(params, **options)
    if opt.state_dtype == "int8":
        from torchao.optim import AdamW8bit

        return AdamW8bit(params, **options)
    return torch.optim.AdamW(params, **options)


class AdamWBf16States(torch.optim.Optimizer):
    """AdamW whose two moments are stored in bfloat16 (torchtitan's bf16 optimizer
    states): each step reads them into fp32, updates and stores them back rounded, and
    updates the fp32 parameter from the unrounded values. One tensor at a time, so the
    fp32 temporaries are the size of the largest parameter shard, not of all of them."""

    def __init__(self, params: Iterable[nn.Parameter], *, lr: float,
                 betas: tuple[float, float], eps: float, weight_decay: float) -> None:
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))
        self.register_load_state_dict_post_hook(_moments_to_bf16)

    @torch.no_grad()
    def step(self, closure: None = None) -> None:  # type: ignore[override]
        assert closure is None, "the engine steps without a closure"
        for group in self.param_groups:
            for param in group["params"]:
                if param.grad is not None:
                    self._update(param, group)

    def _update(self, param: torch.Tensor, group: dict) -> None:
        lr, (beta1, beta2) = group["lr"], group["betas"]
        state = self.state[param]
        if not state:
            state["step"] = torch.tensor(0.0)
            state["exp_avg"] = torch.zeros_like(param, dtype=torch.bfloat16)
            state["exp_avg_sq"] = torch.zeros_like(param, dtype=torch.bfloat16)
        state["step"] += 1
        step = state["step"].item()
        grad = param.grad.float()
        exp_avg = state["exp_avg"].float().lerp_(grad, 1 - beta1)
        exp_avg_sq = state["exp_avg_sq"].float().mul_(beta2).addcmul_(grad, grad,
                                                                      value=1 - beta2)
        state["exp_avg"].copy_(exp_avg)
        state["exp_avg_sq"].copy_(exp_avg_sq)
        param.mul_(1 - lr * group["weight_decay"])
        denom = (exp_avg_sq.sqrt_() / math.sqrt(1 - beta2**step)).add_(group["eps"])
        param.addcdiv_(exp_avg, denom, value=-lr / (1 - beta1**step))


def _moments_to_bf16(optimizer: torch.optim.Optimizer) -> None:
    """``Optimizer.load_state_dict`` casts every floating state to its parameter's dtype
    (fp32): cast the moments back. They were saved in bf16, so no value changes."""
    for state in optimizer.state.values():
        for name in ("exp_avg", "exp_avg_sq"):
            if name in state:
                state[name] = state[name].to(torch.bfloat16)


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
