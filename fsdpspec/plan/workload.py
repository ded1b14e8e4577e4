"""What the memory model reads from a spec: one rank's shapes, dtypes and policies."""

from __future__ import annotations

from dataclasses import dataclass

from fsdpspec.plan.geometry import Geometry
from fsdpspec.plan.lora import Adapters, adapters_of
from fsdpspec.semantics import (
    DTYPE_BYTES,
    OPTIMIZER_STATES,
    accumulation_steps,
    reshards_after_forward,
    shard_group_size,
)
from fsdpspec.spec.v1 import JobSpec


@dataclass(frozen=True)
class Workload:
    """One rank's view of a job: everything the memory and compute models need."""

    geometry: Geometry
    world_size: int
    shard_size: int
    gpus_per_node: int
    fsdp_version: int
    strategy: str
    compute_bytes: int
    reduce_bytes: int
    optimizer_states: int
    activation_checkpointing: str
    ac_every: int
    attention: str
    micro_batch_size: int
    seq_len: int
    accumulation_steps: int
    cpu_offload: bool
    auto_wrap_policy: str
    min_num_params: int
    backward_prefetch: str
    loads_weights: bool
    cpu_ram_efficient_loading: bool
    full_state_dict: bool
    export_bytes: int
    export_shard_bytes: int
    # A LoRA / QLoRA fine-tune (None: every parameter trains).
    adapters: Adapters | None = None

    @property
    def tokens(self) -> int:
        """Tokens in one micro-batch of one rank."""
        return self.micro_batch_size * self.seq_len

    @property
    def keeps_params_gathered(self) -> bool:
        return not reshards_after_forward(self.strategy)


def workload(spec: JobSpec, geometry: Geometry, *, world_size: int | None = None) -> Workload:
    """The workload of ``spec`` (optionally on another number of ranks)."""
    world = world_size or spec.world_size
    fsdp, precision = spec.fsdp, spec.fsdp.mixed_precision
    sgd_without_momentum = spec.optimizer.name == "sgd" and spec.optimizer.momentum == 0
    final = spec.checkpoint.final
    return Workload(
        geometry=geometry,
        world_size=world,
        shard_size=shard_group_size(spec, world),
        gpus_per_node=spec.resources.gpus_per_node,
        fsdp_version=fsdp.version,
        strategy=fsdp.sharding_strategy,
        compute_bytes=DTYPE_BYTES[precision.param_dtype],
        reduce_bytes=DTYPE_BYTES[precision.reduce_dtype],
        optimizer_states=0 if sgd_without_momentum else OPTIMIZER_STATES[spec.optimizer.name],
        activation_checkpointing=fsdp.activation_checkpointing,
        ac_every=fsdp.ac_every,
        attention=spec.model.attention,
        micro_batch_size=spec.data.micro_batch_size,
        seq_len=spec.data.seq_len,
        accumulation_steps=accumulation_steps(spec, world),
        cpu_offload=fsdp.cpu_offload,
        auto_wrap_policy=fsdp.auto_wrap_policy,
        min_num_params=fsdp.min_num_params,
        backward_prefetch=fsdp.backward_prefetch,
        loads_weights=spec.model.weights is not None,
        cpu_ram_efficient_loading=fsdp.cpu_ram_efficient_loading,
        full_state_dict=fsdp.state_dict_type == "FULL_STATE_DICT",
        export_bytes=DTYPE_BYTES[final.dtype] if final.enabled else 0,
        export_shard_bytes=final.max_shard_mb * 10**6,
        adapters=adapters_of(spec, geometry, None),
    )
