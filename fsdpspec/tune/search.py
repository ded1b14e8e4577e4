"""Every combination of the open levers, kept when it fits (the memory walk, with the
spec's headroom), ranked by predicted tokens/s per device. Pure and torch-free: a
resolved job in, candidates out (each the job with its spec changed, `Job.with_spec`);
what validates is the caller's to check."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from fsdpspec.catalog.accelerators import Accelerator
from fsdpspec.job.job import Job
from fsdpspec.plan.compute import step_compute
from fsdpspec.plan.host import host_memory
from fsdpspec.plan.memory import GIB, device_memory
from fsdpspec.plan.planner import device_capacity
from fsdpspec.plan.steptime import StepTime, step_time
from fsdpspec.spec.v1 import JobSpec
from fsdpspec.tune.levers import LEVERS, Choice, value_of


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
    def overrides(self) -> list[str]:
        """The `--set KEY=VALUE` arguments that make the spec this candidate."""
        return [f"{key}={_yaml_scalar(value)}" for key, value in self.changes]


def _yaml_scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


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
    for key, value in choice.items():
        section, field = key.split(".")
        sections.setdefault(section, {})[field] = value
    return spec.model_copy(update={
        name: getattr(spec, name).model_copy(update=fields)
        for name, fields in sections.items()})


def evaluate(base: Job, device: Accelerator, choice: Choice) -> Candidate | None:
    """The candidate's memory and step; None when it does not fit."""
    spec, g = base.spec, base.geometry
    assert g is not None  # tune plans only jobs with a geometry
    candidate = with_choice(spec, choice)
    job = base.with_spec(candidate)
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


