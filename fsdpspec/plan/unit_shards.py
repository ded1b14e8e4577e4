"""The size of each rank's shard of the FSDP units the job chose (`fsdpspec.job.units`).

FSDP2 shards every tensor along dim 0, padding dim 0 to a multiple of the group size,
but a Mixture of Experts' stacked expert tensors on dim 1 once the group outnumbers the
experts (`fsdpspec.job.experts`, as the engine's ``shard_placement_fn``); FSDP1 flattens
a unit and pads the flat parameter, so it pads no tensor of its own. The root holds
whatever no other unit claimed (embeddings, final norm, lm_head).
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

    def tensor_shards(self, unit: Unit) -> list[tuple[int, int]]:
        """(elements, how many) of each FSDP2 shard one rank holds of one copy of
        ``unit``, padding included: dim 0's, the stacked experts' on their dim."""
        s = self.shard_size
        return ([(shard_numel(shape, 0, s), n) for shape, n in unit.shapes]
                + [(shard_numel(shape, expert_shard_dim(shape, s), s), n)
                   for shape, n in unit.experts])

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
        s = self.shard_size
        return sum(s * shard_numel(shape, 1, s) * n for shape, n in unit.experts
                   if expert_shard_dim(shape, s) == 1)

    def gathered_numel(self, unit: Unit) -> int:
        """Elements of one copy of ``unit`` once all-gathered (padding included)."""
        return self.shard_numel(unit) * self.shard_size

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
def _sharding(units: Units, shard_size: int, fsdp_version: int) -> Sharding:
    return Sharding(units.units, units.root, shard_size, fsdp_version)


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
    return _sharding(local_units(job), job.layout.shard_size, job.layout.fsdp_version)
