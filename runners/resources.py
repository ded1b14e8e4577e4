"""What a job asks a scheduler for on each node, from the spec: one place for Slurm and
Kubernetes."""

from __future__ import annotations

from fsdpspec.spec.v1 import JobSpec

CPUS_PER_GPU = 4


def node_cpus(spec: JobSpec) -> int:
    """resources.cpus_per_node, else 4 per GPU (data loading, NCCL's threads and the
    launcher), or one per process on CPU."""
    if spec.resources.cpus_per_node is not None:
        return spec.resources.cpus_per_node
    per_process = CPUS_PER_GPU if spec.device().is_gpu else 1
    return per_process * spec.resources.gpus_per_node


def node_memory_mib(spec: JobSpec) -> int:
    """resources.host_memory_gib in whole MiB (rounded down: never more than the node
    was said to have)."""
    return int(spec.resources.host_memory_gib * 1024)
