"""`plan --trace`: the real model on fake tensors, measured by FSDPMemTracker.

This is the one plan path that imports torch and transformers. It builds the model the
engine builds (same code: ``fsdpspec_runners.engine``), wraps it the way the engine wraps it, and
runs two optimizer steps at the spec's shapes on FakeTensorMode with a fake process group
of the shard-group size: every tensor one rank would allocate is accounted, none is
backed by memory, and the collectives are no-ops. Under tensor parallelism the fake
group is one shard group by its tensor-parallel ranks, a 2-D mesh, and the model is
split by the engine's plan before it is sharded. The tracker's peak is what one rank
would allocate on the device (``torch.cuda.max_memory_allocated``), without the CUDA
context, NCCL buffers and allocator caching that the analytic plan adds on top.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from unittest import mock

from fsdpspec.catalog.families import family
from fsdpspec.job.job import Job

TRACED_STEPS = 2


class TraceError(ValueError):
    """A spec `plan --trace` cannot run (one line for the user)."""


@dataclass(frozen=True)
class TraceResult:
    """The traced peak of one rank during the last traced step."""

    peak_bytes: int
    # FSDPMemTracker categories at that peak ("Sharded Param", "Activation", …) → bytes.
    categories: dict[str, int]
    shard_size: int
    micro_batches: int
    tensor_parallel: int = 1


def check_traceable(job: Job) -> None:
    """Raise TraceError for the jobs the fake-tensor trace cannot represent."""
    spec, config = job.spec, job.config
    assert config is not None
    if job.layout.fsdp_version != 2:
        raise TraceError("--trace measures FSDP2 (fully_shard); this spec uses fsdp.version 1")
    if job.layout.ddp:
        raise TraceError("--trace measures FSDP2 on fake tensors; NO_SHARD in full precision "
                         "runs as DDP, whose C++ reducer needs real tensors; trace it with "
                         "fsdp.mixed_precision bf16 or a sharded strategy")
    if spec.fsdp.cpu_offload:
        raise TraceError("--trace runs on the CPU and cannot tell offloaded state from device "
                         "memory; drop fsdp.cpu_offload to trace")
    if spec.optimizer.state_dtype == "int8":
        raise TraceError("--trace cannot step torchao's 8-bit AdamW on fake tensors (its "
                         "quantisation reads values); trace with optimizer.state_dtype "
                         "float32 or bfloat16")
    if spec.fsdp.activation_offload:
        raise TraceError("--trace runs on the CPU, where offloaded activations stay where they "
                         "are; drop fsdp.activation_offload to trace")
    if spec.model.factory is not None:
        raise TraceError("--trace builds transformers models only (preset or hf_config)")
    if job.layout.dims.ep_enabled:
        raise TraceError("--trace does not run expert parallelism: its all-to-all's split sizes "
                         "are the counts of routed tokens, which fake tensors do not hold; "
                         "trace with parallelism.expert_parallel: 1")
    if spec.peft is not None and spec.peft.method == "qlora":
        raise TraceError("--trace cannot quantise QLoRA's 4-bit base on fake tensors (NF4 "
                         "reads the weights' values); trace peft.method: lora")
    found = family(config.get("model_type"))
    if found is not None and found.eager_only and job.attention != "eager":
        raise TraceError(f"transformers builds {found.model_type} with eager attention only; "
                         "set model.attention: eager")
    if found is not None and found.moe and spec.fsdp.mixed_precision.param_dtype != "bfloat16":
        raise TraceError("--trace runs a Mixture-of-Experts model's grouped expert matmul, "
                         "which takes bf16 only; set fsdp.mixed_precision: bf16")


def trace_job(job: Job) -> TraceResult:
    """Trace one rank of the job; see the module docstring."""
    check_traceable(job)
    import torch
    import torch.distributed as dist
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from fsdpspec_runners.engine.mesh import shard_group_mesh
    from fsdpspec_runners.engine.preference import holds_frozen_copy

    shard, tp = job.layout.shard_size, job.layout.dims.tp
    if dist.is_initialized():
        dist.destroy_process_group()
    dist.init_process_group("fake", rank=0, world_size=shard * tp, store=FakeStore())
    try:
        # The mesh must exist before FakeTensorMode (it is real process-group state), and
        # so must the meta model: some modules create meta buffers FakeTensorMode rejects.
        mesh = shard_group_mesh("cpu", shard, tp=tp)
        # So must the wrapping: FSDP2 over a tensor-parallel split builds a mesh of both.
        model = _wrapped(job, mesh, torch)
        reference = (_wrapped(job, mesh, torch, reference=True)
                     if holds_frozen_copy(job.spec) else None)
        with (FakeTensorMode(allow_non_fake_inputs=True), _unpacked_sequences(),
              _sharding_propagation_apart()):
            return _run(job, model, shard, torch, reference)
    finally:
        dist.destroy_process_group()


def _wrapped(job: Job, mesh: Any, torch: Any, *, reference: bool = False) -> Any:
    """The meta model the engine builds (or its DPO reference copy), checkpointed and
    sharded as it wraps it."""
    from fsdpspec_runners.engine.model_build import build_model
    from fsdpspec_runners.engine.preference import as_reference

    model = build_model(_fused_attention_dropout(job), on_meta=True)
    if reference:
        as_reference(model, job)
    wrap_job(job, model, mesh, torch.device("cpu"))
    return model


def _fused_attention_dropout(job: Job) -> Job:
    """The job whose model the trace builds: SDPA without attention dropout.

    On a GPU SDPA's flash and memory-efficient kernels apply attention dropout inside the
    kernel (they keep a random seed, not the probabilities). The CPU's fused kernel has
    no dropout, so on fake CPU tensors SDPA falls back to its math path and materialises
    the B·heads·S² scores, probabilities and mask, which a GPU run never allocates:
    StarCoder2-3B's published `attention_dropout` 0.1 traced 2.1 GiB of such temporaries
    at sequence 2048 (−17.6 % against the plan). Without dropout the CPU takes the fused
    path, as the GPU does with it. Eager attention keeps its dropout (it materialises the
    probabilities on a GPU too).
    """
    config = job.config
    assert config is not None
    if job.attention != "sdpa" or not config.get("attention_dropout"):
        return job
    return dataclasses.replace(job, config={**config, "attention_dropout": 0.0})


@contextmanager
def _unpacked_sequences() -> Iterator[None]:
    """Make transformers' mask builder take the path real tensors take.

    Without a key/value cache, transformers looks for packed sequences in the position
    ids (``masking_utils.find_packed_sequence_indices``). On real tensors the engine's
    positions (``arange``: it calls ``model(batch)``, one sequence per row) are found
    unpacked and the function returns None, so SDPA gets no mask, ``is_causal`` and native
    grouped-query attention. On fake tensors it cannot read the values (transformers'
    ``is_tracing`` is true for a FakeTensor) and returns the packing tensor, which turns
    off the ``is_causal`` skip: the trace would build a B·S² mask and repeat keys and
    values to every head, which a GPU run never allocates. Answer None, as real tensors
    do; the sliding-window mask is built on its own path and is kept.
    """
    from transformers import masking_utils

    with mock.patch.object(masking_utils, "find_packed_sequence_indices",
                           lambda position_ids: None):
        yield


@contextmanager
def _sharding_propagation_apart() -> Iterator[None]:
    """Keep DTensor's sharding propagation out of the measured fake mode, as on a GPU.

    To learn an output's global shape, DTensor runs an op once more on fake tensors of
    the global shapes (``ShardingPropagator._propagate_tensor_meta_non_cached``; loss
    parallel's handlers on every call). It uses the active fake mode if there is one.
    On a GPU there is none: it makes its own, which allocates nothing and which the
    memory tracker skips. Inside the trace's FakeTensorMode it would use that one, and
    the tracker would count those global-shape tensors as allocations: loss parallel's
    log-softmax alone, two fp32 tensors of every position × the whole vocabulary, 8·tp
    bytes per logit a rank holds, that no GPU allocates (Llama 3 8B at TP 8: +23 %).
    Let it make its own here too."""
    from torch.distributed.tensor import _sharding_prop

    with mock.patch.object(_sharding_prop, "detect_fake_mode", lambda *args: None):
        yield


def shard_job(job: Job, model: Any, mesh: Any, device: Any) -> Any:
    """Split, checkpoint, shard and materialise ``model`` as the engine does over
    ``mesh`` (`shard_group_mesh`); return its optimizer (shared with
    benchmarks/plan_gpu_check.py, which runs it on a real GPU)."""
    wrap_job(job, model, mesh, device)
    return materialised_optimizer(job, model, device)


def wrap_job(job: Job, model: Any, mesh: Any, device: Any) -> None:
    """Split, checkpoint and shard the meta ``model`` as the engine does."""
    from fsdpspec_runners.engine.wrap import parallelize

    spec = job.spec
    # Fake tensors are not compiled: the trace measures what eager FSDP2 allocates.
    uncompiled = spec.model_copy(update={"train": spec.train.model_copy(update={"compile": False})})
    # A 1-D mesh is the data-parallel one as the caller named it (DDP's is dp_replicate).
    tp_mesh = mesh["tp"] if job.layout.dims.tp_enabled else None
    data_mesh = mesh["dp_shard"] if tp_mesh is not None else mesh
    parallelize(model, job.with_spec(uncompiled), data_mesh, device, tp_mesh=tp_mesh)


def materialised_optimizer(job: Job, model: Any, device: Any) -> Any:
    """Allocate the wrapped ``model`` on ``device``; return its optimizer."""
    from fsdpspec_runners.engine.optim import build_optimizer

    spec = job.spec
    model.to_empty(device=device)
    optimizer = build_optimizer([p for p in model.parameters() if p.requires_grad],
                                spec.optimizer)
    # On a GPU the optimizers default to the multi-tensor (foreach) kernels; the CPU
    # default is the per-tensor loop, whose temporaries are smaller. Trace the GPU's.
    for group in optimizer.param_groups:
        group["foreach"] = True
    return optimizer


def train_step(job: Job, model: Any, optimizer: Any, device: Any,
               between_micro_batches: Any = None, reference: Any = None) -> int:
    """One optimizer step as the engine takes it (at most two micro-batches, gradients
    synchronised as the engine does; under DPO the engine's objective, around the frozen
    ``reference`` copy when it has one); returns the micro-batches run."""
    from fsdpspec_runners.engine.fsdp_version import Fsdp2
    from fsdpspec_runners.engine.loss import causal_lm_loss
    from fsdpspec_runners.engine.preference import build_objective
    from fsdpspec_runners.engine.tensor_parallel import loss_context

    spec = job.spec
    objective = build_objective(spec, reference) if spec.train.objective == "dpo" else None
    if objective is not None and between_micro_batches is not None:
        # The adapter reference runs the policy's forward once more: reset between.
        logps = objective.reference.logps
        def reference_then_reset(*args: Any) -> Any:
            out = logps(*args)
            between_micro_batches()
            return out
        objective.reference.logps = reference_then_reset  # type: ignore[method-assign]
    micro = min(2, job.batch.accumulation)
    for index in range(micro):
        if index and between_micro_batches is not None:
            between_micro_batches()
        batch = _micro_batch(job, model.config.vocab_size, device)
        with (Fsdp2().gradient_sync(model, job.layout.strategy, index == micro - 1),
              loss_context(job)):
            loss = (objective.loss(model, batch) if objective is not None
                    else causal_lm_loss(model, batch, chunks=spec.train.loss_chunks))
            (loss / micro).backward()
        del loss
    optimizer.step()
    optimizer.zero_grad()
    return micro


def _micro_batch(job: Job, vocab_size: int, device: Any) -> dict[str, Any]:
    """A micro-batch of the job's shape: sequences, or DPO's pairs (``[B, 2, seq]``, with
    the precomputed reference column the engine reads beside them)."""
    import torch

    from fsdpspec_runners.engine.preference import REFERENCE_COLUMN

    batch = job.batch
    if job.spec.train.objective != "dpo":
        shape = (batch.micro, batch.local_seq)
        return {"input_ids": torch.randint(0, vocab_size, shape, device=device)}
    ids = torch.randint(0, vocab_size, (batch.micro, batch.per_example, batch.local_seq),
                        device=device)
    return {"input_ids": ids, "labels": ids.clone(),
            REFERENCE_COLUMN: torch.zeros(batch.micro, batch.per_example, device=device)}


def _run(job: Job, model: Any, shard: int, torch: Any, reference: Any = None) -> TraceResult:
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
    from torch.distributed.fsdp import FSDPModule

    from fsdpspec_runners.engine.preference import freeze

    cpu = torch.device("cpu")
    optimizer = materialised_optimizer(job, model, cpu)
    if reference is not None:
        reference.to_empty(device=cpu)
        freeze(reference)
    for _ in range(TRACED_STEPS):
        # A fresh tracker per step: the last step is the steady state (optimizer state
        # exists). The first step's lazy state initialisation on DTensors is over-counted
        # by the tracker, and on a device it allocates no more than a later step does.
        tracker = FSDPMemTracker(model, optimizer)
        # The tracker follows one root: count the frozen copy's shards as it counts the
        # policy's (its gathers and activations it sees as they are allocated).
        for module in reference.modules() if reference is not None else ():
            if isinstance(module, FSDPModule) and module._get_fsdp_state()._fsdp_param_group:
                tracker._instrument_fsdp_sharded_params_grads(
                    module._get_fsdp_state()._fsdp_param_group)
        with tracker:
            # Per-module statistics allow one forward per module: reset between.
            micro = train_step(job, model, optimizer, cpu, tracker.reset_mod_stats,
                               reference)
    snapshot = tracker.get_tracker_snapshot("peak")[cpu]
    categories = {_category_name(k): int(v) for k, v in snapshot.items() if k != "Total"}
    return TraceResult(int(snapshot["Total"]), categories, shard, micro,
                       job.layout.dims.tp)


def _category_name(key: Any) -> str:
    return getattr(key, "value", str(key))
