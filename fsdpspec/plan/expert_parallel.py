"""Expert parallelism as the plan counts it (torchtitan's layout, `parallelism.expert_parallel`):
what one rank holds of a Mixture of Experts' experts, and what its all-to-alls move.

- Parameters: each layer's stacked expert tensors are split by expert index over the
  ``ep`` ranks (E ÷ ep experts each), and FSDP shards that local stack over the experts'
  own ``efsdp`` ranks (`ParallelDims.efsdp`), on dim 1 once efsdp exceeds the local
  experts (`fsdpspec.job.experts`); gradients, optimizer state and FSDP's gathered,
  prefetch and reduce-scatter buffers follow (`unit_shards.Sharding`). Everything else
  is sharded over the dense ``dp_shard`` ranks as without EP.
- Routing balance, an assumption: every figure here takes the router to be perfectly
  balanced, so each rank receives exactly its share of the routed tokens, tokens × top-k
  rows of the hidden size a micro-batch (what it sends). A skewed router sends some
  ranks more (more dispatch memory, longer all-to-alls, and the others wait for them):
  the plan does not model it.
- Dispatch buffers: an all-to-all's send and receive buffers, tokens × top-k rows of the
  hidden size each in the compute dtype, alive together in a MoE layer's forward and
  backward.
- All-to-alls: per MoE layer, forward dispatches the tokens and combines the experts'
  outputs (two), backward the transposes (two), a recomputed layer its forward's two
  again (not under op-level checkpointing, whose policy saves the all-to-all outputs as
  torchtitan's does). Each moves (ep − 1)/ep of the rank's rows. The experts wait for
  their tokens and the next block for the combine: all on the critical path (exposed),
  as tensor parallelism's. An ``ep`` group is ``ep`` consecutive ranks (innermost in
  the sparse mesh): inside a node over its links; across nodes each rank sends its
  off-node rows through its own NIC while the on-node ones cross NVLink.
"""

from __future__ import annotations

import math

from fsdpspec.catalog.accelerators import Accelerator
from fsdpspec.job.job import Job
from fsdpspec.job.units import Units

# All-to-alls in one MoE layer's forward (dispatch, combine); backward runs as many.
FORWARD_ALL_TO_ALLS = 2
# Collective bandwidth reached, as a share of the link's (as `steptime.LINK_EFFICIENCY`).
_LINK_EFFICIENCY = 0.9


def ep_degree(job: Job) -> int:
    return job.layout.dims.ep


def expert_count(units: Units | None) -> int:
    """Experts per layer: the expert index of the stacked expert tensors (dim 0), 0 for a
    model without experts. Read off the units, so a model introspected from its config
    (its experts named by transformers' ``base_model_ep_plan``) counts as a registered
    family's."""
    if units is None:
        return 0
    return max((shape[0] for unit in (*units.units, units.root)
                for shape, _ in unit.experts), default=0)


def moe_layers(job: Job) -> int:
    """Layers with experts (DeepSeek-V3's first three are dense)."""
    g = job.geometry
    assert g is not None and job.units is not None
    if g.experts is not None:
        return g.num_layers
    return sum(u.count for u in job.units.units if u.experts) or (
        g.num_layers if expert_count(job.units) else 0)


def top_k(job: Job) -> int:
    """Experts each token is routed to (``num_experts_per_tok``)."""
    g = job.geometry
    if g is not None and g.experts is not None:
        return g.experts.active
    return int((job.config or {}).get("num_experts_per_tok") or 1)


def routed_rows(job: Job) -> int:
    """Rows of the hidden size one rank sends (and, balanced, receives) in one all-to-all:
    its micro-batch's tokens, each to top-k experts (its tensor-parallel group's tokens
    are split over the group by sequence parallelism)."""
    return job.batch.tokens * top_k(job) // job.layout.dims.tp


def dispatch_bytes(job: Job) -> int:
    """One all-to-all's send and receive buffers together (0 without EP)."""
    if ep_degree(job) == 1:
        return 0
    assert job.geometry is not None
    return 2 * job.compute_bytes * routed_rows(job) * job.geometry.hidden_size


def all_to_alls_per_micro_batch(job: Job) -> int:
    """All-to-alls one rank runs in one micro-batch."""
    assert job.units is not None
    layers = moe_layers(job)
    units = job.units
    recomputed = 0 if units.ac_mode == "op" else min(layers, units.checkpointed_count(
        job.geometry.num_layers))
    return FORWARD_ALL_TO_ALLS * (2 * layers + recomputed)


def bytes_per_all_to_all(job: Job) -> float:
    """What one rank sends to the other ranks of its group in one of them."""
    assert job.geometry is not None
    ep = ep_degree(job)
    return job.compute_bytes * routed_rows(job) * job.geometry.hidden_size * (ep - 1) / ep


def spans_nodes(job: Job) -> bool:
    """Whether an expert-parallel group holds ranks of more than one node."""
    ep = ep_degree(job)
    return ep > 1 and job.layout.gpus_per_node % ep != 0


def _seconds_per_all_to_all(job: Job, device: Accelerator, inter: float, intra: float) -> float:
    ep, per_node = ep_degree(job), job.layout.gpus_per_node
    rows = job.compute_bytes * routed_rows(job) * job.geometry.hidden_size / ep
    local = math.gcd(ep, per_node)  # the group's ranks on one node
    share = _LINK_EFFICIENCY if device.is_gpu else 1.0
    on_node = rows * (local - 1) / (intra * 1e9 * share)
    off_node = rows * (ep - local) / (inter * 1e9 * share)
    return max(on_node, off_node) + device.collective_latency_us * 1e-6


def micro_batch_seconds(job: Job, device: Accelerator, inter: float | None = None) -> float:
    """Seconds one micro-batch spends in all-to-alls (0 without EP): the on-node rows
    over the node's links and the off-node ones over the NIC (``inter``, by default the
    device's network) at once."""
    if ep_degree(job) == 1:
        return 0.0
    per = _seconds_per_all_to_all(job, device, inter or device.inter_node_gbps,
                                  device.intra_node_gbps)
    return all_to_alls_per_micro_batch(job) * per


def step_bytes(job: Job) -> int:
    """Bytes one rank sends in all-to-alls per optimizer step."""
    if ep_degree(job) == 1:
        return 0
    return int(all_to_alls_per_micro_batch(job) * bytes_per_all_to_all(job)
               * job.batch.accumulation)


def across_nodes_cost(job: Job, device: Accelerator) -> str:
    """What a group spanning nodes costs per step (FS166): its all-to-alls with the
    off-node rows on the network against all of them over NVLink."""
    micro = job.batch.accumulation
    slow = micro * micro_batch_seconds(job, device)
    fast = micro * micro_batch_seconds(job, device, device.intra_node_gbps)
    sent = step_bytes(job)
    amount = f"{sent / 2**30:.1f} GiB" if sent >= 2**30 else f"{sent / 2**20:.1f} MiB"
    return (f"{amount} of routed tokens per rank per step in all-to-alls, the off-node "
            f"share at {device.inter_node_gbps:g} GB/s instead of "
            f"{device.intra_node_gbps:g} GB/s inside a node, all on the critical path: "
            f"{1e3 * slow:,.1f} ms a step instead of {1e3 * fast:,.1f} ms")


def runs_at(job: Job, degree: int) -> bool:
    """Whether the engine trains ``job`` at expert-parallel degree ``degree`` as the
    rules let it (FS160–FS165, FS181): experts split whole, FSDP2 over a sharded
    strategy, without context or tensor parallelism or float8. The ranks it needs are
    the fewest-GPUs search's to find."""
    experts, lay = expert_count(job.units), job.layout
    if degree == 1:
        return True
    return (experts % degree == 0 and experts > 0 and lay.fsdp_version == 2
            and lay.dims.written_strategy != "NO_SHARD" and lay.dims.cp == 1
            and lay.dims.tp == 1 and job.spec.float8 is None)


def lever_degrees(job: Job) -> tuple[int, ...]:
    """The degrees above the job's own that `plan` offers: powers of two that split the
    experts whole (torchtitan's usual degrees)."""
    experts = expert_count(job.units)
    degrees = (2 ** i for i in range(1, experts.bit_length()))
    return tuple(d for d in degrees if d > ep_degree(job) and runs_at(job, d))
