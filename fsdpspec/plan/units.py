"""FSDP units and the size of each rank's shard of them.

A unit is what FSDP gathers and frees as one: a transformer layer (transformer policy),
a module past `min_num_params` (size policy, chosen bottom-up as the engine does), and
the root, which holds whatever no other unit claimed (embeddings, final norm, lm_head).
FSDP2 shards every tensor along dim 0, padding dim 0 to a multiple of the group size;
FSDP1 flattens a unit and pads the flat parameter.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from fsdpspec.plan.geometry import Geometry, Shape


@dataclass(frozen=True)
class Unit:
    """One FSDP unit, repeated ``count`` times (identical layers are kept as one)."""

    name: str
    shapes: tuple[Shape, ...]
    count: int = 1

    @property
    def numel(self) -> int:
        """Parameters in one copy of the unit."""
        return sum(math.prod(s) for s in self.shapes)


@dataclass(frozen=True)
class Sharding:
    """The units of a model and how they are split over ``shard_size`` ranks."""

    units: tuple[Unit, ...]
    root: Unit
    shard_size: int
    fsdp_version: int

    def shard_numel(self, unit: Unit) -> int:
        """Elements of one copy of ``unit`` that one rank stores, padding included."""
        s = self.shard_size
        if self.fsdp_version == 1:
            return -(-unit.numel // s)
        return sum(-(-shape[0] // s) * math.prod(shape[1:]) for shape in unit.shapes)

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
def sharding(g: Geometry, *, policy: str, min_num_params: int, shard_size: int,
             fsdp_version: int) -> Sharding:
    """Units for a wrap policy: transformer (one per layer), size, or none (root only)."""
    layer = tuple(s for _, s in g.layer_tensors())
    root_shapes = tuple(s for _, s in g.root_tensors())
    if policy == "transformer":
        units: tuple[Unit, ...] = (Unit("layer", layer, g.num_layers),)
        return Sharding(units, Unit("root", root_shapes), shard_size, fsdp_version)
    if policy == "none":
        everything = layer * g.num_layers + root_shapes
        return Sharding((), Unit("root", everything), shard_size, fsdp_version)
    units, leftover = _size_units(_module_tree(g), min_num_params)
    return Sharding(tuple(units), Unit("root", tuple(leftover)), shard_size, fsdp_version)


# A module tree: a dict of child name → subtree, with parameter shapes under "" (own).
Tree = dict


def _module_tree(g: Geometry) -> Tree:
    tree: Tree = {}
    names = [(f"model.layers.{i}.{n}", s) for i in range(g.num_layers) for n, s in
             g.layer_tensors()]
    for name, shape in _root_first(g, names):
        node = tree
        for part in name.split(".")[:-1]:
            node = node.setdefault(part, {})
        node.setdefault("", []).append(shape)
    return tree


def _root_first(g: Geometry, layer_names: list[tuple[str, Shape]]) -> list[tuple[str, Shape]]:
    # Module order as transformers registers it: embeddings, layers, final norm, lm_head.
    root = g.root_tensors()
    return [root[0], *layer_names, *root[1:]]


def _size_units(tree: Tree, min_num_params: int) -> tuple[list[Unit], list[Shape]]:
    """The engine's size policy: bottom-up, a module whose not-yet-claimed parameters
    reach ``min_num_params`` becomes a unit; what the root keeps is left over."""
    units: list[Unit] = []

    def visit(node: Tree, path: str, is_root: bool) -> list[Shape]:
        remaining: list[Shape] = []
        for child, sub in node.items():
            if child:
                remaining += visit(sub, f"{path}.{child}".lstrip("."), False)
        remaining += node.get("", [])
        if not is_root and sum(math.prod(s) for s in remaining) >= min_num_params:
            units.append(Unit(path, tuple(remaining)))
            return []
        return remaining

    leftover = visit(tree, "", True)
    return units, leftover
