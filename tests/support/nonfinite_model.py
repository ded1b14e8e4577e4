"""A user's model that goes non-finite on purpose, for tests/engine/test_nonfinite.py:
``model.factory: nonfinite_model:build`` (with tests/support/ on PYTHONPATH).

It is engine_factory's TinyLM, except on the rank named by ``FSDPSPEC_TEST_NONFINITE_RANK``
(default 1) during the steps listed (comma-separated) in

- ``FSDPSPEC_TEST_NAN_LOSS_AT``: its logits are NaN, so the loss is;
- ``FSDPSPEC_TEST_NAN_GRAD_AT``: its forward is untouched (the loss stays finite) but
  its backward sends NaN into the embedding's gradient, so the gradient norm is NaN.

Only one rank misbehaves, as a real fault would: the engine must still stop (or skip)
on every rank at the same step. Steps are counted by forward calls, so a run must take
one micro-batch per rank per step (global_batch_size = micro_batch_size × processes)
without activation checkpointing (which runs forward twice).
"""

from __future__ import annotations

import os

import torch
from engine_factory import TinyLM


def _steps(name: str) -> set[int]:
    return {int(s) for s in os.environ.get(name, "").split(",") if s.strip()}


class _NanGradient(torch.autograd.Function):
    """Identity forward; NaN backward."""

    @staticmethod
    def forward(ctx: object, x: torch.Tensor) -> torch.Tensor:
        return x.view_as(x)

    @staticmethod
    def backward(ctx: object, grad: torch.Tensor) -> torch.Tensor:
        return torch.full_like(grad, float("nan"))


class NonFiniteLM(TinyLM):
    def __init__(self) -> None:
        super().__init__()
        faulty = os.environ.get("RANK", "0") == os.environ.get("FSDPSPEC_TEST_NONFINITE_RANK", "1")
        self.nan_loss_steps = _steps("FSDPSPEC_TEST_NAN_LOSS_AT") if faulty else set()
        self.nan_grad_steps = _steps("FSDPSPEC_TEST_NAN_GRAD_AT") if faulty else set()
        self.step = 0  # forward calls so far = optimizer steps begun

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        self.step += 1
        x = self.embed(input_ids)
        if self.step in self.nan_grad_steps:
            x = _NanGradient.apply(x)
        for block in self.blocks:
            x = block(x)
        logits = self.head(x)
        return logits + float("nan") if self.step in self.nan_loss_steps else logits


def build() -> NonFiniteLM:
    return NonFiniteLM()
