"""FSDP1 and FSDP2 behind one small interface, so the rest of the engine never asks which
one wraps the model: gradient sync per micro-batch, and the gradient norm and clipping."""

from __future__ import annotations

import math
from contextlib import AbstractContextManager, nullcontext
from typing import Protocol

import torch
from torch import nn
from torch.distributed.tensor import DTensor

from fsdpspec.job.layout import Layout
from fsdpspec.semantics import syncs_gradients


class FsdpAdapter(Protocol):
    def gradient_sync(self, model: nn.Module, strategy: str,
                      last_micro_batch: bool) -> AbstractContextManager[None]:
        """Reduce this micro-batch's gradients or not (`fsdpspec.semantics`)."""

    def local_square_norm(self, model: nn.Module) -> float:
        """This rank's share of the squared gradient norm, summed with the step's other
        numbers in its one collective (0 where the wrapper reduces the norm itself)."""

    def clip(self, model: nn.Module, summed_square: float, max_norm: float | None) -> float:
        """Clip to ``max_norm`` (None: measure only); return the total gradient norm."""

class Fsdp2:
    """``fully_shard`` (DTensor gradients) or DDP (`runs_as_ddp`, plain ones); the norm
    comes from the step's all-reduce, summed over every rank."""

    def __init__(self, replicas: int = 1) -> None:
        # Ranks that hold the same gradient shard: the dp_replicate degree (HSDP's and
        # NO_SHARD's replicas; DDP's, where every rank holds all of the gradients).
        self._replicas = replicas

    def gradient_sync(self, model: nn.Module, strategy: str,
                      last_micro_batch: bool) -> AbstractContextManager[None]:
        model.set_requires_gradient_sync(syncs_gradients(strategy, last_micro_batch))
        return nullcontext()

    def local_square_norm(self, model: nn.Module) -> float:
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        if not grads:
            return 0.0
        locals_ = [g.to_local() if isinstance(g, DTensor) else g for g in grads]
        square = torch.stack([n.double() for n in torch._foreach_norm(locals_)]).square().sum()
        # Replicas hold the same shard: count each shard once.
        return square.item() / self._replicas

    def clip(self, model: nn.Module, summed_square: float, max_norm: float | None) -> float:
        total_norm = math.sqrt(summed_square)
        # A non-finite norm is the non-finite check's to handle, not a scale to apply.
        if max_norm is not None and math.isfinite(total_norm) and total_norm > max_norm:
            torch.nn.utils.clip_grads_with_norm_(
                model.parameters(), max_norm, torch.tensor(total_norm, dtype=torch.float64))
        return total_norm

class Fsdp1:
    """``FullyShardedDataParallel``: flat shards; ``no_sync`` and its own clipping."""

    def gradient_sync(self, model: nn.Module, strategy: str,
                      last_micro_batch: bool) -> AbstractContextManager[None]:
        return nullcontext() if syncs_gradients(strategy, last_micro_batch) else model.no_sync()

    def local_square_norm(self, model: nn.Module) -> float:
        return 0.0

    def clip(self, model: nn.Module, summed_square: float, max_norm: float | None) -> float:
        # Measured also when clipping is off, for the metrics and the non-finite check.
        return float(model.clip_grad_norm_(math.inf if max_norm is None else max_norm))

def fsdp_adapter(layout: Layout) -> FsdpAdapter:
    """The adapter of the layout's FSDP version."""
    return Fsdp2(layout.dims.dp_replicate) if layout.fsdp_version == 2 else Fsdp1()
