"""Tensor parallelism: the family's plan (`fsdpspec.catalog.families.TensorParallelPlan`)
applied to the built model on the ``tp`` sub-mesh, before checkpointing, compile and
FSDP (torchtitan's `parallelize_llama`).

Between the layers the hidden states are a DTensor split over the sequence (sequence
parallelism): the embedding reduce-scatters its output, the norms run on each rank's
shard, the attention and the MLP all-gather their input, and their row-wise output
projections reduce-scatter it back. The output projection leaves the logits split by
vocabulary, and the cross entropy runs on them there (`loss_parallel`). The hidden
states keep their global shape, so transformers' masks and positions are the ones it
computes without tensor parallelism.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Any

from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    ParallelStyle,
    RowwiseParallel,
    SequenceParallel,
    loss_parallel,
    parallelize_module,
)

from fsdpspec.catalog.families import TP_DIVIDES, TensorParallelPlan, family
from fsdpspec.job.job import Job
from fsdpspec_runners.engine.errors import EngineError


def tensor_parallel_plan(job: Job) -> TensorParallelPlan:
    """The job's plan, or an EngineError naming what tensor parallelism cannot split
    (one line, until the lint rules refuse it before launch)."""
    problem, plan = _refusal(job), None
    if problem is None:
        fam = family(job.geometry.family)
        plan = fam.tensor_parallel_plan if fam else None
        if plan is None or plan.refused:
            reason = plan.refused if plan else "no family with a tensor-parallel plan"
            problem = f"model {job.geometry.family!r}: {reason}"
    if problem:
        raise EngineError(f"parallelism.tensor_parallel {job.layout.dims.tp}: {problem}; "
                          "set parallelism.tensor_parallel: 1")
    assert plan is not None
    return plan


def _refusal(job: Job) -> str | None:
    """What of the job, besides the family, tensor parallelism does not run with."""
    spec, dims, geometry = job.spec, job.layout.dims, job.geometry
    if job.layout.fsdp_version == 1:
        return "FSDP1 does not shard DTensors; use fsdp.version: 2"
    if dims.written_strategy == "NO_SHARD":
        return "NO_SHARD replicates with DDP, which does not take tensor-parallel modules"
    if spec.peft is not None:
        return f"a {spec.peft.method} adapter's projections are not split"
    if job.float8 is not None:
        return "float8 linears are not split (torchtitan's float8 parallel styles are not built)"
    if spec.train.loss_chunks > 1:
        return "train.loss_chunks applies the output projection itself, outside loss parallel"
    if geometry is None or not job.builds_transformers_model:
        return "a factory model's modules have no transformers names to split by"
    for attribute, name in TP_DIVIDES.items():
        if getattr(geometry, attribute) % dims.tp:
            return f"{name} {getattr(geometry, attribute)} is not divisible by it"
    if job.batch.seq % dims.tp:
        return f"sequence parallelism splits data.seq_len {job.batch.seq}, not divisible by it"
    return None


def apply_tensor_parallel(model: nn.Module, plan: TensorParallelPlan, mesh: DeviceMesh) -> None:
    """Split ``model`` in place over ``mesh`` (the ``tp`` sub-mesh) as ``plan`` says; tied
    input and output embeddings stay one (row-split) tensor."""
    tied = model.get_output_embeddings().weight is model.get_input_embeddings().weight
    styles = {name: _style(style, plan) for name, _ in model.named_modules()
              if (style := plan.style_of(name))}
    parallelize_module(model, mesh, styles)
    if tied:
        model.get_output_embeddings().weight = model.get_input_embeddings().weight


def _style(name: str, plan: TensorParallelPlan) -> ParallelStyle:
    sequence = Shard(1)
    return {
        "colwise": lambda: ColwiseParallel(),
        "rowwise": lambda: RowwiseParallel(output_layouts=sequence, use_local_output=False),
        "sequence_parallel": lambda: SequenceParallel(),
        "head_norm": lambda: SequenceParallel(sequence_dim=plan.heads_dim, use_local_output=True),
        "gather_input": GatheredInput,
        "vocab_embedding": lambda: RowwiseParallel(input_layouts=Replicate(),
                                                   output_layouts=sequence,
                                                   use_local_output=False),
        "loss_parallel": lambda: ColwiseParallel(input_layouts=sequence,
                                                 output_layouts=Shard(-1),
                                                 use_local_output=False),
    }[name]()


class GatheredInput(ParallelStyle):
    """The hidden states a module reads (its ``hidden_states`` argument, or its first),
    all-gathered from the sequence shards into a plain tensor: the column-wise
    projections inside take a whole sequence."""

    def _apply(self, module: nn.Module, device_mesh: DeviceMesh) -> nn.Module:
        module.register_forward_pre_hook(_gather_hidden_states, with_kwargs=True)
        return module


def _gather_hidden_states(module: nn.Module, args: tuple[Any, ...],
                          kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    def gathered(x: Any) -> Any:
        if isinstance(x, DTensor):
            return x.redistribute(placements=[Replicate()]).to_local()
        return x

    if "hidden_states" in kwargs:
        return args, {**kwargs, "hidden_states": gathered(kwargs["hidden_states"])}
    return (gathered(args[0]), *args[1:]), kwargs


def loss_context(job: Job) -> AbstractContextManager[None]:
    """Where the cross entropy may meet vocabulary-split logits (forward and backward,
    training and evaluation): torch's loss-parallel operators under tensor parallelism."""
    return loss_parallel() if job.layout.dims.tp_enabled else nullcontext()
