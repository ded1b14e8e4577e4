"""The cheapest combination of memory levers that fits the job on the GPUs it names.

Each lever is a `--set` override: the chunked loss, op-level or full activation
checkpointing, bf16 or 8-bit optimizer states, activation offload, parameter offload and
the tensor-parallel degree (within a node).
Every combination the engine can run (the same predicates the lint rules apply) is
planned; of those that fit with the spec's headroom, the one that costs the least time
per step wins (recomputed FLOPs at the device's peak, PCIe transfers, tensor-parallel
collectives), then the one with fewer changes, then the one keeping more precision.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from fsdpspec.catalog.accelerators import Accelerator
from fsdpspec.job.job import Job
from fsdpspec.plan import memory_levers
from fsdpspec.plan import tensor_parallel as tp
from fsdpspec.plan.compute import step_compute
from fsdpspec.plan.memory import DeviceMemory, device_memory
from fsdpspec.plan.suggest import apply_override
from fsdpspec.semantics import MASTER_BYTES

# States kept in less precision rank after full precision when the time is equal.
_PRECISION_COST = {"optimizer.state_dtype=bfloat16": 1, "optimizer.state_dtype=int8": 2}


@dataclass(frozen=True)
class Fit:
    """A combination of levers, what it saves and what it costs per step."""

    overrides: tuple[str, ...]
    saves_bytes: int
    device_total: int
    extra_seconds: float


def _groups(job: Job, device: Accelerator) -> list[list[str | None]]:
    """Per lever, the values to try (None: leave the spec's)."""
    spec = job.spec
    fsdp, optimizer = spec.fsdp, spec.optimizer
    groups: list[list[str | None]] = []
    if spec.train.loss_chunks == 1 and memory_levers.loss_chunks_apply(spec):
        groups.append([None, "train.loss_chunks=8"])
    modes = {"op": 0, "full": 1}
    groups.append([None] + [f"fsdp.activation_checkpointing={m}" for m in modes
                            if fsdp.activation_checkpointing != m])
    if optimizer.name == "adamw" and optimizer.state_dtype == "float32":
        dtypes = ["bfloat16"] + (["int8"] if memory_levers.int8_states_apply(spec) else [])
        groups.append([None] + [f"optimizer.state_dtype={d}" for d in dtypes])
    if device.is_gpu and not fsdp.activation_offload:
        groups.append([None, "fsdp.activation_offload=true"])
    if device.is_gpu and not fsdp.cpu_offload:
        groups.append([None, "fsdp.cpu_offload=true"])
    degrees = tp.lever_degrees(job) if device.is_gpu else ()
    if degrees:
        groups.append([None, *(f"parallelism.tensor_parallel={d}" for d in degrees)])
    return groups


def _seconds(job: Job, parameters: int, device: Accelerator, dtype: str) -> float:
    """Time a step costs beyond its ideal forward and backward: recomputation (layers
    and loss chunks) at the device's peak, activation offload's transfers, tensor
    parallelism's blocking collectives, and with parameter offload the fp32 shards'
    copies to and from the host."""
    compute = step_compute(job, parameters, device, dtype)
    seconds = (compute.compute_seconds or 0.0) + compute.offload_seconds
    seconds += tp.micro_batch_seconds(job, device) * job.batch.accumulation
    if job.spec.fsdp.cpu_offload:
        shard = MASTER_BYTES * parameters // (job.layout.shard_size * tp.tp_degree(job))
        seconds += 3 * shard / (memory_levers.PCIE_GBPS * 1e9)  # params in, grads out, params in
    return seconds


def cheapest_fit(job: Job, memory: DeviceMemory, capacity: int,
                 device: Accelerator) -> Fit | None:
    """The cheapest combination of levers with which the job fits, None if none does."""
    spec, parameters = job.spec, job.geometry.active_params
    dtype = spec.fsdp.mixed_precision.param_dtype
    usable = capacity * (1.0 - spec.resources.memory_headroom)
    base = _seconds(job, parameters, device, dtype)
    best: tuple[tuple[float, int, int], Fit] | None = None
    for choice in itertools.product(*_groups(job, device)):
        overrides = tuple(o for o in choice if o)
        if not overrides:
            continue
        changed = spec
        for override in overrides:
            changed = apply_override(changed, override)
        after = job.with_spec(changed)
        if not tp.runs_at(after, tp.tp_degree(after)):
            continue  # a degree the engine cannot run with the other levers (FS183)
        total = device_memory(after, is_gpu=device.is_gpu).total
        if total > usable:
            continue
        extra = _seconds(after, parameters, device, dtype) - base
        key = (round(extra, 4), len(overrides), sum(_PRECISION_COST.get(o, 0) for o in overrides))
        if best is None or key < best[0]:
            best = (key, Fit(overrides, memory.total - total, total, extra))
    return best[1] if best else None
