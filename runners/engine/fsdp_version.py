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

    def gradient_sync(self, model: nn.Module, strategy: str,
                      last_micro_batch: bool) -> AbstractContextManager[None]:
        model.set_requires_gradient_sync(syncs_gradients(strategy, last_micro_batch))
        return nullcontext()

    def local_square_norm(self, model: nn.Module) -> float:
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        if not grads:
            return 0.0
        locals_ = [g.to_local() if isinstance(g, DTensor) else g for g in grads]
        squares = torch.stack([n.double() for n in torch._foreach_norm(locals_)]).square()
        holders = torch.tensor([_holders(g) for g in grads], dtype=torch.float64)
        return (squares / holders).sum().item()

    def clip(self, model: nn.Module, summed_square: float, max_norm: float | None) -> float:
        total_norm = math.sqrt(summed_square)
        # A non-finite norm is the non-finite check's to handle, not a scale to apply.
        if max_norm is not None and math.isfinite(total_norm) and total_norm > max_norm:
            # On the local shards: the gradients of a tensor-parallel model are DTensors
            # on more than one mesh, which one foreach call over DTensors does not take.
            grads = [p.grad for p in model.parameters() if p.grad is not None]
            torch._foreach_mul_([g.to_local() if isinstance(g, DTensor) else g for g in grads],
                                max_norm / (total_norm + 1e-6))
        return total_norm


def _holders(grad: torch.Tensor) -> int:
    """How many ranks hold each element of this rank's share of ``grad``: every rank of a
    plain (DDP) gradient; for a DTensor, the ranks outside its mesh (a gradient only FSDP
    shards is the same on each tensor-parallel rank) times its replicated dimensions
    (HSDP's replicas, a sequence-parallel norm's tensor-parallel ranks). Sharded
    dimensions, ``_StridedShard`` (FSDP over a tensor-parallel split) included, hold
    disjoint pieces."""
    world = torch.distributed.get_world_size()
    if not isinstance(grad, DTensor):
        return world
    mesh = grad.device_mesh
    replicated = math.prod(mesh.size(i) for i, p in enumerate(grad.placements)
                           if p.is_replicate())
    return world // mesh.size() * replicated

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
    return Fsdp2() if layout.fsdp_version == 2 else Fsdp1()
