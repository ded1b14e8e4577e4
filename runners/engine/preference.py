"""The DPO objective (``train.objective: dpo``): the loss, its metrics, and the reference.

A micro-batch of ``B`` pairs (``preference_data``: ``[B, 2, seq_len]``) runs through the
policy as one batch of ``2B`` sequences, the chosen ones then the rejected ones (as TRL
concatenates them); a sequence's log-probability is the sum over its completion tokens.
The reference gives the same ``2B`` log-probabilities without gradients:

- ``model``: a frozen copy of the starting weights, sharded as the policy is, stored in
  the compute dtype (FSDP2), with no gradient and no optimizer state; its forward's
  gathered parameters are freed once it is done (`resharded`);
- ``adapter``: the policy itself with its LoRA adapters switched off (the frozen base);
- ``precomputed``: looked up in the pairs' ``reference_logps`` column, written once
  before training (``precompute``) into ``run_dir/reference-logps/<key>.pt``.

The loss and the metrics are TRL's (``DPOTrainer``): with ``Δ = (π_c − ref_c) − (π_r −
ref_r)``, sigmoid is ``−(1−ε) log σ(βΔ) − ε log σ(−βΔ)`` (ε = label smoothing), ipo is
``(Δ_c/n_c − Δ_r/n_r − 1/(2β))²`` over completion token counts; rewards are ``β(π − ref)``
and every metric is a mean over the step's pairs on every rank.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.fsdp import FSDPModule

from fsdpspec.job.batch import Batch
from fsdpspec.job.job import Job
from fsdpspec.job.parallel import ParallelDims
from fsdpspec.spec.v1 import Dpo, JobSpec
from fsdpspec_runners.engine.dist import Runtime, all_reduce_max, all_reduce_sum, console
from fsdpspec_runners.engine.examples import IGNORE
from fsdpspec_runners.engine.lora import frozen_in_compute_dtype
from fsdpspec_runners.engine.loss import next_token_labels
from fsdpspec_runners.engine.packing import Sequences

REFERENCE_COLUMN = "reference_logps"  # [pairs, 2]: the reference's chosen, rejected
REFERENCE_DIR = "reference-logps"
# The metrics TRL logs, in the order of the sums the objective keeps (after the count).
METRICS = ("rewards/chosen", "rewards/rejected", "rewards/accuracies", "rewards/margins",
           "logps/chosen", "logps/rejected")


def concatenated(batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """``input_ids`` and ``labels`` of ``[B, 2, L]`` pairs as ``[2B, L]``: chosen, then
    rejected."""
    ids, labels = batch["input_ids"], batch["labels"]
    return torch.cat([ids[:, 0], ids[:, 1]]), torch.cat([labels[:, 0], labels[:, 1]])


def sequence_logps(model: nn.Module, ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Each sequence's summed log-probability of its labelled tokens, ``[2B]`` in fp32.
    Right padding needs no mask: a causal model's real tokens never see it."""
    output = model(ids)
    logits = getattr(output, "logits", output)
    targets = next_token_labels({"input_ids": ids, "labels": labels})
    token_loss = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(),
                                 ignore_index=IGNORE, reduction="none")
    return -token_loss.view(ids.shape).sum(dim=1)


@contextmanager
def adapters_disabled(model: nn.Module) -> Iterator[None]:
    """peft's layers compute their base alone (``disable_adapters``), without touching
    ``requires_grad`` as peft's own switch does: the adapters stay trainable."""
    layers = [m for m in model.modules() if hasattr(m, "_disable_adapters")]
    for layer in layers:
        layer._disable_adapters = True
    try:
        yield
    finally:
        for layer in layers:
            layer._disable_adapters = False


def resharded(frozen: nn.Module) -> None:
    """Free the frozen copy's gathered parameters once its forward is done. Without
    gradients FSDP2 never reaches the post-backward that reshards the units it keeps
    after forward (the root, the last layer), so they would stay gathered through the
    policy's forward and backward. (FSDP1 keeps its root: it has no public reshard.)"""
    for module in frozen.modules():
        if isinstance(module, FSDPModule):
            module.reshard()


class Reference:
    """The reference log-probabilities ``[2B]`` of a micro-batch, without gradients."""

    def __init__(self, kind: str, frozen: nn.Module | None = None) -> None:
        self.kind, self.frozen = kind, frozen

    def logps(self, policy: nn.Module, batch: dict[str, torch.Tensor], ids: torch.Tensor,
              labels: torch.Tensor) -> torch.Tensor:
        if self.kind == "precomputed":
            stored = batch[REFERENCE_COLUMN]
            return torch.cat([stored[:, 0], stored[:, 1]])
        with torch.no_grad():
            if self.kind == "adapter":
                with adapters_disabled(policy):
                    return sequence_logps(policy, ids, labels)
            assert self.frozen is not None
            logps = sequence_logps(self.frozen, ids, labels)
            resharded(self.frozen)
            return logps


def dpo_losses(settings: Dpo, policy: torch.Tensor, reference: torch.Tensor,
               counts: torch.Tensor) -> torch.Tensor:
    """Each pair's loss from the ``[2B]`` log-probabilities and completion token counts."""
    ratios = policy - reference
    chosen, rejected = ratios.chunk(2)
    beta = settings.beta
    if settings.loss == "ipo":
        chosen_counts, rejected_counts = counts.chunk(2)
        delta = chosen / chosen_counts.clamp(min=1) - rejected / rejected_counts.clamp(min=1)
        return (delta - 1 / (2 * beta)) ** 2
    smoothing = settings.label_smoothing
    delta = beta * (chosen - rejected)
    return -(1 - smoothing) * F.logsigmoid(delta) - smoothing * F.logsigmoid(-delta)


def metric_sums(settings: Dpo, policy: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    """[pairs, then the sum over the pairs of each of METRICS]."""
    policy, reference = policy.detach(), reference.detach()
    rewards = settings.beta * (policy - reference)
    chosen, rejected = rewards.chunk(2)
    logps_chosen, logps_rejected = policy.chunk(2)
    per_pair = torch.stack([chosen, rejected, (chosen > rejected).float(), chosen - rejected,
                            logps_chosen, logps_rejected])
    return torch.cat([chosen.new_tensor([chosen.numel()]), per_pair.sum(dim=1)])


def metrics_of(sums: list[float]) -> dict[str, float]:
    """The mean of each metric from [pairs, sums…] summed over micro-batches and ranks."""
    pairs = max(sums[0], 1.0)
    return {name: total / pairs for name, total in zip(METRICS, sums[1:], strict=True)}


@dataclass
class Preference:
    """The DPO objective as the loop calls it: a micro-batch's loss, and the step's
    metric sums (kept on the device until the step's one collective)."""

    settings: Dpo
    reference: Reference
    _sums: torch.Tensor | None = field(default=None, repr=False)

    def loss(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The mean loss over the micro-batch's pairs."""
        ids, labels = concatenated(batch)
        reference = self.reference.logps(model, batch, ids, labels)
        policy = sequence_logps(model, ids, labels)
        counts = (labels != IGNORE).sum(dim=1)
        sums = metric_sums(self.settings, policy, reference)
        self._sums = sums if self._sums is None else self._sums + sums
        return dpo_losses(self.settings, policy, reference, counts).mean()

    def take_sums(self) -> list[float]:
        """The step's sums so far (its micro-batches on this rank), reset."""
        assert self._sums is not None
        sums, self._sums = self._sums.tolist(), None
        return sums

    def evaluate(self, model: nn.Module, sequences: Sequences, batch: Batch,
                 dims: ParallelDims, runtime: Runtime) -> dict[str, float]:
        """``eval_loss`` and each ``eval_<metric>``: means over the evaluation pairs."""
        was_training = model.training
        model.eval()
        loss_sum = torch.zeros((), dtype=torch.float64, device=runtime.device)
        sums = torch.zeros(1 + len(METRICS), dtype=torch.float64, device=runtime.device)
        with torch.no_grad():
            for rows, weight in _shares(len(sequences["input_ids"]), batch.micro, dims, runtime):
                pairs = {k: v[rows].to(runtime.device) for k, v in sequences.items()}
                ids, labels = concatenated(pairs)
                reference = self.reference.logps(model, pairs, ids, labels)
                policy = sequence_logps(model, ids, labels)
                counts = (labels != IGNORE).sum(dim=1)
                loss_sum += weight * dpo_losses(self.settings, policy, reference, counts).sum()
                sums += weight * metric_sums(self.settings, policy, reference)
        model.train(was_training)
        total = all_reduce_sum([loss_sum.item(), *sums.tolist()], runtime.device)
        metrics = metrics_of(total[1:])
        return {"eval_loss": total[0] / max(total[1], 1.0),
                **{f"eval_{name}": value for name, value in metrics.items()}}


def _shares(count: int, micro: int, dims: ParallelDims,
            runtime: Runtime) -> Iterator[tuple[list[int], float]]:
    """This data-parallel rank's rows ``r, r + dp_size, …`` in micro-batches, and their
    weight: every rank runs as many forwards (FSDP gathers in each), so a rank whose
    share ran out runs the first row with weight 0."""
    mine = list(range(dims.dp_rank(runtime.rank), count, dims.dp_size))
    rounds = math.ceil(math.ceil(count / dims.dp_size) / micro)
    for index in range(rounds):
        rows = mine[index * micro: (index + 1) * micro]
        yield (rows, 1.0) if rows else ([0], 0.0)


# --- precomputed reference log-probs ------------------------------------------------

def reference_key(spec: JobSpec, parts: dict[str, Sequences | None]) -> str:
    """What the reference log-probs depend on: the pairs' tokens (so the data and the
    tokenizer), the starting weights (their files, or the seed of a random init), and
    how the model computes (its section, the compute dtype, a QLoRA base)."""
    digest = hashlib.sha256()
    for name, part in sorted(parts.items()):
        digest.update(name.encode())
        if part is not None:
            for column in ("input_ids", "labels"):
                digest.update(part[column].numpy().tobytes())
    weights = spec.model.weights
    identity = {
        "model": spec.model.model_dump(mode="json"),
        "weights": _files_identity(Path(weights)) if weights else None,
        "seed": None if weights else spec.train.seed,
        "param_dtype": spec.fsdp.mixed_precision.param_dtype,
        "peft": spec.peft.method if spec.peft else None,
    }
    digest.update(json.dumps(identity, sort_keys=True).encode())
    return digest.hexdigest()[:16]


def _files_identity(directory: Path) -> list[tuple[str, int, int]]:
    """Name, size and modification time of each weight file (hashing the bytes of a large
    model would take minutes at every start)."""
    return [(p.name, p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(directory.iterdir()) if p.is_file()]


def precompute(model: nn.Module, parts: dict[str, Sequences | None], spec: JobSpec,
               batch: Batch, dims: ParallelDims, run_dir: Path, runtime: Runtime) -> None:
    """Add the reference column to each part's pairs: read from the run directory when a
    pass with the same key wrote it, else computed by ``model`` (the starting weights:
    called before a checkpoint is loaded) and written there for every later start."""
    path = run_dir / REFERENCE_DIR / f"{reference_key(spec, parts)}.pt"
    (missing,) = all_reduce_max([float(not path.is_file())], runtime.device)
    if missing:
        started = time.perf_counter()
        columns = {name: _reference_column(model, part, batch, dims, runtime)
                   for name, part in parts.items() if part is not None}
        if runtime.local_rank == 0:
            _write(path, columns)
        dist.barrier()
        pairs = sum(len(c) for c in columns.values())
        console(runtime, f"reference log-probs: {pairs} pairs in "
                         f"{time.perf_counter() - started:.1f} s, written to {path}")
    else:
        columns = torch.load(path, weights_only=True)
        console(runtime, f"reference log-probs: read from {path}")
    for name, column in columns.items():
        parts[name][REFERENCE_COLUMN] = column  # type: ignore[index]


def _reference_column(model: nn.Module, part: Sequences, batch: Batch, dims: ParallelDims,
                      runtime: Runtime) -> torch.Tensor:
    """``[pairs, 2]`` reference log-probs: each rank its share, summed over the ranks."""
    count = len(part["input_ids"])
    column = torch.zeros(count, 2, dtype=torch.float32, device=runtime.device)
    was_training = model.training
    model.eval()
    with torch.no_grad():
        for rows, weight in _shares(count, batch.micro, dims, runtime):
            pairs = {k: v[rows].to(runtime.device) for k, v in part.items()}
            logps = sequence_logps(model, *concatenated(pairs))
            if weight:
                column[rows] = torch.stack(logps.chunk(2), dim=1)
    model.train(was_training)
    # The ranks of one data-parallel rank computed the same rows: count them once.
    dist.all_reduce(column)
    return (column / (runtime.world_size // dims.dp_size)).cpu()


def _write(path: Path, columns: dict[str, torch.Tensor]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    torch.save(columns, tmp)
    os.replace(tmp, path)


def holds_frozen_copy(spec: JobSpec) -> bool:
    """Whether the job holds a second model: DPO's reference as a frozen copy."""
    return spec.train.objective == "dpo" and spec.train.dpo.reference == "model"


def build_objective(spec: JobSpec, frozen: nn.Module | None) -> Preference:
    """The DPO objective of the job, around its reference."""
    dpo = spec.train.dpo
    return Preference(dpo, Reference(dpo.reference, frozen))


def as_reference(model: nn.Module, job: Job) -> nn.Module:
    """The meta model made DPO's reference copy before it is sharded: no gradients, and
    under FSDP2 stored in the compute dtype (as a LoRA's base). Its forward gathers the
    same compute-dtype values an fp32 copy would be cast to, at half the memory."""
    model.requires_grad_(False)
    frozen_in_compute_dtype(model, job)
    return model


def freeze(model: nn.Module) -> nn.Module:
    """The reference copy: no gradients (so no optimizer state), in eval mode."""
    model.requires_grad_(False)
    return model.eval()


def reference_note(spec: JobSpec) -> str:
    """One line saying what the reference is."""
    dpo = spec.train.dpo
    what: dict[str, Any] = {
        "model": "a frozen sharded copy of the starting weights",
        "adapter": "the policy with its adapters disabled",
        "precomputed": "log-probs computed once before training",
    }
    return (f"objective dpo ({dpo.loss}, beta {dpo.beta:g}"
            + (f", label smoothing {dpo.label_smoothing:g}" if dpo.label_smoothing else "")
            + f"): reference {dpo.reference}, {what[dpo.reference]}")
