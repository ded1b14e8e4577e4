"""Tensor parallelism as the plan counts it (torchtitan's plan, which the engine runs):
what one rank of a tensor-parallel group holds, and what the group moves per layer.

- Parameters: column-wise projections (q, k, v, gate, up), row-wise ones (o, down), the
  embedding and the output head (by vocabulary row) are split over the degree; norms
  and row-wise biases are replicated. One rank's tensors are those of the model with
  heads, key/value heads, MLP width and vocabulary divided by the degree
  (`local_geometry`), and FSDP shards each of them on dim 0 over the data-parallel
  ranks: gradients, optimizer state and FSDP's gathered buffers follow.
- Activations, with sequence parallelism: between the blocks (norms, residuals,
  dropout, a checkpointed layer's input) each rank holds 1/tp of the positions; each
  block's input is all-gathered whole for its column-wise projections (saved whole);
  everything per head or per MLP column is 1/tp (`fsdpspec.plan.activations`).
- Logits under loss parallel: the head's output stays split by vocabulary, so the
  logits, their fp32 upcast and log-softmax are 1/tp of the vocabulary.
- Collectives: per layer, forward all-gathers the attention's and the MLP's input and
  reduce-scatters their outputs (four, each (tp−1)/tp of b·T·H per rank), backward the
  transposes (four more), a recomputed layer four again; the embedding's output and the
  head's input one each way. They are on the critical path (no async TP): all exposed.
"""

from __future__ import annotations

import dataclasses
import functools

from fsdpspec.catalog.accelerators import Accelerator
from fsdpspec.catalog.families import CUSTOM, TP_DIVIDES, family
from fsdpspec.job.geometry import Geometry
from fsdpspec.job.job import Job
from fsdpspec.semantics import checkpointed_count

# Collectives per layer: forward (all-gather attention and MLP inputs, reduce-scatter
# their outputs); backward the same four transposed; a recomputing layer its forward's.
FORWARD_COLLECTIVES = 4
# Outside the layers: the embedding's output reduce-scattered, the head's input
# all-gathered (and the transposes in backward).
ROOT_COLLECTIVES = 2
# Collective bandwidth reached, as a share of the link's (as `steptime.LINK_EFFICIENCY`).
_LINK_EFFICIENCY = 0.9
# The degrees `plan` offers and `tune` tries, within a node.
DEGREES = (1, 2, 4, 8)


def splits(g: Geometry) -> dict[str, tuple[str, int]]:
    """What the degree must divide (lint FS170, FS171, FS173, FS174), by `Geometry`
    attribute (`families.TP_DIVIDES`): (what it is, its size in ``g``)."""
    return {attr: (what, getattr(g, attr)) for attr, what in TP_DIVIDES.items()}


def refusal(g: Geometry | None) -> str | None:
    """Why the engine cannot split the model at all (its family's
    `TensorParallelPlan.refused`; a model without an analytic family has no plan)."""
    if g is None or g.introspected:
        return "a model introspected from its config has no tensor-parallel plan"
    return (family(g.family) or CUSTOM).tensor_parallel_plan.refused


def runs_at(job: Job, tp: int) -> bool:
    """Whether the engine trains ``job`` at degree ``tp`` inside a node: every split
    whole, the sequence too, and none of the refused combinations (FS170–FS182; DPO:
    FS563)."""
    g, spec = job.geometry, job.spec
    if tp == 1:
        return True
    if (refusal(g) is not None or spec.peft is not None or spec.model.factory is not None
            or job.layout.fsdp_version != 2 or job.layout.written_strategy == "NO_SHARD"
            or spec.train.loss_chunks > 1 or spec.train.objective == "dpo"):
        return False
    whole = all(count % tp == 0 for _, count in splits(g).values())
    return whole and job.batch.seq % tp == 0 and job.layout.gpus_per_node % tp == 0


def lever_degrees(job: Job) -> tuple[int, ...]:
    """The degrees above the job's own that it could run at (`plan`'s lever)."""
    return tuple(d for d in DEGREES if d > tp_degree(job) and runs_at(job, d))


@functools.lru_cache(maxsize=64)
def _local(g: Geometry, tp: int) -> Geometry:
    return dataclasses.replace(
        g, num_heads=g.num_heads // tp, num_kv_heads=g.num_kv_heads // tp,
        intermediate_size=g.intermediate_size // tp, vocab_size=g.vocab_size // tp)


def local_geometry(g: Geometry, tp: int) -> Geometry:
    """The model one rank of a tensor-parallel group of ``tp`` holds: its tensors are
    the split ones' local shards (the rules FS170–FS174 make the splits whole)."""
    return g if tp == 1 else _local(g, tp)


def tp_degree(job: Job) -> int:
    return job.layout.dims.tp


def spans_nodes(job: Job) -> bool:
    """Whether a tensor-parallel group holds ranks of more than one node."""
    tp = tp_degree(job)
    return tp > 1 and job.layout.gpus_per_node % tp != 0


def collectives_per_micro_batch(job: Job) -> int:
    """Tensor-parallel collectives one rank runs in one micro-batch."""
    assert job.units is not None and job.geometry is not None
    layers = job.geometry.num_layers
    recomputed = checkpointed_count(job.units.ac_mode, job.units.ac_every, layers)
    return (2 * FORWARD_COLLECTIVES * layers + FORWARD_COLLECTIVES * recomputed
            + 2 * ROOT_COLLECTIVES)


def bytes_per_collective(job: Job) -> float:
    """What one rank sends in one of them: (tp − 1)/tp of the hidden states of its
    micro-batch, in the compute dtype."""
    assert job.geometry is not None
    tp = tp_degree(job)
    return job.compute_bytes * job.batch.tokens * job.geometry.hidden_size * (tp - 1) / tp


def link_gbps(job: Job, device: Accelerator) -> float:
    """The group's link: the node's (NVLink), or the network when it spans nodes."""
    return device.inter_node_gbps if spans_nodes(job) else device.intra_node_gbps


def micro_batch_seconds(job: Job, device: Accelerator, gbps: float | None = None) -> float:
    """Seconds one micro-batch spends in tensor-parallel collectives (0 without TP)."""
    if tp_degree(job) == 1:
        return 0.0
    rate = (gbps or link_gbps(job, device)) * 1e9 * (_LINK_EFFICIENCY if device.is_gpu else 1.0)
    count = collectives_per_micro_batch(job)
    return count * (bytes_per_collective(job) / rate + device.collective_latency_us * 1e-6)


def step_bytes(job: Job) -> int:
    """Bytes one rank sends in tensor-parallel collectives per optimizer step."""
    if tp_degree(job) == 1:
        return 0
    return int(collectives_per_micro_batch(job) * bytes_per_collective(job)
               * job.batch.accumulation)


def across_nodes_cost(job: Job, device: Accelerator) -> str:
    """What a group spanning nodes costs per step (FS177): its collectives at the
    network's rate against the node's."""
    micro = job.batch.accumulation
    slow = micro * micro_batch_seconds(job, device, device.inter_node_gbps)
    fast = micro * micro_batch_seconds(job, device, device.intra_node_gbps)
    sent = step_bytes(job)
    amount = f"{sent / 2**30:.1f} GiB" if sent >= 2**30 else f"{sent / 2**20:.1f} MiB"
    return (f"{amount} of activations per rank per step cross the network at "
            f"{device.inter_node_gbps:g} GB/s instead of {device.intra_node_gbps:g} GB/s "
            f"inside a node, all on the critical path: {1e3 * slow:,.1f} ms a step instead "
            f"of {1e3 * fast:,.1f} ms")
