"""The layout of a job: the named parallel degrees (`ParallelDims`), the FSDP version,
the strategy FSDP really runs, the batch and gradient synchronisation — derived once
from the spec."""

from __future__ import annotations

from dataclasses import dataclass

from fsdpspec.job.batch import Batch, batch_of
from fsdpspec.job.parallel import ParallelDims, parallel_dims
from fsdpspec.semantics import HYBRID_STRATEGIES, reshards_after_forward, synced_micro_batches
from fsdpspec.spec.v1 import JobSpec


@dataclass(frozen=True)
class Layout:
    """How the ranks hold and train the model."""

    dims: ParallelDims
    batch: Batch
    gpus_per_node: int
    fsdp_version: int
    synced_micro_batches: int
    # FSDP2's NO_SHARD in full precision runs as DDP (`runs_as_ddp`).
    ddp: bool

    @property
    def world_size(self) -> int:
        return self.dims.world_size

    @property
    def written_strategy(self) -> str:
        return self.dims.written_strategy

    @property
    def strategy(self) -> str:
        """As FSDP runs it (`ParallelDims.strategy`)."""
        return self.dims.strategy

    @property
    def shard_size(self) -> int:
        """Ranks a parameter is sharded over (`ParallelDims.fsdp_shard`)."""
        return self.dims.fsdp_shard

    @property
    def replicas(self) -> int:
        return self.dims.dp_replicate

    @property
    def requested_group(self) -> int:
        return self.dims.requested_shard

    @property
    def mesh(self) -> tuple[int, ...]:
        return self.dims.mesh_shape

    @property
    def reshards_after_forward(self) -> bool:
        return reshards_after_forward(self.strategy)

    @property
    def shard_ranks_per_node(self) -> int:
        """Ranks of one shard group on one node: a group's ranks are cp × tp apart."""
        stride = self.dims.cp * self.dims.tp
        return max(1, min(self.shard_size, self.gpus_per_node // stride))

    @property
    def shard_group_spans_nodes(self) -> bool:
        """Whether a shard group holds ranks of more than one node."""
        return self.shard_size * self.dims.cp * self.dims.tp > self.gpus_per_node

    @property
    def hybrid(self) -> bool:
        return self.strategy in HYBRID_STRATEGIES

    def as_json(self) -> dict[str, object]:
        """What resolved-spec.json records, so that a run can be checked against its plan."""
        return {"world_size": self.world_size, "fsdp_version": self.fsdp_version,
                "strategy": self.strategy, "shard_size": self.shard_size,
                "mesh": list(self.mesh), "accumulation_steps": self.batch.accumulation,
                "synced_micro_batches": self.synced_micro_batches, "ddp": self.ddp,
                "gpus_per_node": self.gpus_per_node, "dims": self.dims.as_json(),
                "batch": self.batch.as_json()}


def runs_as_ddp(spec: JobSpec, strategy: str) -> bool:
    """Whether the engine replicates the model with DDP (torch's composable
    ``replicate``, as torchtitan does for pure data parallelism) instead of
    ``fully_shard``: FSDP2 at NO_SHARD in full precision, without adapters or CPU
    offload, without tensor parallelism. Nothing is sharded there, so FSDP2's per-unit
    copies and blocking reductions buy nothing, while DDP overlaps its bucketed
    all-reduces with backward (`benchmarks/engine_vs_accelerate.py`). A cast to a lower
    param_dtype, a LoRA's frozen base in another dtype and CPU offload stay FSDP2's."""
    precision = spec.fsdp.mixed_precision
    return (spec.fsdp.version == 2 and strategy == "NO_SHARD" and spec.peft is None
            and not spec.fsdp.cpu_offload and spec.parallelism.tensor_parallel == 1
            and precision.param_dtype == precision.reduce_dtype == "float32")


def layout(spec: JobSpec, world_size: int | None = None) -> Layout:
    """The layout of ``spec`` (optionally on another number of ranks)."""
    fsdp = spec.fsdp
    dims = parallel_dims(world_size=world_size or spec.world_size,
                         strategy=fsdp.sharding_strategy, shard_group_size=fsdp.shard_group_size,
                         gpus_per_node=spec.resources.gpus_per_node, fsdp_version=fsdp.version,
                         tp=spec.parallelism.tensor_parallel, cp=spec.parallelism.context_parallel,
                         ep=spec.parallelism.expert_parallel)
    batch = batch_of(spec, dims.dp_size, dims.cp)
    return Layout(
        dims=dims,
        batch=batch,
        gpus_per_node=spec.resources.gpus_per_node,
        fsdp_version=fsdp.version,
        synced_micro_batches=synced_micro_batches(dims.strategy, batch.accumulation),
        ddp=runs_as_ddp(spec, dims.strategy),
    )
