"""How long one optimizer step takes: the plan's FLOPs and collectives laid on a compute
stream and a communication stream, the way FSDP overlaps them.

Everything it times is read from the plan and the resolved `Job`, never re-derived: the
step's FLOPs with and without recomputation (`compute.Compute`), each unit's collective
bytes (`compute.unit_traffic`), the activation bytes of a layer (`memory.layer_bytes`),
which layers are checkpointed (`fsdpspec.semantics`), accumulation and when gradients
synchronise (`job.layout`), and the device's rates (`catalog.accelerators`, with
`resources.performance`). A micro-batch runs:

- a DPO reference's forward first (a frozen copy, or the policy with its adapters off:
  `_reference_forward`), gathering each unit once more;
- forward: the root's all-gather, then each unit's; a unit's gather is issued when the
  unit before it starts computing (FSDP's one-ahead prefetch), so it hides behind that
  unit's compute and only what does not fit is exposed;
- backward, in reverse: units freed after forward are gathered again one ahead; each
  unit's reduce-scatter (and all-reduce across replicas) follows its backward compute,
  overlapping the next unit's; the root's reduction ends the micro-batch;
- tensor parallelism (`fsdpspec.plan.tensor_parallel`) all-gathers and reduce-scatters
  each layer's activations inside its forward and backward (and a recomputation), on
  the compute stream's critical path at the group's link: all exposed;
- expert parallelism (`fsdpspec.plan.expert_parallel`) dispatches each MoE layer's
  tokens and combines them by all-to-all in forward and backward (and a recomputation
  but under op-level checkpointing), on the critical path: all exposed, assuming a
  perfectly balanced router;
- CPU offload copies each unit's sharded parameters to the device before its gather
  and its sharded gradients back after the reduction (on the same stream), and runs
  the optimizer step on the host.

The two streams share one link, so collectives run one after another. On a device that
cannot overlap (a CPU: gloo and the matmuls share the same cores) every collective
stops the compute. Compute is the FLOPs at the device's achievable rate (peak ×
efficiency; float8's converted matmuls at the FP8 peak, `fsdpspec.plan.float8`) plus
elementwise work (and float8's casts) as activation traffic at memory bandwidth, plus the
framework's fixed time per layer and micro-batch (``layer_overhead_us``: a third in
forward, two in backward, a third again in a recomputing layer); every collective call
pays ``collective_latency_us`` on top of its bytes; context parallelism's ring attention
exchanges keys and values inside each layer's attention, which waits for them, so its
bytes (`compute.ring_micro_batch_bytes`) are exposed time, and merges each ring step's
partial output and gradients in fp32 outside the attention kernels (`ring.ring_serial_bytes`,
memory traffic on the compute stream); the optimizer step is memory traffic
at ``optimizer_gbps``. The fixed costs are 0 until `tune --measure` calibrates them.
docs/tune.md has the sources and the measured error.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from fsdpspec.catalog.accelerators import Accelerator
from fsdpspec.job.job import Job
from fsdpspec.plan import expert_parallel as ep
from fsdpspec.plan import tensor_parallel as tp
from fsdpspec.plan.compute import (
    Compute,
    UnitTraffic,
    replica_link_gbps,
    shard_link_gbps,
    unit_traffic,
)
from fsdpspec.plan.float8 import cast_traffic_bytes, matmul_rate
from fsdpspec.plan.memory import layer_bytes, reference_copy, reference_forward
from fsdpspec.plan.ring import ring_serial_bytes
from fsdpspec.semantics import (
    MASTER_BYTES,
    mfu,
)

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
# The model's stated error band on tokens/s: every published run it is judged on lies
# within it (benchmarks/step_time.py: the bf16 rows within 2.2 %, torchtitan's float8 row
# -8.6 %), and so did every
# candidate `tune --measure` trained after calibrating the machine (docs/tune.md).
STEP_TIME_BAND = 0.15
# Past this many unit copies a micro-batch is timed by extrapolation (_micro_batch_seconds).
SIMULATED_COPIES = 96
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


@dataclass(frozen=True)
class _Units:
    """Per-copy compute seconds of each unit kind in one micro-batch, and the root."""

    layers: tuple[tuple[UnitTraffic, float], ...]  # (traffic, forward seconds of a copy)
    recompute: float  # backward's extra seconds in a copy that recomputes
    root: _Block
    copies: int
    # Tensor-parallel collectives (blocking): a copy's forward pass (its backward, and a
    # recomputation, each as many), and the root's each way.
    tp_copy: float = 0.0
    tp_root: float = 0.0
    # Expert parallelism's all-to-alls in a copy's forward pass (as many in its backward,
    # and in a recomputation but under op-level checkpointing).
    ep_copy: float = 0.0

    @property
    def shard_numel(self) -> int:
        return sum(t.shard_numel * t.count for t, _ in self.layers) + \
            self.root.traffic.shard_numel


def _units(job: Job, c: Compute, device: Accelerator, rate: float) -> _Units:
    """The units with their compute seconds per micro-batch: the step's FLOPs shared out
    by parameter count, recomputation on the copies that recompute."""
    assert job.geometry is not None  # the planner plans only jobs with a geometry
    *layers, root = unit_traffic(job)
    copies = sum(t.count for t in layers)
    total = sum(t.shard_numel * t.count for t in layers) + root.shard_numel
    micro = job.batch.accumulation
    rate /= 1 + DEVICE_SPREAD * math.sqrt(2 * math.log(job.layout.world_size))
    forward = c.model_flops / 3 / micro / rate
    forward += ((ELEMENTWISE_PASSES * job.geometry.num_layers * layer_bytes(job)
                 + cast_traffic_bytes(job)) / (device.hbm_gbps * 1e9) / 3)
    # The framework's fixed time (a third of it in forward, as the FLOPs), per copy.
    fixed = device.layer_overhead_us * 1e-6 * job.geometry.num_layers / max(copies, 1) / 3
    # FLOPs beyond the model's and a reference forward's (timed as one more forward of
    # each unit, `_reference_forward`): the recomputing copies', else (no checkpointing)
    # the root's, so that every FLOP of the plan is timed.
    extra = (c.flops - c.model_flops - c.reference_flops) / micro / rate
    recomputing = _recomputing_copies(job, copies)
    f_root = forward * root.shard_numel / total
    root_backward = 2 * f_root + (0.0 if recomputing else extra)
    one = tp.micro_batch_seconds(job, device) / tp.collectives_per_micro_batch(job) \
        if tp.tp_degree(job) > 1 else 0.0
    layer_pass = one * tp.FORWARD_COLLECTIVES * job.geometry.num_layers / max(copies, 1)
    a2a = ep.micro_batch_seconds(job, device)
    ep_pass = (a2a / ep.all_to_alls_per_micro_batch(job) * ep.FORWARD_ALL_TO_ALLS
               * ep.moe_layers(job) / max(copies, 1)) if a2a else 0.0
    return _Units(tuple((t, forward * t.shard_numel / total + fixed) for t in layers),
                  extra / recomputing + fixed if recomputing else 0.0,
                  _Block(root, f_root, root_backward, False), copies,
                  tp_copy=layer_pass, tp_root=one * tp.ROOT_COLLECTIVES, ep_copy=ep_pass)


def _blocks(job: Job, units: _Units, counts: list[int]) -> list[_Block]:
    """The unit copies in forward order (``counts`` of each kind)."""
    blocks, index, last = [], 0, sum(counts) - 1
    for (t, f), count in zip(units.layers, counts, strict=True):
        for _ in range(count):
            regather = job.layout.reshards_after_forward and not (
                job.layout.fsdp_version == 2 and index == last)
            recomputed_a2a = units.ep_copy if job.units.ac_mode != "op" else 0.0
            again = (units.recompute + units.tp_copy + recomputed_a2a
                     if _checkpointed(job, index, units.copies) else 0.0)
            blocking = units.tp_copy + units.ep_copy
            blocks.append(_Block(t, f + blocking, 2 * f + blocking + again, regather))
            index += 1
    return blocks


def _one_unit_per_layer(job: Job, copies: int) -> bool:
    """Whether the unit copies are the decoder layers, in order (the transformer policy)."""
    assert job.units is not None
    return job.spec.fsdp.auto_wrap_policy == "transformer" and copies == job.units.num_layers


def _checkpointed(job: Job, index: int, copies: int) -> bool:
    """Whether unit copy ``index`` recomputes: its layer's checkpointing under the
    transformer policy, every unit alike under the others."""
    units = job.units
    if units.ac_mode == "none":
        return False
    if _one_unit_per_layer(job, copies):
        return units.is_checkpointed(index)
    return True


def _recomputing_copies(job: Job, copies: int) -> int:
    """How many unit copies recompute in backward (closed form, any depth)."""
    units = job.units
    if units.ac_mode == "none":
        return 0
    if _one_unit_per_layer(job, copies):
        return units.checkpointed_count(copies)
    return copies


def _micro_batch(job: Job, blocks: list[_Block], units: _Units, device: Accelerator,
                 *, synced: bool) -> _Streams:
    """Lay one micro-batch on the two streams."""
    s = _Streams(overlap=device.is_gpu)
    link = shard_link_gbps(job, device) * 1e9 * LINK_EFFICIENCY[device.is_gpu]
    latency = device.collective_latency_us * 1e-6
    host = device.host_gbps * 1e9 if (job.spec.fsdp.cpu_offload and device.is_gpu) else 0.0

    def gather(b: _Block, issued: float) -> float:
        h2d = MASTER_BYTES * b.traffic.shard_numel / host if host else 0.0
        return s.collective(issued, latency + b.traffic.all_gather_bytes / link, h2d)

    def reduce(b: _Block, issued: float) -> None:
        if synced:
            d2h = MASTER_BYTES * b.traffic.shard_numel / host if host else 0.0
            network = (latency + b.traffic.reduce_scatter_bytes / link
                       + b.traffic.all_reduce_bytes / (replica_link_gbps(job, device) * 1e9
                                                       * LINK_EFFICIENCY[device.is_gpu]))
            if b.traffic.all_reduce_bytes:
                network += latency
            s.collective(issued, network, d2h)

    root = units.root
    ready = [0.0] * len(blocks)
    root_ready = (_reference_forward(job, s, blocks, root, gather) if reference_forward(job)
                  else gather(root, 0.0))
    if blocks:
        ready[0] = gather(blocks[0], 0.0)
    s.run(root_ready, 0.0)
    for i, b in enumerate(blocks):
        start = s.run(ready[i], b.forward)
        if i + 1 < len(blocks):
            ready[i + 1] = gather(blocks[i + 1], start)
    start = s.run(root_ready, root.forward + root.backward + 2 * units.tp_root)
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


def _reference_forward(job: Job, s: _Streams, blocks: list[_Block], root: _Block,
                       gather: Callable[[_Block, float], float]) -> float:
    """DPO's reference forward, before the policy's: each unit gathered one ahead and run
    forward (no backward); when the policy's root is ready. A frozen copy gathers its own
    root and frees it, so the policy's is gathered after; the adapter's reference is the
    policy, whose root stays gathered for its own forward."""
    ready = gather(root, 0.0)
    following = gather(blocks[0], 0.0) if blocks else 0.0
    s.run(ready, 0.0)
    for i, b in enumerate(blocks):
        start = s.run(following, b.forward)
        if i + 1 < len(blocks):
            following = gather(blocks[i + 1], start)
    s.run(ready, root.forward)
    return gather(root, s.compute) if reference_copy(job) else ready


def optimizer_bytes_per_element(states: int) -> int:
    """The optimizer step's memory traffic per fp32 element: read and write the parameter
    and each state, read the gradient (and again for the norm when clipping). The
    calibration times a real optimizer step in the same currency."""
    return MASTER_BYTES * (2 + 2 + 2 * states)


def optimizer_seconds(job: Job, device: Accelerator, shard_numel: int) -> float:
    """The optimizer step as memory traffic over one rank's fp32 shard, at the measured
    optimizer rate where there is one, else at memory bandwidth."""
    rate = HOST_OPTIMIZER_GBPS if (job.spec.fsdp.cpu_offload and device.is_gpu) \
        else device.optimizer_gbps or device.hbm_gbps
    return optimizer_bytes_per_element(job.optimizer_states) * shard_numel / (rate * 1e9)


def _micro_batch_seconds(job: Job, units: _Units, device: Accelerator,
                         synced: bool) -> tuple[float, float, float]:
    """(seconds, collective busy seconds, host busy seconds) of one micro-batch. Past
    SIMULATED_COPIES unit copies the streams are laid for two shallower models and the
    depth extrapolated: identical layers reach a steady state, so the time grows linearly
    with them (a 2**31-layer model is timed in constant time)."""
    counts = [t.count for t, _ in units.layers]

    def laid(scaled: list[int]) -> tuple[int, float, float, float]:
        s = _micro_batch(job, _blocks(job, units, scaled), units, device, synced=synced)
        return sum(scaled), max(s.compute, s.comm), s.comm_busy, s.host_busy

    if units.copies <= SIMULATED_COPIES:
        return laid(counts)[1:]
    (n1, *short), (n2, *deep) = (
        laid([max(1, round(c * target / units.copies)) for c in counts])
        for target in (SIMULATED_COPIES // 2, SIMULATED_COPIES))
    k = (units.copies - n1) / (n2 - n1)
    return tuple(x + k * (y - x) for x, y in zip(short, deep, strict=True))  # type: ignore[return-value]


def ring_serial_seconds(job: Job, device: Accelerator) -> float:
    """Ring attention's merges and gradient accumulation of one micro-batch, at memory
    bandwidth on the compute stream: every layer's forward and backward, and the forward
    again in each layer that recomputes its attention (not under op-level checkpointing,
    which saves the attention output)."""
    if job.layout.dims.cp == 1:
        return 0.0
    forward, backward = ring_serial_bytes(job)
    layers, units = job.geometry.num_layers, job.units
    recomputed = 0 if units.ac_mode == "op" else units.checkpointed_count(layers)
    return ((layers + recomputed) * forward + layers * backward) / (device.hbm_gbps * 1e9)


def step_time(job: Job, c: Compute, device: Accelerator, compute_dtype: str) -> StepTime | None:
    """The predicted step of one rank; None when the device's peak is unknown."""
    per_token = c.model_flops / (job.batch.tokens * job.batch.accumulation)
    rate = matmul_rate(job, device, compute_dtype, per_token)
    if not rate:
        return None
    units = _units(job, c, device, rate)
    micro, synced = job.batch.accumulation, job.layout.synced_micro_batches
    runs = [(_micro_batch_seconds(job, units, device, True), synced)]
    if synced < micro:
        runs.append((_micro_batch_seconds(job, units, device, False), micro - synced))
    # Context parallelism's ring waits inside each layer's attention (exposed), and merges
    # its steps outside the kernels (compute-stream memory traffic).
    merges = micro * ring_serial_seconds(job, device)
    total = sum(r[0] * n for r, n in runs) + micro * c.ring_seconds / \
        LINK_EFFICIENCY[device.is_gpu] + merges
    # (A DPO reference runs one more forward of each unit and the root.)
    forwards = 4 if reference_forward(job) else 3
    computing = micro * (sum(forwards * f * t.count for t, f in units.layers)
                         + units.recompute * _recomputing_copies(job, units.copies)
                         + units.root.forward * (forwards - 2) + units.root.backward) + merges
    exposed = max(0.0, total - computing)
    host_share = sum(r[2] * n for r, n in runs)
    busy = sum((r[1] + r[2]) * n for r, n in runs)
    exposed_host = exposed * host_share / busy if busy else 0.0
    optimizer = optimizer_seconds(job, device, units.shard_numel)
    seconds = total + optimizer
    # The ranks of a tensor-parallel group share their micro-batches' tokens.
    per_rank = job.batch.tokens * micro / tp.tp_degree(job)
    tokens = per_rank / seconds
    shares = dict(zip(BOUNDS, (computing, exposed - exposed_host, exposed_host, optimizer),
                      strict=True))
    return StepTime(
        seconds=seconds, compute_seconds=computing,
        exposed_communication_seconds=exposed - exposed_host,
        exposed_host_seconds=exposed_host, optimizer_seconds=optimizer,
        tokens_per_s=tokens,
        mfu=mfu(tokens, c.model_flops / per_rank,
                device.peak_tflops(compute_dtype)),
        bound=max(shares, key=shares.__getitem__),
    )
