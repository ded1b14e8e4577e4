"""The loss the engine optimises and evaluates: next-token cross entropy over the labelled
tokens, plus a Mixture-of-Experts model's load-balancing loss when training."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from fsdpspec_runners.engine.examples import IGNORE


def causal_lm_loss(
    model: nn.Module, batch: dict[str, torch.Tensor], reduction: str = "mean"
) -> torch.Tensor:
    """Next-token cross entropy over the tokens whose label is not IGNORE (all of them
    without ``labels``), plus, for the mean that training optimises, a Mixture-of-Experts
    model's weighted load-balancing loss. The model maps ids to logits (a transformers
    model's output or a bare tensor from a factory model)."""
    output = model(batch["input_ids"], **_position_inputs(model, batch))
    logits = getattr(output, "logits", output)
    # Shift the labels, not the logits: slicing the logits would copy all of them.
    labels = F.pad(batch.get("labels", batch["input_ids"])[:, 1:], (0, 1), value=IGNORE)
    loss = F.cross_entropy(
        logits.flatten(0, 1).float(), labels.flatten(), ignore_index=IGNORE, reduction=reduction
    )
    aux = getattr(output, "aux_loss", None)
    if aux is not None and reduction == "mean":
        loss = loss + model.config.router_aux_loss_coef * aux.float()
    return loss


def _position_inputs(model: nn.Module, batch: dict[str, torch.Tensor]) -> dict[str, Any]:
    """Packed examples restart their positions; a transformers model also keeps their
    attention apart from them. A factory model takes the ids alone. (FSDP1's wrapper
    forwards attribute reads to the module it wraps.)"""
    if "position_ids" in batch and hasattr(model, "config"):
        return {"position_ids": batch["position_ids"]}
    return {}
