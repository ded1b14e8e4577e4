"""`plan_job`: a resolved `Job` → device and host memory → verdict, fewest GPUs,
suggestions. Pure: a Job in, a Plan out; no torch."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

from fsdpspec.catalog.accelerators import CATALOG, Accelerator
from fsdpspec.job.geometry import Geometry
from fsdpspec.job.job import Job
from fsdpspec.job.parallel import ParallelDimsError
from fsdpspec.plan import expert_parallel
from fsdpspec.plan.host import HostMemory, host_memory
from fsdpspec.plan.memory import GIB, DeviceMemory, device_memory
from fsdpspec.plan.suggest import Suggestion, apply_override, suggestions
from fsdpspec.plan.tensor_parallel import lever_degrees
from fsdpspec.spec.v1 import JobSpec

if TYPE_CHECKING:
    from fsdpspec.plan.compute import Compute
    from fsdpspec.plan.fitting import Fit
    from fsdpspec.plan.steptime import StepTime

# The fewest-GPUs search stops here (in nodes): beyond it the answer is "none".
MAX_NODES = 4096


@dataclass(frozen=True)
class Plan:
    """Everything `fsdpspec plan` reports about one job."""

    job: Job
    accelerator: Accelerator
    capacity: int
    headroom_target: float
    device: DeviceMemory
    host: HostMemory
    host_capacity: int

    # The rest is computed when read: `validate` of a job that fits reads none of it (nor
    # imports the compute and step-time models, nor searches the GPU counts).

    @cached_property
    def min_gpus(self) -> int | None:
        """The fewest GPUs, in whole nodes of the spec's gpus_per_node."""
        return fewest_gpus(self.job, self.accelerator) if self.accelerator.is_gpu else None

    @cached_property
    def suggestions(self) -> tuple[Suggestion, ...]:
        """Changes that save device memory, most saved first (each re-validates the spec
        with one change)."""
        return tuple(suggestions(self.job, self.device, self.capacity, self.accelerator))

    @cached_property
    def compute(self) -> Compute:
        from fsdpspec.plan.compute import step_compute
        # Compute follows the parameters a token passes through (a Mixture of Experts:
        # its active ones); memory holds them all.
        return step_compute(self.job, self.geometry.active_params, self.accelerator,
                            self._dtype)

    @cached_property
    def step(self) -> StepTime | None:
        """None when the device's peak is unknown."""
        from fsdpspec.plan.steptime import step_time
        return step_time(self.job, self.compute, self.accelerator, self._dtype)

    @cached_property
    def precompute_seconds_per_pair(self) -> float | None:
        """``train.dpo.reference: precomputed``'s pass before step 1, per pair: its
        forward at the FLOP rate the predicted step computes at, on every rank. None for
        another reference, or where the step is unknown."""
        from fsdpspec.plan.compute import precompute_flops_per_pair
        train, step = self.spec.train, self.step
        if train.objective != "dpo" or train.dpo.reference != "precomputed" or not step \
                or not step.compute_seconds:
            return None
        rate = self.compute.flops / step.compute_seconds * self.spec.world_size
        return precompute_flops_per_pair(self.job, self.geometry.active_params) / rate

    @cached_property
    def min_single_gpus(self) -> int | None:
        """The fewest GPUs, counting single GPUs."""
        if not self.accelerator.is_gpu:
            return None
        return fewest_gpus(self.job, self.accelerator, per_node=1)

    @cached_property
    def fitting_levers(self) -> Fit | None:
        """The cheapest combination of memory levers that fits, when the job does not."""
        from fsdpspec.plan.fitting import cheapest_fit
        if self.device.total <= self.capacity * (1.0 - self.headroom_target):
            return None
        return cheapest_fit(self.job, self.device, self.capacity, self.accelerator)

    @cached_property
    def min_gpus_tp(self) -> tuple[int, int] | None:
        """(GPUs, degree): the fewest GPUs with a higher tensor-parallel degree, where
        that is fewer than at the spec's own (or the spec's never fits)."""
        if not self.accelerator.is_gpu:
            return None
        return fewest_gpus_tp(self.job, self.accelerator, self.min_gpus)

    @cached_property
    def min_gpus_ep(self) -> tuple[int, int] | None:
        """(GPUs, degree): the fewest GPUs with a higher expert-parallel degree, where
        that is fewer than at the spec's own (or the spec's never fits)."""
        if not self.accelerator.is_gpu:
            return None
        return fewest_gpus_ep(self.job, self.accelerator, self.min_gpus)

    @cached_property
    def references(self) -> dict[str, DeviceMemory]:
        """A DPO job's device memory under each reference it can take (`adapter` with a
        peft section, `precomputed` without streaming: FS561, FS562), the spec's own
        included; empty for any other objective."""
        train = self.spec.train
        if train.objective != "dpo":
            return {}
        choices = ["model", *(["adapter"] if self.spec.peft else []),
                   *([] if self.spec.data.streaming else ["precomputed"])]
        return {choice: self.device if choice == train.dpo.reference else device_memory(
                    self.job.with_spec(apply_override(
                        self.spec, f"train.dpo.reference={choice}")),
                    is_gpu=self.accelerator.is_gpu)
                for choice in choices}

    @property
    def _dtype(self) -> str:
        return self.spec.fsdp.mixed_precision.param_dtype

    @property
    def spec(self) -> JobSpec:
        return self.job.spec

    @property
    def geometry(self) -> Geometry:
        assert self.job.geometry is not None
        return self.job.geometry

    @property
    def parameters(self) -> int:
        return self.geometry.total_params

    @property
    def fits_device(self) -> bool:
        return self.device.total <= self.capacity

    @property
    def fits_host(self) -> bool:
        return self.host.peak <= self.host_capacity

    @property
    def fits(self) -> bool:
        return self.fits_device and self.fits_host

    @property
    def headroom(self) -> float:
        """Fraction of device memory left free at the peak (negative: over)."""
        return 1.0 - self.device.total / self.capacity if self.capacity > 0 else -1.0


def device_capacity(accelerator: Accelerator, spec: JobSpec, host: HostMemory) -> int:
    """Bytes one rank may use: the device's memory, or on a CPU its share of the host
    memory left after the node's host-side needs."""
    if accelerator.is_gpu:
        return int(accelerator.memory_gib * GIB)
    left = int(spec.resources.host_memory_gib * GIB) - host.peak
    return max(0, left // spec.resources.gpus_per_node)


def _fits_at(job: Job, accelerator: Accelerator, world: int, usable: float) -> bool:
    at = job.at_world(world)
    try:
        at.layout.dims.validate()
    except ParallelDimsError:
        return False  # an expert-parallel degree these ranks cannot hold
    device = device_memory(at, is_gpu=accelerator.is_gpu)
    capacity = device_capacity(accelerator, job.spec, host_memory(at, job.geometry.total_params))
    return device.total <= capacity * usable


def fewest_gpus(job: Job, accelerator: Accelerator, per_node: int | None = None) -> int | None:
    """The fewest ranks (a whole number of nodes of ``per_node``, by default the spec's
    gpus_per_node) at which the job fits with the spec's headroom. Memory per rank falls
    as ranks are added until, over very many shards, the padding of small tensors turns
    it back up; so the search doubles the node count until the job fits, then bisects
    below that point. Under expert parallelism it counts in blocks of nodes whose ranks
    the degree divides."""
    spec = job.spec
    per_node = per_node or spec.resources.gpus_per_node
    usable = 1.0 - spec.resources.memory_headroom
    block = math.lcm(per_node, job.layout.dims.ep) // per_node  # nodes
    limit = max(1, MAX_NODES // block)
    blocks = 1
    while not _fits_at(job, accelerator, blocks * block * per_node, usable):
        if blocks == limit:
            return None
        blocks = min(2 * blocks, limit)
    low, high = blocks // 2 + 1, blocks
    while low < high:
        mid = (low + high) // 2
        if _fits_at(job, accelerator, mid * block * per_node, usable):
            high = mid
        else:
            low = mid + 1
    return low * block * per_node


def fewest_gpus_tp(job: Job, accelerator: Accelerator,
                   fewest: int | None) -> tuple[int, int] | None:
    """(GPUs, degree) of the tensor-parallel degree above the spec's, within a node,
    that fits on the fewest GPUs, when fewer than ``fewest`` (the spec's own answer)."""
    best: tuple[int, int] | None = None
    for degree in lever_degrees(job):
        at = job.with_spec(apply_override(job.spec, f"parallelism.tensor_parallel={degree}"))
        found = fewest_gpus(at, accelerator)
        if found is not None and (fewest is None or found < fewest) and (
                best is None or found < best[0]):
            best = (found, degree)
    return best


def fewest_gpus_ep(job: Job, accelerator: Accelerator,
                   fewest: int | None) -> tuple[int, int] | None:
    """(GPUs, degree) of the expert-parallel degree above the spec's that fits on the
    fewest GPUs (the smaller degree of two that tie: fewer all-to-alls cross nodes),
    when fewer than ``fewest`` (the spec's own answer)."""
    best: tuple[int, int] | None = None
    for degree in expert_parallel.lever_degrees(job):
        at = job.with_spec(apply_override(job.spec, f"parallelism.expert_parallel={degree}"))
        found = fewest_gpus(at, accelerator)
        if found is not None and (fewest is None or found < fewest) and (
                best is None or found < best[0]):
            best = (found, degree)
    return best


def plan_job(job: Job, *, world_size: int | None = None,
             accelerator: str | Accelerator | None = None) -> Plan:
    """Plan the resolved ``job`` (it must have a geometry), optionally on another number
    of ranks or accelerator."""
    assert job.geometry is not None, "plan_job needs a job with a model geometry"
    spec, g = job.spec, job.geometry
    if world_size is not None:
        job = job.at_world(world_size)
    if accelerator is None:
        device = spec.device()
    else:
        device = CATALOG[accelerator] if isinstance(accelerator, str) else accelerator
    host = host_memory(job, g.total_params)
    return Plan(
        job=job, accelerator=device, capacity=device_capacity(device, spec, host),
        headroom_target=spec.resources.memory_headroom,
        device=device_memory(job, is_gpu=device.is_gpu), host=host,
        host_capacity=int(spec.resources.host_memory_gib * GIB),
    )
