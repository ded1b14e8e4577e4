"""How big one checkpoint is and how long a scheduler must wait for it.

A preempted or time-limited job is warned, finishes its step, saves and exits; the
scheduler's grace period (Slurm's --signal lead time, Kubernetes'
terminationGracePeriodSeconds) must cover that save. The save time is planned from the
checkpoint's bytes over a documented write bandwidth, not measured.
"""

from __future__ import annotations

import math

from fsdpspec.plan.geometry import GeometryError, geometry_from_config
from fsdpspec.plan.workload import workload
from fsdpspec.semantics import MASTER_BYTES
from fsdpspec.spec.v1 import JobSpec

# Write bandwidth each node is assumed to get from shared storage (docs/clusters.md).
NODE_WRITE_BYTES_PER_S = 1 << 30
# Lead time never shorter than this: the step in flight and the processes' exit.
GRACE_FLOOR_S = 60


def checkpoint_bytes(spec: JobSpec, model_config: dict | None) -> int | None:
    """Bytes of one sharded checkpoint, summed over ranks: fp32 parameters plus the
    optimizer's fp32 states (the planner's counts). None when the model has no geometry."""
    if model_config is None:
        return None
    try:
        geometry = geometry_from_config(model_config)
    except GeometryError:
        return None
    states = workload(spec, geometry).optimizer_states
    return geometry.total_params * MASTER_BYTES * (1 + states)


def stop_grace_seconds(spec: JobSpec, model_config: dict | None) -> int:
    """Seconds between the stop signal and the kill: twice the planned write of each
    node's share of a checkpoint (the step in flight, then the save), at least the floor."""
    total = checkpoint_bytes(spec, model_config)
    if total is None:
        return GRACE_FLOOR_S
    write_s = total / spec.resources.nodes / NODE_WRITE_BYTES_PER_S
    return max(GRACE_FLOOR_S, math.ceil(2 * write_s))
