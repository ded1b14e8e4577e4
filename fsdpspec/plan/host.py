"""Host memory of one node: process overhead, offloaded state, weight loading, the rank-0
gather of full-state-dict checkpoints and the final export's streaming conversion."""

from __future__ import annotations

from dataclasses import dataclass

from fsdpspec.job.job import Job
from fsdpspec.plan.lora import adapted_host_terms
from fsdpspec.plan.memory import GIB, saved_activation_bytes
from fsdpspec.plan.memory_levers import offloaded_activation_bytes
from fsdpspec.plan.unit_shards import sharding
from fsdpspec.semantics import MASTER_BYTES

# Resident memory of one training process besides its tensors: the interpreter, torch,
# transformers and the CUDA runtime's host side.
PROCESS_OVERHEAD_BYTES = 2 * GIB
# Checkpoint files are assumed bf16 (how published weights ship).
WEIGHT_FILE_BYTES = 2


@dataclass(frozen=True)
class HostMemory:
    """One node's host memory: each term, and the peak over the job's phases."""

    terms: dict[str, int]
    peak: int
    peak_phase: str


def host_memory(job: Job, parameters: int) -> HostMemory:
    """Host memory of the busiest node (the one with rank 0)."""
    fsdp = job.spec.fsdp
    ranks = min(job.layout.gpus_per_node, job.layout.world_size)
    shard = MASTER_BYTES * sharding(job).total_shard_numel()
    offloaded = ranks * shard * (2 + job.optimizer_states) if fsdp.cpu_offload else 0
    readers = 1 if fsdp.cpu_ram_efficient_loading else ranks
    loads = job.spec.model.weights is not None
    loading = readers * WEIGHT_FILE_BYTES * parameters if loads else 0
    # A full state dict gathers the fp32 parameters and optimizer state to rank 0.
    full_state = fsdp.state_dict_type == "FULL_STATE_DICT"
    gather = MASTER_BYTES * parameters * (1 + job.optimizer_states) if full_state else 0
    export = final_export_bytes(job, parameters)
    if job.adapters is not None:
        lora = adapted_host_terms(job, sharding(job), parameters, ranks, WEIGHT_FILE_BYTES)
        offloaded, gather, export = (lora["offloaded_states"], lora["full_state_dict_gather"],
                                     lora["final_export"])
    # Activation offload keeps each rank's saved activations in pinned host memory.
    activations = ranks * offloaded_activation_bytes(saved_activation_bytes(job), job)
    offloaded += activations
    terms = {
        "process_overhead": ranks * PROCESS_OVERHEAD_BYTES,
        "offloaded_states": offloaded - activations,
        "weight_loading": loading,
        "full_state_dict_gather": gather,
        "final_export": export,
    }
    if activations:
        terms["offloaded_activations"] = activations
    # "processes" wins ties: when nothing else is on the host, the processes are the peak.
    phases = {
        "processes": 0,
        "weight loading": loading,
        "training": offloaded,
        "checkpoint save": offloaded + gather,
        "final export": offloaded + export,
    }
    phase = max(phases, key=phases.__getitem__)
    return HostMemory(terms, terms["process_overhead"] + phases[phase], phase)


def final_export_bytes(job: Job, parameters: int) -> int:
    """Rank 0 converts the last checkpoint one unit at a time: the largest unit read in
    fp32 and cast, plus the shard being filled (at most max_shard_bytes, or one unit)."""
    export_bytes, shard_bytes = job.export_bytes, job.export_shard_bytes
    if not export_bytes:
        return 0
    g = job.geometry
    unit = max(g.layer_params, g.embedding_params)
    shard = min(parameters * export_bytes, max(shard_bytes, unit * export_bytes))
    return unit * (MASTER_BYTES + export_bytes) + shard
