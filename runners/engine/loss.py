"""The loss the engine optimises and evaluates: next-token cross entropy over the labelled
tokens, plus a Mixture-of-Experts model's load-balancing loss when training.

With ``train.loss_chunks`` above 1 the output projection and the cross entropy run over
that many chunks of the tokens, each under activation checkpointing: only one chunk's
logits (and their fp32 upcast and log-softmax) are ever alive, in forward and again in
backward, instead of the whole micro-batch's. The value and the gradients are the plain
loss's: the sum over the labelled tokens divided by their count.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributed.tensor import DTensor
from torch.utils.checkpoint import checkpoint

from fsdpspec_runners.engine.errors import EngineError
from fsdpspec_runners.engine.examples import IGNORE

# A batch whose labels are already the next tokens' (context parallelism shifts them
# before the sequence is split: `fsdpspec_runners.engine.context`).
SHIFTED_LABELS = "shifted_labels"


def next_token_labels(batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Each position's label: the next token's (IGNORE after the last). Shift the labels,
    not the logits: slicing the logits would copy all of them."""
    return F.pad(batch.get("labels", batch["input_ids"])[:, 1:], (0, 1), value=IGNORE)


def causal_lm_loss(
    model: nn.Module, batch: dict[str, torch.Tensor], reduction: str = "mean",
    chunks: int = 1,
) -> torch.Tensor:
    """Next-token cross entropy over the tokens whose label is not IGNORE (all of them
    without ``labels``), plus, for the mean that training optimises, a Mixture-of-Experts
    model's weighted load-balancing loss. The model maps ids to logits (a transformers
    model's output or a bare tensor from a factory model); with ``chunks`` > 1 it must be
    a transformers model, whose output projection the loss then applies chunk by chunk."""
    labels = batch[SHIFTED_LABELS] if SHIFTED_LABELS in batch else next_token_labels(batch)
    if chunks == 1:
        output = model(batch["input_ids"], **_position_inputs(model, batch))
        logits = getattr(output, "logits", output)
        loss = F.cross_entropy(
            logits.flatten(0, 1).float(), labels.flatten(), ignore_index=IGNORE,
            reduction=reduction,
        )
    else:
        output, loss = _chunked_cross_entropy(model, batch, labels, chunks)
        if reduction == "mean":
            # F.cross_entropy's mean: over the labelled tokens (NaN when there are none).
            loss = loss / (labels != IGNORE).sum()
    if isinstance(loss, DTensor):  # loss parallel's, from vocabulary-split logits
        loss = loss.full_tensor()
    aux = getattr(output, "aux_loss", None)
    if aux is not None and reduction == "mean":
        loss = loss + model.config.router_aux_loss_coef * aux.float()
    return loss


def _chunked_cross_entropy(
    model: nn.Module, batch: dict[str, torch.Tensor], labels: torch.Tensor, chunks: int
) -> tuple[Any, torch.Tensor]:
    """The model's output (its ``logits`` are the final hidden states) and the summed
    cross entropy, the projection applied one chunk of tokens at a time."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if not isinstance(head, nn.Linear):
        raise EngineError("train.loss_chunks needs a transformers model whose output "
                          "projection is a Linear layer")
    softcap = getattr(model.config, "final_logit_softcapping", None)
    with _projection_skipped(model, head):
        output = model(batch["input_ids"], **_position_inputs(model, batch))
    hidden = output.logits.flatten(0, 1)
    total = hidden.new_zeros((), dtype=torch.float32)
    for states, targets in zip(hidden.chunk(chunks), labels.flatten().chunk(chunks),
                               strict=True):
        # Recomputed in backward: nothing of the chunk's logits is saved between the two.
        total = total + checkpoint(_chunk_loss, states, targets, head.weight, head.bias,
                                   softcap, use_reentrant=False)
    return output, total


def _chunk_loss(states: torch.Tensor, targets: torch.Tensor, weight: torch.Tensor,
                bias: torch.Tensor | None, softcap: float | None) -> torch.Tensor:
    """One chunk's summed cross entropy, its logits computed as the model computes them
    (transformers' final soft-capping included)."""
    logits = F.linear(states, weight, bias)
    if softcap is not None:
        logits = torch.tanh(logits / softcap) * softcap
    return F.cross_entropy(logits.float(), targets, ignore_index=IGNORE, reduction="sum")


@contextmanager
def _projection_skipped(model: nn.Module, head: nn.Linear) -> Iterator[None]:
    """For one forward, the output projection (and any soft-capping after it) passes the
    final hidden states through: the chunks apply both themselves."""
    config = model.config
    softcap = getattr(config, "final_logit_softcapping", None)
    head.forward = lambda states: states  # an instance attribute shadows the method
    if softcap is not None:
        config.final_logit_softcapping = None
    try:
        yield
    finally:
        del head.forward
        if softcap is not None:
            config.final_logit_softcapping = softcap


def _position_inputs(model: nn.Module, batch: dict[str, torch.Tensor]) -> dict[str, Any]:
    """Packed examples restart their positions; a transformers model also keeps their
    attention apart from them. A split sequence (context parallelism) carries its
    positions and an all-ones mask. A factory model takes the ids alone. (FSDP1's
    wrapper forwards attribute reads to the module it wraps.)"""
    if "position_ids" in batch and hasattr(model, "config"):
        return {k: batch[k] for k in ("position_ids", "attention_mask") if k in batch}
    return {}
