"""The cheapest changes that cut device memory, ranked by the bytes they save.

Each candidate is a `--set` override; its saving is the analytic peak recomputed with
the override applied, so interactions (a smaller micro-batch means more accumulation
steps, which keeps unsharded gradients between micro-batches) are counted.
"""

from __future__ import annotations

from dataclasses import dataclass

from fsdpspec.catalog.accelerators import Accelerator
from fsdpspec.job.job import Job
from fsdpspec.job.parallel import ParallelDimsError
from fsdpspec.plan import expert_parallel, memory_levers
from fsdpspec.plan.memory import DeviceMemory, device_memory
from fsdpspec.plan.tensor_parallel import lever_degrees, runs_at, tp_degree
from fsdpspec.semantics import reshards_after_forward, syncs_gradients
from fsdpspec.spec.load import SourceMap
from fsdpspec.spec.overrides import apply_overrides
from fsdpspec.spec.v1 import JobSpec


@dataclass(frozen=True)
class Suggestion:
    """One change: the override, what it means, the bytes it saves, whether it fits."""

    override: str
    description: str
    saves_bytes: int
    fits: bool


def _candidates(job: Job, device: Accelerator) -> list[tuple[str, str]]:
    spec, w = job.spec, job.layout
    fsdp, data = spec.fsdp, spec.data
    out = []
    if fsdp.activation_checkpointing != "full":
        out.append(("fsdp.activation_checkpointing=full",
                    "recompute each layer in backward instead of keeping its activations"))
    if not reshards_after_forward(fsdp.sharding_strategy):
        out.append(("fsdp.sharding_strategy=FULL_SHARD",
                    "shard parameters too and free them after forward"))
    if fsdp.sharding_strategy == "HYBRID_SHARD" and w.shard_size < w.world_size:
        out.append(("fsdp.sharding_strategy=FULL_SHARD", "shard over every rank, not a group"))
    if data.micro_batch_size > 1:
        out.append((f"data.micro_batch_size={data.micro_batch_size // 2}",
                    "halve the micro-batch (more accumulation steps, same global batch)"))
    if job.batch.accumulation > 1:
        carried = ("sharded" if syncs_gradients(w.strategy, last_micro_batch=False)
                   else "unsharded")
        out.append((f"data.global_batch_size={job.batch.per_pass}",
                    f"no accumulation: no {carried} gradients are carried between "
                    "micro-batches (changes the effective batch size)"))
    # Only where the model has SDPA (its `auto`): on Gemma 2 or gpt-oss, sdpa is FS410.
    if job.attention == "eager" and job.geometry.auto_attention == "sdpa":
        out.append(("model.attention=sdpa", "fused attention: no sequence² probabilities"))
    if fsdp.mixed_precision.param_dtype == "float32" and device.supports_bf16:
        out.append(("fsdp.mixed_precision=bf16", "compute and gather in bfloat16"))
    if not fsdp.cpu_offload and device.is_gpu:
        out.append(("fsdp.cpu_offload=true",
                    "keep sharded parameters, gradients and optimizer state in host memory"))
    if device.is_gpu:
        out += [(f"parallelism.tensor_parallel={d}", f"split each layer's weights and "
                 f"activations over {d} GPUs of a node (tensor parallelism: per-layer "
                 "collectives over the node's links)") for d in lever_degrees(job)]
        out += [(f"parallelism.expert_parallel={d}", f"split each layer's experts over {d} "
                 "GPUs, tokens sent to them by all-to-all (expert parallelism: smaller "
                 "expert gathers)") for d in expert_parallel.lever_degrees(job)]
    return out + _reference_candidates(spec) + _lever_candidates(spec, device)


def _reference_candidates(spec: JobSpec) -> list[tuple[str, str]]:
    """A DPO job's cheaper references than a frozen copy (each validated as the others)."""
    train = spec.train
    if train.objective != "dpo" or train.dpo.reference != "model":
        return []
    out = []
    if spec.peft is not None:
        out.append(("train.dpo.reference=adapter", "the reference is the base with the "
                    "adapters off: no frozen copy (one more forward of the policy)"))
    if not spec.data.streaming:  # FS562
        out.append(("train.dpo.reference=precomputed", "reference log-probs computed once "
                    "before training: no frozen copy and no reference forward"))
    return out


def _lever_candidates(spec: JobSpec, device: Accelerator) -> list[tuple[str, str]]:
    """The memory levers one at a time (`plan` also combines them: fitting.py)."""
    out = []
    if spec.train.loss_chunks == 1 and memory_levers.loss_chunks_apply(spec):
        out.append(("train.loss_chunks=8", "the loss over 8 chunks of tokens, one chunk's "
                    "logits alive (recomputes the output projection: +2·H·V FLOPs a token)"))
    if spec.fsdp.activation_checkpointing in ("none", "selective"):
        out.append(("fsdp.activation_checkpointing=op", "keep every other matmul's and "
                    "attention's outputs, recompute the rest (+P FLOPs a token)"))
    if spec.optimizer.name == "adamw" and spec.optimizer.state_dtype == "float32":
        out.append(("optimizer.state_dtype=bfloat16",
                    "AdamW moments in bf16 (no extra time; less precise moments)"))
        if memory_levers.int8_states_apply(spec):
            out.append(("optimizer.state_dtype=int8",
                        "AdamW moments 8-bit, torchao (no extra time; quantised moments)"))
    if device.is_gpu and not spec.fsdp.activation_offload:
        out.append(("fsdp.activation_offload=true",
                    "saved activations to pinned host memory (PCIe time, see compute)"))
    return out


def apply_override(spec: JobSpec, override: str) -> JobSpec:
    """``spec`` with one ``--set``-style override applied (the flag's own code)."""
    # An absent optional section (null) is left out, so an override can create it.
    data = {k: v for k, v in spec.as_json_data().items() if v is not None}
    apply_overrides(data, [override], SourceMap(file="suggestion"))
    return JobSpec.model_validate(data)


def suggestions(job: Job, memory: DeviceMemory, capacity: int,
                device: Accelerator) -> list[Suggestion]:
    """Changes that save device memory, most bytes saved first."""
    found = []
    candidates = _candidates(job, device)
    if job.spec.peft is None and memory.total > capacity:
        # A different job (adapters, not every weight, are trained): offered only when
        # the full fine-tune does not fit.
        candidates.append(("peft.method=lora", "fine-tune low-rank adapters on the frozen "
                           "base (LoRA) instead of every weight"))
    for override, description in candidates:
        changed = job.with_spec(apply_override(job.spec, override))
        if not runs_at(changed, tp_degree(changed)):
            continue  # e.g. the chunked loss under tensor parallelism (FS183)
        try:
            changed.layout.dims.validate()
        except ParallelDimsError:
            continue  # an expert-parallel degree these ranks cannot hold (FS162)
        after = device_memory(changed, is_gpu=device.is_gpu)
        saved = memory.total - after.total
        if saved > 0:
            found.append(Suggestion(override, description, saved, after.total <= capacity))
    return sorted(found, key=lambda s: -s.saves_bytes)
