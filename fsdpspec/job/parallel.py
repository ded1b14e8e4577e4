"""The parallel layout by named degree (torchtitan's ``ParallelDims``), torch-free.

Every way the ranks split the work is one degree: ``dp_replicate`` (replicas of the
model), ``dp_shard`` (ranks one parameter is sharded over), and ``cp``, ``tp``, ``pp``,
``ep``. Context parallelism splits each sequence
over ``cp`` ranks that hold different tokens of the same micro-batches, so FSDP shards
over ``dp_shard × cp`` ranks at once, the flattened ``dp_shard_cp`` sub-mesh (torchtitan's
name), and the ring attention runs over ``cp``. The spec's ``fsdp.sharding_strategy`` and
``fsdp.shard_group_size`` map onto the data-parallel degrees here, and nowhere else; the
lint rules and the engine's mesh (``fsdpspec_runners.engine.mesh``) call the one
`ParallelDims.validate`. Data, evaluation, metrics and the batch count data-parallel
ranks with `dp_size` and `dp_rank`, never the world size.

Expert parallelism (torchtitan's layout, expert tensor parallelism 1) adds no dimension
to the world: it regroups the ``dp_shard × cp × tp`` ranks, which all hold different
tokens at the experts, into ``efsdp × ep``. A layer's experts are split by expert index
over ``ep`` and FSDP-sharded over ``efsdp`` (the sparse mesh); every other parameter
stays on the dense mesh above.
"""

from __future__ import annotations

from dataclasses import dataclass

from fsdpspec.semantics import HYBRID_STRATEGIES

# The dimensions of the device mesh, outermost first (torchtitan's order): a rank's
# coordinates are its index in row-major order over these degrees.
MESH_ORDER = ("pp", "dp_replicate", "dp_shard", "cp", "tp")
# Strategies whose mesh has a replicate dimension (NO_SHARD: groups of one rank).
_REPLICATING = (*HYBRID_STRATEGIES, "NO_SHARD")
# Sub-meshes flattened from dimensions of the world mesh, by name.
FLATTENED = {"dp_shard_cp": ("dp_shard", "cp")}
# The dimensions of the experts' mesh under expert parallelism, outermost first
# (torchtitan's sparse mesh): it unflattens dp_shard × cp × tp into efsdp × ep.
SPARSE_MESH_ORDER = ("pp", "dp_replicate", "efsdp", "ep")


class ParallelDimsError(ValueError):
    """Degrees that cannot lay out the ranks; ``field`` is the spec's JSON pointer."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class ParallelDims:
    """How the ranks split the job, degree by degree."""

    world_size: int
    dp_replicate: int
    dp_shard: int
    # As written (for messages), and as FSDP runs it: FSDP1 given hybrid shard groups of
    # one rank runs NO_SHARD over every rank (it would switch each group to NO_SHARD and
    # never reduce gradients across the replicas, which would then train apart).
    written_strategy: str
    strategy: str
    # The shard group a hybrid strategy asks for (the written size, else one node); it
    # may not divide the world, which `validate` reports.
    requested_shard: int
    cp: int = 1
    tp: int = 1
    pp: int = 1
    ep: int = 1

    @property
    def dp_size(self) -> int:
        """Data-parallel ranks: each reads its own micro-batches."""
        return self.dp_replicate * self.dp_shard

    def dp_rank(self, rank: int) -> int:
        """The data-parallel rank of global ``rank`` (ranks of one cp × tp group read the
        same micro-batches)."""
        return rank % (self.dp_size * self.cp * self.tp) // (self.cp * self.tp)

    @property
    def dp_replicate_enabled(self) -> bool:
        return self.dp_replicate > 1

    @property
    def dp_shard_enabled(self) -> bool:
        return self.dp_shard > 1

    @property
    def cp_enabled(self) -> bool:
        return self.cp > 1

    @property
    def tp_enabled(self) -> bool:
        return self.tp > 1

    @property
    def pp_enabled(self) -> bool:
        return self.pp > 1

    @property
    def ep_enabled(self) -> bool:
        return self.ep > 1

    @property
    def fsdp_shard(self) -> int:
        """Ranks one parameter is sharded over: the data-parallel shard degree times the
        context-parallel one (each cp rank computes gradients of its own tokens)."""
        return self.dp_shard * self.cp

    @property
    def fsdp_mesh_names(self) -> tuple[str, ...]:
        """The sub-mesh FSDP (or DDP) runs over: ``dp_shard`` (``dp_shard_cp`` under
        context parallelism) alone for the sharded strategies; with ``dp_replicate``
        before it for hybrid ones and NO_SHARD (shard groups of one rank), also where
        one of the two is 1."""
        shard = "dp_shard_cp" if self.cp_enabled else "dp_shard"
        if self.written_strategy in _REPLICATING:
            return ("dp_replicate", shard)
        return (shard,)

    @property
    def mesh_names(self) -> tuple[str, ...]:
        """The dimensions of the device mesh, outermost first: FSDP's (the ones a
        flattened sub-mesh is made of), and each other enabled one."""
        names = {part for name in self.fsdp_mesh_names for part in FLATTENED.get(name, (name,))}
        names |= {d for d in ("pp", "cp", "tp") if getattr(self, d) > 1}
        return tuple(d for d in MESH_ORDER if d in names)

    @property
    def mesh_shape(self) -> tuple[int, ...]:
        return tuple(getattr(self, d) for d in self.mesh_names)

    @property
    def efsdp(self) -> int:
        """Ranks one expert tensor is FSDP-sharded over under expert parallelism: the
        ranks that hold different tokens, dp_shard × cp × tp, ÷ ep (torchtitan's
        ``efsdp``; the dense fsdp_shard when ep is 1 and tp is 1)."""
        return max(1, self.dp_shard * self.cp * self.tp // self.ep)

    @property
    def expert_fsdp_mesh_names(self) -> tuple[str, ...]:
        """The sub-mesh of the sparse mesh the experts' FSDP runs over (empty without
        expert parallelism: the experts share the dense mesh)."""
        if not self.ep_enabled:
            return ()
        if self.written_strategy in _REPLICATING:
            return ("dp_replicate", "efsdp")
        return ("efsdp",)

    @property
    def sparse_mesh_names(self) -> tuple[str, ...]:
        """The experts' mesh under expert parallelism, outermost first (empty without
        it): their FSDP's dimensions, ``ep``, and ``pp`` when enabled. ``efsdp`` is
        there at degree 1 too, as torchtitan keeps it (FSDP casts the experts' dtypes)."""
        names = {*self.expert_fsdp_mesh_names, "ep"} if self.ep_enabled else set()
        if names and self.pp_enabled:
            names.add("pp")
        return tuple(d for d in SPARSE_MESH_ORDER if d in names)

    @property
    def sparse_mesh_shape(self) -> tuple[int, ...]:
        return tuple(getattr(self, d) for d in self.sparse_mesh_names)

    def validate(self) -> None:
        """The one check that the degrees lay out the ranks: the lint rules (FS103,
        FS104) and the engine's mesh call it. Raises ParallelDimsError."""
        world, group = self.world_size, self.requested_shard
        if world % (self.tp * self.cp):
            raise ParallelDimsError(f"tensor_parallel {self.tp} × context_parallel {self.cp} "
                                    f"does not divide the world size {world}", "/parallelism")
        dp_world = world // (self.tp * self.cp)
        if self.written_strategy in HYBRID_STRATEGIES and dp_world % group:
            ranks = (f"the world size {world}" if dp_world == world
                     else f"the {dp_world} data-parallel ranks")
            raise ParallelDimsError(f"shard group of {group} ranks does not divide {ranks}",
                                    "/fsdp/shard_group_size")
        product = self.dp_replicate * self.dp_shard * self.cp * self.tp * self.pp
        if product != world:
            degrees = " × ".join(f"{d} {getattr(self, d)}" for d in MESH_ORDER)
            raise ParallelDimsError(f"{degrees} = {product} ranks, not the world size {world}",
                                    "/resources")
        # torchtitan's rule (expert tensor parallelism 1): ep borrows all of cp × tp and
        # part of dp_shard, the ranks that hold different tokens.
        tokens = self.dp_shard * self.cp * self.tp
        if self.ep_enabled and tokens % self.ep:
            raise ParallelDimsError(
                f"expert_parallel {self.ep} does not divide the {tokens} ranks that shard "
                f"the experts (FSDP shard group {self.dp_shard} × context_parallel {self.cp} "
                f"× tensor_parallel {self.tp})", "/parallelism/expert_parallel")
        if self.ep_enabled and self.ep % (self.cp * self.tp):
            raise ParallelDimsError(
                f"expert_parallel {self.ep} is not a multiple of context_parallel {self.cp} "
                f"× tensor_parallel {self.tp}, which it takes whole",
                "/parallelism/expert_parallel")

    def as_json(self) -> dict[str, object]:
        """The named degrees, as resolved-spec.json records them."""
        return {"dp_replicate": self.dp_replicate, "dp_shard": self.dp_shard, "cp": self.cp,
                "tp": self.tp, "pp": self.pp, "ep": self.ep, "efsdp": self.efsdp,
                "mesh_names": list(self.mesh_names),
                "sparse_mesh_names": list(self.sparse_mesh_names),
                "written_strategy": self.written_strategy,
                "requested_shard": self.requested_shard}


def parallel_dims(*, world_size: int, strategy: str, shard_group_size: int | None,
                  gpus_per_node: int, fsdp_version: int, tp: int = 1,
                  cp: int = 1, ep: int = 1) -> ParallelDims:
    """The degrees of `fsdp.sharding_strategy`, `fsdp.shard_group_size` and
    `parallelism` on ``world_size`` ranks. The data-parallel ranks are the world ÷
    (tp × cp): FULL_SHARD and SHARD_GRAD_OP shard over all of them; the hybrid ones
    within groups of the written size (else the data-parallel ranks of one node) and
    replicate across them; NO_SHARD replicates over all of them. ``ep`` regroups the
    sharding ranks for the experts and changes none of these."""
    dp_world = max(1, world_size // (tp * cp))
    requested = shard_group_size or max(1, gpus_per_node // (tp * cp))
    if strategy == "NO_SHARD":
        shard = 1
    elif strategy in HYBRID_STRATEGIES:
        shard = min(dp_world, requested)
    else:
        shard = dp_world
    runs = strategy
    if fsdp_version == 1 and strategy in HYBRID_STRATEGIES and shard == 1:
        runs = "NO_SHARD"
    return ParallelDims(world_size=world_size, dp_replicate=max(1, dp_world // shard),
                        dp_shard=shard, written_strategy=strategy, strategy=runs,
                        requested_shard=requested, cp=cp, tp=tp, ep=ep)
