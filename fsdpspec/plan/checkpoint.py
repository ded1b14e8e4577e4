"""How big one checkpoint is and how long a scheduler must wait for it.

A preempted or time-limited job is warned, finishes its step, saves and exits; the
scheduler's grace period (Slurm's --signal lead time, Kubernetes'
terminationGracePeriodSeconds) must cover that save. The save time is planned from the
checkpoint's bytes over a documented write bandwidth, not measured.
"""

from __future__ import annotations

import math

from fsdpspec.job.job import Job
from fsdpspec.semantics import MASTER_BYTES

# Write bandwidth each node is assumed to get from shared storage (docs/clusters.md).
NODE_WRITE_BYTES_PER_S = 1 << 30
# Lead time never shorter than this: the step in flight and the processes' exit.
GRACE_FLOOR_S = 60


def checkpoint_bytes(job: Job) -> int | None:
    """Bytes of one sharded checkpoint, summed over ranks: fp32 parameters plus the
    optimizer's fp32 states (the planner's counts). None when the model has no geometry."""
    if job.geometry is None:
        return None
    return job.geometry.total_params * MASTER_BYTES * (1 + job.optimizer_states)


def stop_grace_seconds(job: Job) -> int:
    """Seconds between the stop signal and the kill: twice the planned write of each
    node's share of a checkpoint (the step in flight, then the save), at least the floor."""
    total = checkpoint_bytes(job)
    if total is None:
        return GRACE_FLOOR_S
    write_s = total / job.spec.resources.nodes / NODE_WRITE_BYTES_PER_S
    return max(GRACE_FLOOR_S, math.ceil(2 * write_s))
