"""The budget question: how long a number of tokens takes to train, in hours and
GPU-hours (and money, given a price per GPU-hour), each with the step-time model's error
band; and where adding GPUs stops paying. Pure and torch-free: the step-time model's
prediction at each GPU count (`steptime.step_time`), nothing re-derived."""

from __future__ import annotations

from dataclasses import dataclass

from fsdpspec.catalog.accelerators import Accelerator
from fsdpspec.job.batch import sequences_per_example
from fsdpspec.job.job import Job
from fsdpspec.plan.compute import step_compute
from fsdpspec.plan.steptime import STEP_TIME_BAND, StepTime, step_time
from fsdpspec.spec.v1 import JobSpec

# Scaling stops paying past the GPU count at which tokens/s per GPU has fallen by more
# than this share of its rate at the fewest GPUs that hold the job.
SCALING_LOSS = 0.10
# The scaling scan doubles the node count up to this many nodes.
SCALING_SCAN_NODES = 4096


def spec_tokens(spec: JobSpec) -> int:
    """The tokens the spec trains: train.max_steps global batches of data.seq_len (a
    preference pair's two sequences each)."""
    return (spec.train.max_steps * spec.data.global_batch_size * sequences_per_example(spec)
            * spec.data.seq_len)


def step_at(job: Job, device: Accelerator, world: int) -> StepTime | None:
    """The predicted step of ``job`` on ``world`` ranks of ``device``."""
    assert job.geometry is not None  # only jobs with a geometry are planned
    at = job.at_world(world)
    dtype = job.spec.fsdp.mixed_precision.param_dtype
    return step_time(at, step_compute(at, job.geometry.active_params, device, dtype),
                     device, dtype)


@dataclass(frozen=True)
class Budget:
    """``tokens`` trained on ``gpus`` ranks at the predicted ``tokens_per_s`` (all ranks)."""

    tokens: float
    tokens_from: str  # "--tokens" or "train.max_steps × global batch"
    gpus: int
    tokens_per_s: float
    price_per_gpu_hour: float | None = None

    @property
    def hours(self) -> float:
        return self.tokens / self.tokens_per_s / 3600

    @property
    def gpu_hours(self) -> float:
        return self.hours * self.gpus

    @property
    def cost(self) -> float | None:
        if self.price_per_gpu_hour is None:
            return None
        return self.gpu_hours * self.price_per_gpu_hour

    @staticmethod
    def band(value: float) -> tuple[float, float]:
        """A time (or what scales with it) at the model's band: tokens/s within
        ±STEP_TIME_BAND of the prediction."""
        return value / (1 + STEP_TIME_BAND), value / (1 - STEP_TIME_BAND)


def budget(step: StepTime, gpus: int, tokens: float, tokens_from: str,
           price_per_gpu_hour: float | None = None) -> Budget:
    return Budget(tokens, tokens_from, gpus, step.tokens_per_s * gpus, price_per_gpu_hour)


@dataclass(frozen=True)
class Scaling:
    """Tokens/s per GPU from the fewest GPUs that hold the job (``start``) up: the largest
    count still within SCALING_LOSS of ``start``'s rate (``holds_to``), and the next
    whole-node count past it (None: held to the end of the scan)."""

    start: int
    start_rate: float
    holds_to: int
    holds_rate: float
    past: tuple[int, float] | None


def scaling(job: Job, device: Accelerator, start: int) -> Scaling | None:
    """Where scaling stops paying, in whole nodes of the spec's gpus_per_node: doubling
    the nodes until the rate per GPU falls below (1 - SCALING_LOSS) of ``start``'s, then
    bisecting (the rate falls as GPUs are added). The micro-batch per GPU is kept, and
    accumulation falls as at `Job.at_world` (at least one micro-batch a step)."""
    per_node = job.spec.resources.gpus_per_node
    first = step_at(job, device, start)
    if first is None:
        return None
    floor = (1 - SCALING_LOSS) * first.tokens_per_s

    def rate(nodes: int) -> float:
        found = step_at(job, device, nodes * per_node)
        assert found is not None  # the device's peak is known (first was timed)
        return found.tokens_per_s

    good = max(1, start // per_node)
    bad = None
    while bad is None and good < SCALING_SCAN_NODES:
        nodes = min(2 * good, SCALING_SCAN_NODES)
        if rate(nodes) < floor:
            bad = nodes
        else:
            good = nodes
    if bad is None:
        return Scaling(start, first.tokens_per_s, good * per_node, rate(good), None)
    while bad - good > 1:
        mid = (good + bad) // 2
        good, bad = (mid, bad) if rate(mid) >= floor else (good, mid)
    holds = first.tokens_per_s if good * per_node == start else rate(good)
    return Scaling(start, first.tokens_per_s, good * per_node, holds,
                   (bad * per_node, rate(bad)))
