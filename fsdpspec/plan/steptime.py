"""How long one optimizer step takes: the plan's FLOPs and collectives laid on a compute
stream and a communication stream, the way FSDP overlaps them.

Everything it times is read from the plan, never re-derived: the step's FLOPs with and
without recomputation (`compute.Compute`), each unit's collective bytes
(`compute.unit_traffic`), the activation bytes of a layer (`activations`), which layers
are checkpointed and when gradients synchronise (`fsdpspec.semantics`), and the device's
rates (`catalog.accelerators`, with `resources.performance`). A micro-batch runs:

- forward: the root's all-gather, then each unit's; a unit's gather is issued when the
  unit before it starts computing (FSDP's one-ahead prefetch), so it hides behind that
  unit's compute and only what does not fit is exposed;
- backward, in reverse: units freed after forward are gathered again one ahead; each
  unit's reduce-scatter (and all-reduce across replicas) follows its backward compute,
  overlapping the next unit's; the root's reduction ends the micro-batch;
- CPU offload copies each unit's sharded parameters to the device before its gather
  and its sharded gradients back after the reduction (on the same stream), and runs
  the optimizer step on the host.

The two streams share one link, so collectives run one after another. On a device that
cannot overlap (a CPU: gloo and the matmuls share the same cores) every collective
stops the compute. Compute is the FLOPs at the device's achievable rate (peak ×
efficiency) plus elementwise work as activation traffic at memory bandwidth; the
optimizer step is memory traffic. docs/tune.md has the sources and the measured error.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fsdpspec.catalog.accelerators import Accelerator
from fsdpspec.plan import activations as act
from fsdpspec.plan.compute import Compute, UnitTraffic, unit_traffic
from fsdpspec.plan.workload import Workload
from fsdpspec.semantics import MASTER_BYTES, mfu, recomputes_in_backward, synced_micro_batches

# Collective bandwidth actually reached, as a share of the link's (NCCL's bus bandwidth
# in nccl-tests on NVLink and InfiniBand; gloo's is what the CPU calibration measures).
LINK_EFFICIENCY = {True: 0.9, False: 1.0}
# Elementwise work moves each saved activation about three times per micro-batch: written
# in forward, read and its gradient written in backward.
ELEMENTWISE_PASSES = 3
# The optimizer step on the host (CPU offload): torch's foreach AdamW on one process's
# share of the host's memory bandwidth, GB/s.
HOST_OPTIMIZER_GBPS = 10.0
# Collectives make every rank wait for the slowest, so a step's compute is the largest
# of `world` draws: mean + spread·sqrt(2·ln world) (the expected maximum of normal
# draws, to first order). The spread is a prior (power-capped GPUs run at slightly
# different clocks), not fitted: docs/tune.md.
DEVICE_SPREAD = 0.01
BOUNDS = ("compute", "communication", "host transfers", "optimizer")


@dataclass(frozen=True)
class StepTime:
    """One rank's optimizer step, in seconds, and what it yields."""

    seconds: float
    compute_seconds: float
    exposed_communication_seconds: float
    exposed_host_seconds: float
    optimizer_seconds: float
    tokens_per_s: float  # per device
    mfu: float
    bound: str  # one of BOUNDS: the largest share of the step


@dataclass(frozen=True)
class _Block:
    """One unit copy as the streams see it in one micro-batch."""

    traffic: UnitTraffic
    forward: float
    backward: float
    regather: bool


@dataclass
class _Streams:
    """A compute clock and a communication clock; with ``overlap`` False every
    collective waits for the compute and the compute for it."""

    overlap: bool
    compute: float = 0.0
    comm: float = 0.0
    comm_busy: float = 0.0
    host_busy: float = 0.0

    def collective(self, issued: float, seconds: float, host: float = 0.0) -> float:
        """Run a collective issued at ``issued``; when it ends."""
        start = max(self.comm, issued if self.overlap else self.compute)
        self.comm = start + seconds + host
        self.comm_busy += seconds
        self.host_busy += host
        if not self.overlap:
            self.compute = self.comm
        return self.comm

    def run(self, ready: float, seconds: float) -> float:
        """Compute once its inputs are ready at ``ready``; when it started."""
        start = max(self.compute, ready)
        self.compute = start + seconds
        return start


def _blocks(w: Workload, c: Compute, device: Accelerator,
            rate: float) -> tuple[list[_Block], _Block]:
    """The units in forward order with their compute seconds per micro-batch: the step's
    FLOPs shared out by parameter count, recomputation on the checkpointed layers."""
    *layers, root = unit_traffic(w)
    copies = sum(t.count for t in layers)
    total = sum(t.shard_numel * t.count for t in layers) + root.shard_numel
    micro = w.accumulation_steps
    rate /= 1 + DEVICE_SPREAD * math.sqrt(2 * math.log(w.world_size))
    forward = c.model_flops / 3 / micro / rate
    forward += (ELEMENTWISE_PASSES * w.geometry.num_layers * act.layer_activation_bytes(
        w.geometry, w.compute_bytes, w.micro_batch_size, w.seq_len, w.attention)
        / (device.hbm_gbps * 1e9) / 3)
    recompute = (c.flops - c.model_flops) / micro / rate
    checkpointed = [_checkpointed(w, i, copies) for i in range(copies)]
    share = recompute / max(1, sum(checkpointed))
    blocks, index = [], 0
    for t in layers:
        f = forward * t.shard_numel / total
        for _ in range(t.count):
            regather = not w.keeps_params_gathered and not (
                w.fsdp_version == 2 and index == copies - 1)
            blocks.append(_Block(t, f, 2 * f + share * checkpointed[index], regather))
            index += 1
    f_root = forward * root.shard_numel / total
    return blocks, _Block(root, f_root, 2 * f_root, False)


def _checkpointed(w: Workload, index: int, copies: int) -> bool:
    """Whether unit copy ``index`` recomputes: its layer's checkpointing under the
    transformer policy, every unit alike under the others."""
    if w.activation_checkpointing == "none":
        return False
    if w.auto_wrap_policy == "transformer" and copies == w.geometry.num_layers:
        return recomputes_in_backward(w.activation_checkpointing, w.ac_every, index)
    return True


def _micro_batch(w: Workload, blocks: list[_Block], root: _Block, device: Accelerator,
                 *, synced: bool) -> _Streams:
    """Lay one micro-batch on the two streams."""
    s = _Streams(overlap=device.is_gpu)
    link = _link_gbps(w, device) * 1e9 * LINK_EFFICIENCY[device.is_gpu]
    host = device.host_gbps * 1e9 if (w.cpu_offload and device.is_gpu) else 0.0

    def gather(b: _Block, issued: float) -> float:
        h2d = MASTER_BYTES * b.traffic.shard_numel / host if host else 0.0
        return s.collective(issued, b.traffic.all_gather_bytes / link, h2d)

    def reduce(b: _Block, issued: float) -> None:
        if synced:
            d2h = MASTER_BYTES * b.traffic.shard_numel / host if host else 0.0
            network = (b.traffic.reduce_scatter_bytes / link
                       + b.traffic.all_reduce_bytes / (_replica_gbps(w, device) * 1e9
                                                       * LINK_EFFICIENCY[device.is_gpu]))
            s.collective(issued, network, d2h)

    ready = [0.0] * len(blocks)
    root_ready = gather(root, 0.0)
    if blocks:
        ready[0] = gather(blocks[0], 0.0)
    s.run(root_ready, 0.0)
    for i, b in enumerate(blocks):
        start = s.run(ready[i], b.forward)
        if i + 1 < len(blocks):
            ready[i + 1] = gather(blocks[i + 1], start)
    start = s.run(root_ready, root.forward + root.backward)
    last = len(blocks) - 1
    if blocks and blocks[last].regather:
        ready[last] = gather(blocks[last], start)
    for i in range(last, -1, -1):
        start = s.run(ready[i], blocks[i].backward)
        if i > 0 and blocks[i - 1].regather:
            ready[i - 1] = gather(blocks[i - 1], start)
        reduce(blocks[i], s.compute)
    reduce(root, s.compute)
    return s


def _link_gbps(w: Workload, device: Accelerator) -> float:
    """A shard group inside a node rings over the node's links. One spanning nodes runs
    NCCL's rings through every device of a node and across each NIC in parallel, so the
    data entering a node is split over its NICs and spread inside over NVLink: the
    slower of the node's link and its NICs together."""
    if w.shard_size <= w.gpus_per_node:
        return device.intra_node_gbps
    return min(device.intra_node_gbps, w.gpus_per_node * device.inter_node_gbps)


def _replica_gbps(w: Workload, device: Accelerator) -> float:
    """Replicas (hybrid strategies, NO_SHARD) all-reduce between the ranks holding the
    same shard: inside a node over its links, else one rank per node, over its own NIC."""
    return device.intra_node_gbps if w.world_size <= w.gpus_per_node else device.inter_node_gbps


def optimizer_seconds(w: Workload, device: Accelerator, shard_numel: int) -> float:
    """The optimizer step as memory traffic over one rank's fp32 shard: read and write the
    parameters and each state, read the gradients (and again for the norm when clipping)."""
    per_element = MASTER_BYTES * (2 + 2 + 2 * w.optimizer_states)
    rate = HOST_OPTIMIZER_GBPS if (w.cpu_offload and device.is_gpu) else device.hbm_gbps
    return per_element * shard_numel / (rate * 1e9)


def step_time(w: Workload, c: Compute, device: Accelerator, compute_dtype: str) -> StepTime | None:
    """The predicted step of one rank; None when the device's peak is unknown."""
    rate = device.achievable_tflops(compute_dtype) * 1e12
    if not rate:
        return None
    blocks, root = _blocks(w, c, device, rate)
    micro = w.accumulation_steps
    synced = synced_micro_batches(w.strategy, micro)
    runs = [(_micro_batch(w, blocks, root, device, synced=True), synced)]
    if synced < micro:
        runs.append((_micro_batch(w, blocks, root, device, synced=False), micro - synced))
    total = sum(max(s.compute, s.comm) * n for s, n in runs)
    computing = micro * (sum(b.forward + b.backward for b in blocks) + root.forward
                         + root.backward)
    exposed = total - computing
    host_share = sum(s.host_busy * n for s, n in runs)
    busy = sum((s.comm_busy + s.host_busy) * n for s, n in runs)
    exposed_host = exposed * host_share / busy if busy else 0.0
    shard = sum(b.traffic.shard_numel for b in blocks) + root.traffic.shard_numel
    optimizer = optimizer_seconds(w, device, shard)
    seconds = total + optimizer
    tokens = w.tokens * micro / seconds
    shares = dict(zip(BOUNDS, (computing, exposed - exposed_host, exposed_host, optimizer),
                      strict=True))
    return StepTime(
        seconds=seconds, compute_seconds=computing,
        exposed_communication_seconds=exposed - exposed_host,
        exposed_host_seconds=exposed_host, optimizer_seconds=optimizer,
        tokens_per_s=tokens,
        mfu=mfu(tokens, c.model_flops / (w.tokens * micro), device.peak_tflops(compute_dtype)),
        bound=max(shares, key=shares.__getitem__),
    )
