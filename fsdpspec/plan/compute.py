"""FLOPs and communication of one optimizer step, and the ideal times they take.

FLOPs follow the PaLM accounting (Chowdhery et al. 2022, appendix B): 6·N per token for
the matrix multiplies plus 12·L·q·S for attention scores and values; full activation
checkpointing re-runs the forward (a third more), and a DPO reference (a frozen copy, or
the policy with its adapters off) runs one more forward per micro-batch, on both
sequences of each pair. Communication is what FSDP moves per
rank: an all-gather of each unit in forward and again in backward for units freed after
forward, a reduce-scatter of the gradients once per synchronised micro-batch (every one
but under NO_SHARD, where the engine reduces the last only), and for
replicated strategies an all-reduce across replicas; ring collectives move (n-1)/n of
the buffer per rank, an all-reduce twice that. Context parallelism adds its ring
attention's key/value exchange in every layer (`fsdpspec.plan.ring`), again in a layer
that recomputes its forward.
"""

from __future__ import annotations

from dataclasses import dataclass

from fsdpspec.catalog.accelerators import Accelerator
from fsdpspec.job.job import Job
from fsdpspec.plan import expert_parallel as ep
from fsdpspec.plan.memory import (
    gathered_bytes,
    reference_copy,
    reference_forward,
    saved_activation_bytes,
)
from fsdpspec.plan.memory_levers import chunked_loss_flops, offload_seconds
from fsdpspec.plan.ring import ring_traffic_bytes
from fsdpspec.plan.tensor_parallel import link_gbps, step_bytes, tp_degree
from fsdpspec.plan.unit_shards import sharding
from fsdpspec.semantics import (
    forward_flops_per_token,
    model_flops_per_token,
    recompute_flops_per_token,
)


@dataclass(frozen=True)
class UnitTraffic:
    """What one copy of a unit moves per rank in one micro-batch: its all-gather (each
    time it is gathered), its gradients' reduce-scatter and, across replicas, all-reduce
    (when the micro-batch synchronises gradients)."""

    name: str
    count: int
    all_gather_bytes: int
    reduce_scatter_bytes: int
    all_reduce_bytes: int
    # Sharded fp32 elements one rank holds of one copy (what CPU offload copies).
    shard_numel: int


@dataclass(frozen=True)
class Compute:
    """One step of one rank: work, traffic and the ideal time of each."""

    flops: float
    # The FLOPs MFU counts: `flops` without recomputation.
    model_flops: float
    all_gather_bytes: int
    reduce_scatter_bytes: int
    all_reduce_bytes: int
    # None when the device's peak is unknown (a custom accelerator without *_tflops).
    compute_seconds: float | None
    communication_seconds: float
    # Activation offload's PCIe transfers (out in forward, back in backward).
    offload_seconds: float = 0.0
    # Context parallelism's ring attention (k/v exchange), per micro-batch: it waits
    # inside the attention op, so the step-time model counts it exposed.
    ring_bytes: int = 0
    ring_seconds: float = 0.0
    # Tensor parallelism's activation collectives (`fsdpspec.plan.tensor_parallel`).
    tensor_parallel_bytes: int = 0
    # A DPO reference's forward (in `flops`, not in `model_flops`).
    reference_flops: float = 0.0
    # Expert parallelism's all-to-alls (`fsdpspec.plan.expert_parallel`), per step.
    expert_parallel_bytes: int = 0


def _flops_per_token(job: Job, parameters: int) -> tuple[float, float, float]:
    """(model FLOPs, recomputed FLOPs, a DPO reference's forward FLOPs) per token."""
    assert job.geometry is not None  # the planner plans only jobs with a geometry
    shape = dict(parameters=parameters, num_layers=job.geometry.num_layers,
                 q_width=job.geometry.q_width, seq_len=job.batch.seq)
    reference = forward_flops_per_token(**shape) if reference_forward(job) else 0.0
    return model_flops_per_token(**shape), recompute_flops_per_token(
        **shape, mode=job.units.ac_mode, ac_every=job.units.ac_every), reference


def precompute_flops_per_pair(job: Job, parameters: int) -> float:
    """The precompute pass of ``train.dpo.reference: precomputed``: one forward of a
    pair's two sequences (padded to seq_len) through the starting weights."""
    assert job.geometry is not None  # the planner plans only jobs with a geometry
    return 2 * job.batch.seq * forward_flops_per_token(
        parameters=parameters, num_layers=job.geometry.num_layers,
        q_width=job.geometry.q_width, seq_len=job.batch.seq)


def _per_rank(job: Job, per_token: float) -> float:
    """Per-token FLOPs over one rank's step (all its micro-batches): a tensor-parallel
    group shares its micro-batches' FLOPs."""
    return per_token * job.batch.tokens * job.batch.accumulation / tp_degree(job)


def step_flops(job: Job, parameters: int) -> float:
    """FLOPs of one rank's optimizer step (all its micro-batches)."""
    return (_per_rank(job, sum(_flops_per_token(job, parameters)))
            + chunked_loss_flops(job) / tp_degree(job))


def unit_traffic(job: Job) -> tuple[UnitTraffic, ...]:
    """Each unit's collectives per micro-batch, ring-sized ((n-1)/n of the buffer per
    rank, an all-reduce twice that), the root last."""
    sh = sharding(job)
    s, r = job.layout.shard_size, job.reduce_bytes
    ring, replicas = (s - 1) / s, job.layout.replicas
    out = []
    for unit in sh.all_units:
        gathered, shard = sh.gathered_numel(unit), sh.shard_numel(unit)
        # Under expert parallelism the experts' rings are efsdp long (`Sharding.sent_numel`).
        sent = sh.sent_numel(unit)
        saving = job.compute_bytes * gathered - gathered_bytes(sh, job, unit)  # float8
        all_reduce = (int(2 * r * shard * (replicas - 1) / replicas) if replicas > 1 else 0)
        out.append(UnitTraffic(unit.name, unit.count,
                               int(job.compute_bytes * sent - ring * saving),
                               int(r * sent), all_reduce, shard))
    return tuple(out)


def step_compute(job: Job, parameters: int, device: Accelerator, compute_dtype: str) -> Compute:
    """Work and traffic of one step, timed at the device's peaks."""
    traffic = unit_traffic(job)
    micro = job.batch.accumulation
    synced = job.layout.synced_micro_batches
    *layers, root = traffic
    # Units freed after forward are gathered again in backward; the root never is. A
    # reference forward gathers every unit once more, and a frozen copy its own root
    # (the adapter's reference leaves the policy's root gathered for its forward).
    layer_gathers = sum(t.all_gather_bytes * t.count for t in layers)
    gathers = layer_gathers * (2 if job.layout.reshards_after_forward else 1) + \
        root.all_gather_bytes
    if reference_forward(job):
        gathers += layer_gathers + (root.all_gather_bytes if reference_copy(job) else 0)
    all_gather = int(gathers * micro)
    reduce_scatter = int(sum(t.reduce_scatter_bytes * t.count for t in traffic) * synced)
    all_reduce = int(sum(t.all_reduce_bytes * t.count for t in traffic) * synced)
    model, _, reference = _flops_per_token(job, parameters)
    flops = step_flops(job, parameters)
    peak = device.peak_tflops(compute_dtype)
    # At the links the step-time model lays them on: what bounds the step is its verdict.
    seconds = ((all_gather + reduce_scatter) / (shard_link_gbps(job, device) * 1e9)
               + all_reduce / (replica_link_gbps(job, device) * 1e9))
    seconds += step_bytes(job) / (link_gbps(job, device) * 1e9)
    seconds += ep.micro_batch_seconds(job, device) * micro
    model_flops = _per_rank(job, model)
    ring = ring_micro_batch_bytes(job)
    ring_link = (device.intra_node_gbps if job.layout.dims.cp <= job.layout.gpus_per_node
                 else device.inter_node_gbps)
    return Compute(flops, model_flops, all_gather, reduce_scatter,
                   all_reduce, flops / (peak * 1e12) if peak else None, seconds,
                   offload_seconds(saved_activation_bytes(job), job),
                   ring, ring / (ring_link * 1e9), tensor_parallel_bytes=step_bytes(job),
                   reference_flops=_per_rank(job, reference),
                   expert_parallel_bytes=ep.step_bytes(job))


def shard_link_gbps(job: Job, device: Accelerator) -> float:
    """A shard group inside a node rings over the node's links. One spanning nodes runs
    NCCL's rings through each of its devices in a node and across their NICs in
    parallel, so the data entering a node is split over those NICs and spread inside
    over NVLink: the slower of the node's link and its NICs together (under tensor
    parallelism a node holds gpus_per_node ÷ tp of a group's ranks)."""
    lay = job.layout
    if not lay.shard_group_spans_nodes:
        return device.intra_node_gbps
    return min(device.intra_node_gbps, lay.shard_ranks_per_node * device.inter_node_gbps)


def replica_link_gbps(job: Job, device: Accelerator) -> float:
    """Replicas (hybrid strategies, NO_SHARD) all-reduce between the ranks holding the
    same shard: inside a node over its links, else one rank per node, over its own NIC."""
    lay = job.layout
    return device.intra_node_gbps if lay.world_size <= lay.gpus_per_node \
        else device.inter_node_gbps


def ring_micro_batch_bytes(job: Job) -> int:
    """The ring attention's bytes per rank and micro-batch: every layer's forward and
    backward exchange, and the forward again in each layer whose checkpointing
    recomputes its attention (torchtitan's op-level policy saves the attention output)."""
    if job.layout.dims.cp == 1:
        return 0
    forward, backward = ring_traffic_bytes(job)
    layers, units = job.geometry.num_layers, job.units
    recomputed = 0 if units.ac_mode == "op" else units.checkpointed_count(layers)
    return layers * (forward + backward) + recomputed * forward
