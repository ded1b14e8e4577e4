"""Where the device mesh comes from: one mesh of the job's named degrees
(`fsdpspec.job.parallel.ParallelDims`), and the sub-meshes the parallelisms run over,
picked by name, never by position."""

from __future__ import annotations

from dataclasses import dataclass

from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from fsdpspec.job.parallel import FLATTENED, ParallelDims, ParallelDimsError
from fsdpspec_runners.engine.errors import EngineError


def build_mesh(dims: ParallelDims, device_type: str) -> DeviceMesh:
    """The world mesh, one dimension per name of ``dims.mesh_names``, checked by the one
    `ParallelDims.validate` the lint rules run (FS104)."""
    try:
        dims.validate()
    except ParallelDimsError as exc:
        raise EngineError(f"{exc.field.strip('/').replace('/', '.')}: {exc}") from None
    return init_device_mesh(device_type, dims.mesh_shape, mesh_dim_names=dims.mesh_names)


def fsdp_mesh(world: DeviceMesh, dims: ParallelDims) -> DeviceMesh:
    """The sub-mesh FSDP (or DDP) runs over: ``dp_shard``, or ``dp_replicate × dp_shard``
    (`ParallelDims.fsdp_mesh_names`); under context parallelism ``dp_shard_cp``, the
    ``dp_shard × cp`` dimensions flattened into one, as torchtitan names it."""
    for name in dims.fsdp_mesh_names:
        if name in FLATTENED:
            world[FLATTENED[name]]._flatten(name)
    return world[dims.fsdp_mesh_names]


@dataclass(frozen=True)
class ExpertMeshes:
    """The sub-meshes of expert parallelism: the experts' FSDP (``efsdp``, after
    ``dp_replicate`` for a replicating strategy), the ``ep`` ranks their tokens are
    exchanged over, and the ranks that hold the same tokens (this one alone: the
    tensor-parallel group, where it is built, would hold the same batch)."""

    fsdp: DeviceMesh
    ep: DeviceMesh
    tokens: DeviceMesh


def expert_meshes(world: DeviceMesh, dims: ParallelDims) -> ExpertMeshes | None:
    """torchtitan's sparse mesh (`ParallelDims.sparse_mesh_names`) under expert
    parallelism, else None: the ``dp_shard`` dimension of ``world`` unflattened into
    ``efsdp × ep`` (``ep`` innermost: an expert group is neighbouring ranks, within a
    node where it fits), the dense mesh's ranks regrouped; a trailing dimension of one
    rank gives each rank its own group. `expert_parallel.check_expert_parallel` has
    refused what it does not lay out."""
    if not dims.ep_enabled:
        return None
    sparse = world._unflatten("dp_shard", (dims.efsdp, dims.ep, 1), ("efsdp", "ep", "ep_tokens"))
    return ExpertMeshes(sparse[dims.expert_fsdp_mesh_names], sparse["ep"], sparse["ep_tokens"])


def cp_mesh(world: DeviceMesh, dims: ParallelDims) -> DeviceMesh | None:
    """The sub-mesh ring attention runs over (None without context parallelism)."""
    return world["cp"] if dims.cp_enabled else None


def shard_group_mesh(device_type: str, shard: int, *, tp: int = 1) -> DeviceMesh:
    """The mesh of one shard group alone, by its ``tp`` ranks where tensor parallelism
    splits each (a 2-D ``dp_shard × tp`` mesh): what `plan --trace` (one rank of a fake
    process group of ``shard × tp`` ranks) runs over."""
    if tp == 1:
        return init_device_mesh(device_type, (shard,), mesh_dim_names=("dp_shard",))
    return init_device_mesh(device_type, (shard, tp), mesh_dim_names=("dp_shard", "tp"))
