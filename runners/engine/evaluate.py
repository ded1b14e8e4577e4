"""Evaluation under FSDP: forward passes without gradients over the evaluation set.

Data-parallel rank ``r`` takes sequences ``r, r + dp_size, …`` in micro-batches of the
training size (`ParallelDims.dp_rank`).
Every rank runs the same number of forwards (FSDP all-gathers in each one), so a rank
whose share runs out runs a batch whose labels are all ignored. The token losses and
counts are summed over every rank (the ranks of one data-parallel rank add the same
share to both): ``eval_loss`` is the mean over every target token of the
set, whatever the number of ranks.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from fsdpspec.job.batch import Batch
from fsdpspec.job.parallel import ParallelDims
from fsdpspec_runners.engine.data import stack
from fsdpspec_runners.engine.dist import Runtime, all_reduce_sum
from fsdpspec_runners.engine.examples import IGNORE
from fsdpspec_runners.engine.loss import causal_lm_loss
from fsdpspec_runners.engine.packing import Sequences


def evaluate(
    model: nn.Module, sequences: Sequences, batch: Batch, dims: ParallelDims,
    runtime: Runtime, *, loss_chunks: int = 1,
) -> dict[str, float]:
    """``eval_loss`` and ``eval_perplexity`` of the model on ``sequences`` (the loss in
    training's chunks, so evaluation never holds more logits than training does)."""

    count, micro_batch_size = len(sequences["input_ids"]), batch.micro
    mine = list(range(dims.dp_rank(runtime.rank), count, dims.dp_size))
    rounds = math.ceil(math.ceil(count / dims.dp_size) / micro_batch_size)
    was_training = model.training
    model.eval()
    loss_sum, tokens = 0.0, 0.0
    with torch.no_grad():
        for index in range(rounds):
            rows = mine[index * micro_batch_size : (index + 1) * micro_batch_size]
            batch = _batch(sequences, rows, runtime.device)
            loss_sum += causal_lm_loss(model, batch, "sum", loss_chunks).item()
            tokens += float((batch["labels"][:, 1:] != IGNORE).sum())
    model.train(was_training)
    total, total_tokens = all_reduce_sum([loss_sum, tokens], runtime.device)
    loss = total / max(total_tokens, 1.0)
    return {"eval_loss": loss, "eval_perplexity": math.exp(min(loss, 700.0))}


def _batch(sequences: Sequences, rows: list[int], device: torch.device) -> dict[str, torch.Tensor]:
    """The rows' sequences, with labels; an empty share is one sequence that carries no
    loss (the first of the set, all labels ignored)."""
    batch = stack([_with_labels(sequences, row) for row in rows] or [_ignored(sequences)])
    return {name: tensor.to(device) for name, tensor in batch.items()}


def _with_labels(sequences: Sequences, row: int) -> dict[str, torch.Tensor]:
    sequence = {name: tensor[row] for name, tensor in sequences.items()}
    sequence.setdefault("labels", sequence["input_ids"])
    return sequence


def _ignored(sequences: Sequences) -> dict[str, torch.Tensor]:
    sequence = _with_labels(sequences, 0)
    sequence["labels"] = torch.full_like(sequence["labels"], IGNORE)
    return sequence
