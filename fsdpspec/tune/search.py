"""Every combination of the open levers, kept when it fits (the memory walk, with the
spec's headroom), ranked by predicted tokens/s per device; or, given a GPU budget, at
every GPU count up to it, ranked by the time a token budget takes. Pure and torch-free: a
resolved job in, candidates out (each the job with its spec changed, `Job.with_spec`);
what validates is the caller's to check."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from fsdpspec.catalog.accelerators import Accelerator
from fsdpspec.job.job import Job
from fsdpspec.plan import expert_parallel
from fsdpspec.plan.budget import SCALING_LOSS
from fsdpspec.plan.compute import step_compute
from fsdpspec.plan.host import host_memory
from fsdpspec.plan.memory import GIB, device_memory
from fsdpspec.plan.planner import device_capacity
from fsdpspec.plan.steptime import StepTime, step_time
from fsdpspec.plan.tensor_parallel import runs_at, tp_degree
from fsdpspec.spec.v1 import Float8, JobSpec
from fsdpspec.tune.search_space import FLOAT8, LEVERS, Choice, lever_of, value_of


@dataclass(frozen=True)
class Candidate:
    """One configuration: what it changes, and its predicted memory and step."""

    changes: tuple[tuple[str, Any], ...]  # (key, value) that differ from the spec
    spec: JobSpec
    device_bytes: int
    capacity: int
    host_bytes: int
    step: StepTime

    @property
    def gpus(self) -> int:
        return self.spec.world_size

    def hours(self, tokens: float) -> float:
        """Hours to train ``tokens`` on the candidate's GPUs."""
        return tokens / (self.step.tokens_per_s * self.gpus) / 3600

    @property
    def overrides(self) -> list[str]:
        """The `--set KEY=VALUE` arguments that make the spec this candidate."""
        return [lever_of(key).setting(value) for key, value in self.changes]


def choices(spec: JobSpec, open_keys: set[str]) -> Iterator[Choice]:
    """Every candidate's choice of the open levers (a lever without values for a
    candidate keeps the spec's)."""

    def extend(index: int, choice: Choice) -> Iterator[Choice]:
        if index == len(LEVERS):
            yield dict(choice)
            return
        lever = LEVERS[index]
        values = lever.values(spec, choice) if lever.key in open_keys else ()
        if not values:
            yield from extend(index + 1, choice)
            return
        for value in values:
            choice[lever.key] = value
            yield from extend(index + 1, choice)
        del choice[lever.key]

    yield from extend(0, {})


def with_choice(spec: JobSpec, choice: Choice) -> JobSpec:
    """``spec`` with each dotted key set (values from the lever table are valid)."""
    sections: dict[str, dict[str, Any]] = {}
    whole: dict[str, Any] = {}
    for key, value in choice.items():
        if key == FLOAT8:  # the section itself: off, or on with a recipe
            whole[key] = None if value is None else (spec.float8 or Float8()).model_copy(
                update={"recipe": value})
            continue
        section, field = key.split(".")
        sections.setdefault(section, {})[field] = value
    return spec.model_copy(update={
        **{name: getattr(spec, name).model_copy(update=fields)
           for name, fields in sections.items()}, **whole})


def evaluate(base: Job, device: Accelerator, choice: Choice) -> Candidate | None:
    """The candidate's memory and step; None when it does not fit, or when the engine
    cannot split the model at its tensor- or expert-parallel degree."""
    spec, g = base.spec, base.geometry
    assert g is not None  # tune plans only jobs with a geometry
    candidate = with_choice(spec, choice)
    job = base.with_spec(candidate)
    if not (runs_at(job, tp_degree(job))
            and expert_parallel.runs_at(job, expert_parallel.ep_degree(job))):
        return None
    memory = device_memory(job, is_gpu=device.is_gpu)
    host = host_memory(job, g.total_params)
    capacity = device_capacity(device, candidate, host)
    usable = 1.0 - candidate.resources.memory_headroom
    host_capacity = candidate.resources.host_memory_gib * GIB
    if memory.total > capacity * usable or host.peak > host_capacity:
        return None
    dtype = candidate.fsdp.mixed_precision.param_dtype
    step = step_time(job, step_compute(job, g.active_params, device, dtype), device, dtype)
    if step is None:
        return None
    changes = tuple((k, v) for k, v in choice.items() if v != value_of(spec, {}, k))
    return Candidate(changes, candidate, memory.total, capacity, host.peak, step)


def search(job: Job, open_keys: set[str]) -> tuple[list[Candidate], int]:
    """The candidates of ``job`` that fit, fastest first, and how many were tried."""
    device = job.spec.device()
    tried, kept = 0, []
    for choice in choices(job.spec, open_keys):
        tried += 1
        found = evaluate(job, device, choice)
        if found is not None:
            kept.append(found)
    kept.sort(key=lambda c: (-c.step.tokens_per_s, len(c.changes)))
    return kept, tried




# The keys a GPU count sets: the resources, and the global batch where the ranks need a
# larger one (every rank at least one micro-batch a step).
COUNT_KEYS = ("resources.nodes", "resources.gpus_per_node", "data.global_batch_size")


def gpu_counts(per_node: int, max_gpus: int) -> list[int]:
    """Whole nodes of ``per_node`` GPUs, doubling up to ``max_gpus`` (and its whole nodes
    themselves); under one node, 1, 2, 4 … GPUs of one node up to ``max_gpus``."""
    step = per_node if max_gpus >= per_node else 1
    counts, n = {max_gpus // step * step}, step
    while n <= max_gpus:
        counts.add(n)
        n *= 2
    return sorted(counts)


def count_choice(spec: JobSpec, world: int) -> Choice:
    """The spec on ``world`` GPUs: whole nodes of its gpus_per_node (or one node of
    ``world``), the global batch kept where it gives every rank a whole number of
    micro-batches, else the batch the ranks make at that accumulation (`Job.at_world`'s)."""
    per_node = spec.resources.gpus_per_node
    nodes, per = (world // per_node, per_node) if world >= per_node else (1, world)
    micro = spec.data.micro_batch_size
    accumulation = max(1, spec.data.global_batch_size // (micro * world))
    return {"resources.nodes": nodes, "resources.gpus_per_node": per,
            "data.global_batch_size": micro * world * accumulation}


def search_counts(job: Job, open_keys: set[str], counts: list[int]
                  ) -> tuple[list[Candidate], int, int]:
    """The candidates at each GPU count that fit and still scale, fastest to train
    first (most tokens/s over all GPUs); how many were tried; how many were dropped
    because their tokens/s per GPU fell more than SCALING_LOSS below the same levers'
    at the fewest GPUs that fit them (past where scaling pays)."""
    kept, tried = [], 0
    for world in counts:
        choice = count_choice(job.spec, world)
        spec = with_choice(job.spec, choice)
        at = job.at_world(world).with_spec(spec)
        found, n = search(at, open_keys)
        tried += n
        count = tuple((k, v) for k, v in choice.items() if v != value_of(job.spec, {}, k))
        kept += [replace(c, changes=count + c.changes) for c in found]
    first: dict[tuple, float] = {}
    scaling, past = [], 0
    for c in sorted(kept, key=lambda c: c.gpus):
        levers = tuple(kv for kv in c.changes if kv[0] not in COUNT_KEYS)
        floor = (1 - SCALING_LOSS) * first.setdefault(levers, c.step.tokens_per_s)
        if c.step.tokens_per_s < floor:
            past += 1
        else:
            scaling.append(c)
    scaling.sort(key=lambda c: (-c.step.tokens_per_s * c.gpus, c.gpus, len(c.changes)))
    return scaling, tried, past
