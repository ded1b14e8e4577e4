"""The layout of a job: ranks, mesh, shard group, the strategy FSDP really runs,
accumulation and gradient synchronisation — derived once from the spec."""

from __future__ import annotations

from dataclasses import dataclass

from fsdpspec.semantics import (
    HYBRID_STRATEGIES,
    accumulation_steps,
    mesh_shape,
    requested_shard_group,
    reshards_after_forward,
    shard_group_size,
    synced_micro_batches,
)
from fsdpspec.spec.v1 import JobSpec


@dataclass(frozen=True)
class Layout:
    """How the ranks hold and train the model."""

    world_size: int
    gpus_per_node: int
    fsdp_version: int
    # As written, and as FSDP runs it: FSDP1 given hybrid shard groups of one rank runs
    # NO_SHARD over every rank (it would switch each group to NO_SHARD and never reduce
    # gradients across the replicas, which would then train apart).
    written_strategy: str
    strategy: str
    shard_size: int
    # The shard group a hybrid strategy asks for (the written size, else one node).
    requested_group: int
    mesh: tuple[int, ...]
    micro_batch_size: int
    seq_len: int
    accumulation_steps: int
    # global_batch_size is a whole number of micro-batches over every rank (FS501).
    divides_batch: bool
    synced_micro_batches: int
    # FSDP2's NO_SHARD in full precision runs as DDP (`runs_as_ddp`).
    ddp: bool

    @property
    def replicas(self) -> int:
        return self.world_size // self.shard_size

    @property
    def reshards_after_forward(self) -> bool:
        return reshards_after_forward(self.strategy)

    @property
    def hybrid(self) -> bool:
        return self.strategy in HYBRID_STRATEGIES

    @property
    def tokens(self) -> int:
        """Tokens in one micro-batch of one rank."""
        return self.micro_batch_size * self.seq_len

    def as_json(self) -> dict[str, object]:
        """What resolved-spec.json records, so that a run can be checked against its plan."""
        return {"world_size": self.world_size, "fsdp_version": self.fsdp_version,
                "strategy": self.strategy, "shard_size": self.shard_size,
                "mesh": list(self.mesh), "accumulation_steps": self.accumulation_steps,
                "synced_micro_batches": self.synced_micro_batches, "ddp": self.ddp}


def effective_strategy(spec: JobSpec, world: int) -> str:
    """The strategy FSDP runs (see `Layout.strategy`)."""
    strategy = spec.fsdp.sharding_strategy
    if (spec.fsdp.version == 1 and strategy in HYBRID_STRATEGIES
            and shard_group_size(spec, world) == 1):
        return "NO_SHARD"
    return strategy


def runs_as_ddp(spec: JobSpec, strategy: str) -> bool:
    """Whether the engine replicates the model with DDP (torch's composable
    ``replicate``, as torchtitan does for pure data parallelism) instead of
    ``fully_shard``: FSDP2 at NO_SHARD in full precision, without adapters or CPU
    offload. Nothing is sharded there, so FSDP2's per-unit copies and blocking
    reductions buy nothing, while DDP overlaps its bucketed all-reduces with backward
    (`benchmarks/engine_vs_accelerate.py`). A cast to a lower param_dtype, a LoRA's
    frozen base in another dtype and CPU offload stay FSDP2's."""
    precision = spec.fsdp.mixed_precision
    return (spec.fsdp.version == 2 and strategy == "NO_SHARD" and spec.peft is None
            and not spec.fsdp.cpu_offload
            and precision.param_dtype == precision.reduce_dtype == "float32")


def layout(spec: JobSpec, world_size: int | None = None) -> Layout:
    """The layout of ``spec`` (optionally on another number of ranks)."""
    world = world_size or spec.world_size
    data = spec.data
    strategy = effective_strategy(spec, world)
    accumulation = accumulation_steps(spec, world)
    return Layout(
        world_size=world,
        gpus_per_node=spec.resources.gpus_per_node,
        fsdp_version=spec.fsdp.version,
        written_strategy=spec.fsdp.sharding_strategy,
        strategy=strategy,
        shard_size=shard_group_size(spec, world),
        requested_group=requested_shard_group(spec),
        mesh=mesh_shape(spec, world),
        micro_batch_size=data.micro_batch_size,
        seq_len=data.seq_len,
        accumulation_steps=accumulation,
        divides_batch=data.global_batch_size % (data.micro_batch_size * world) == 0,
        synced_micro_batches=synced_micro_batches(strategy, accumulation),
        ddp=runs_as_ddp(spec, strategy),
    )
