"""The size of each rank's shard of the FSDP units the job chose (`fsdpspec.job.units`).

FSDP2 shards every tensor along dim 0, padding dim 0 to a multiple of the group size,
but a Mixture of Experts' stacked expert tensors on dim 1 once the group outnumbers the
experts (`fsdpspec.job.experts`, as the engine's ``shard_placement_fn``); FSDP1 flattens
a unit and pads the flat parameter, so it pads no tensor of its own. Under expert
parallelism a rank holds E ÷ ep experts of each stacked tensor, sharded over the
experts' own ``efsdp`` ranks (`fsdpspec.plan.expert_parallel`). The root holds whatever
no other unit claimed (embeddings, final norm, lm_head).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from fsdpspec.job.experts import expert_shard_dim, shard_numel
from fsdpspec.job.job import Job, decoder_layer_classes, units_of, wrap_of
from fsdpspec.job.units import Unit, Units
from fsdpspec.plan.tensor_parallel import local_geometry, tp_degree


@dataclass(frozen=True)
class Sharding:
    """The units of a model and how they are split over ``shard_size`` ranks."""

    units: tuple[Unit, ...]
    root: Unit
    shard_size: int
    fsdp_version: int
    # Expert parallelism: the experts split by index over ``ep`` ranks, each rank's
    # sharded over ``expert_shard_size`` (efsdp; the shard size without EP).
    ep: int = 1
    expert_shard_size: int = 0

    @property
    def efsdp(self) -> int:
        return self.expert_shard_size or self.shard_size

    def _local_experts(self, unit: Unit) -> list[tuple[tuple[int, ...], int]]:
        """The stacked expert tensors as one rank of an expert-parallel group holds them."""
        return [((shape[0] // self.ep, *shape[1:]), n) for shape, n in unit.experts]

    def dense_shards(self, unit: Unit) -> list[tuple[int, int]]:
        s = self.shard_size
        return [(shard_numel(shape, 0, s), n) for shape, n in unit.shapes]

    def expert_shards(self, unit: Unit) -> list[tuple[int, int]]:
        e = self.efsdp
        return [(shard_numel(shape, expert_shard_dim(shape, e), e), n)
                for shape, n in self._local_experts(unit)]

    def tensor_shards(self, unit: Unit) -> list[tuple[int, int]]:
        """(elements, how many) of each FSDP2 shard one rank holds of one copy of
        ``unit``, padding included: dim 0's, the stacked experts' on their dim."""
        return self.dense_shards(unit) + self.expert_shards(unit)

    def shard_numel(self, unit: Unit) -> int:
        """Elements of one copy of ``unit`` that one rank stores, padding included."""
        if self.fsdp_version == 1:
            return -(-unit.numel // self.shard_size)
        return sum(k * n for k, n in self.tensor_shards(unit))

    def resharded_expert_numel(self, unit: Unit) -> int:
        """Elements of one gathered copy of ``unit`` in tensors FSDP2 shards on a dim
        other than 0: its all-gather copies them out through a temporary of their size
        (``foreach_all_gather_copy_out``)."""
        if self.fsdp_version == 1:
            return 0
        e = self.efsdp
        return sum(e * shard_numel(shape, 1, e) * n for shape, n in self._local_experts(unit)
                   if expert_shard_dim(shape, e) == 1)

    def gathered_numel(self, unit: Unit) -> int:
        """Elements of one copy of ``unit`` once all-gathered (padding included): under
        expert parallelism its dense tensors over the shard group, the rank's experts
        over efsdp."""
        if self.fsdp_version == 1 or self.efsdp == self.shard_size:
            return self.shard_numel(unit) * self.shard_size
        return (self.shard_size * sum(k * n for k, n in self.dense_shards(unit))
                + self.efsdp * sum(k * n for k, n in self.expert_shards(unit)))

    def sent_numel(self, unit: Unit) -> int:
        """Elements one rank receives from the others in one all-gather of ``unit`` (as
        many as it sends in its reduce-scatter): (n − 1)/n of each group's buffer."""
        if self.fsdp_version == 1 or self.efsdp == self.shard_size:
            return self.shard_numel(unit) * (self.shard_size - 1)
        return ((self.shard_size - 1) * sum(k * n for k, n in self.dense_shards(unit))
                + (self.efsdp - 1) * sum(k * n for k, n in self.expert_shards(unit)))

    @property
    def all_units(self) -> tuple[Unit, ...]:
        return (*self.units, self.root)

    def total_shard_numel(self) -> int:
        """Elements of every unit that one rank stores."""
        return sum(self.shard_numel(u) * u.count for u in self.all_units)

    @property
    def largest(self) -> Unit | None:
        """The largest non-root unit (the working set of a gathered layer)."""
        return max(self.units, key=lambda u: u.numel, default=None)

    @property
    def layer_numel(self) -> int:
        """Unsharded elements of all non-root units together."""
        return sum(u.numel * u.count for u in self.units)


# Cached: the fewest-GPUs search and the suggestions ask for the same units many times.
@functools.lru_cache(maxsize=256)
def _sharding(units: Units, shard_size: int, fsdp_version: int, ep: int,
              efsdp: int) -> Sharding:
    return Sharding(units.units, units.root, shard_size, fsdp_version, ep, efsdp)


def local_units(job: Job) -> Units:
    """The job's units as one rank of its tensor-parallel group holds them: the same
    modules, each tensor its local shard (`tensor_parallel.local_geometry`)."""
    assert job.units is not None  # the planner plans only jobs with a geometry
    tp = tp_degree(job)
    if tp == 1:
        return job.units
    g = job.geometry
    return units_of(local_geometry(g, tp), wrap_of(job.spec, decoder_layer_classes(job.spec, g)))


def sharding(job: Job) -> Sharding:
    """The job's units (their tensor-parallel shards), split over its shard group."""
    dims = job.layout.dims
    ep = dims.ep if dims.ep_enabled else 1
    return _sharding(local_units(job), job.layout.shard_size, job.layout.fsdp_version, ep,
                     dims.efsdp if ep > 1 else 0)
