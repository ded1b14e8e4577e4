"""Peak device memory per rank as the GPU count changes: the curve behind `plan --html`."""

from __future__ import annotations

from fsdpspec.catalog.accelerators import Accelerator
from fsdpspec.job.job import Job
from fsdpspec.plan.memory import device_memory

_MAX_POINTS = 48


def curve_counts(spec_count: int, fewest: int | None) -> list[int]:
    """GPU counts from 1 to twice the fewest that fit (twice the spec's count when none
    fit): every count when that is few, else ~48 spread evenly on a log scale, always
    with the spec's count and the fewest."""
    upper = 2 * max(fewest or spec_count, 1)
    if upper <= _MAX_POINTS:
        counts = set(range(1, upper + 1))
    else:
        steps = _MAX_POINTS - 1
        counts = {round(upper ** (i / steps)) for i in range(steps + 1)}
    return sorted(counts | {spec_count} | ({fewest} if fewest else set()))


def peak_by_gpu_count(job: Job, accelerator: Accelerator,
                      counts: list[int]) -> list[tuple[int, int]]:
    """(ranks, bytes one rank's device must hold at the step's peak) for each count."""
    return [(n, device_memory(job.at_world(n),
                              is_gpu=accelerator.is_gpu).total) for n in counts]
