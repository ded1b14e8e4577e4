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

# Tensor shapes, each with how many tensors have it: a 2**31-layer model stays small.
Shapes = tuple[tuple[Shape, int], ...]


@dataclass(frozen=True)
class Unit:
    """One FSDP unit, repeated ``count`` times (identical layers are kept as one)."""

    name: str
    shapes: Shapes
    count: int = 1

    @property
    def numel(self) -> int:
        """Parameters in one copy of the unit."""
        return sum(math.prod(s) * n for s, n in self.shapes)


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
        return sum(-(-shape[0] // s) * math.prod(shape[1:]) * n for shape, n in unit.shapes)

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


def _once(tensors: list[tuple[str, Shape]], times: int = 1) -> Shapes:
    return tuple((shape, times) for _, shape in tensors)


# Cached: the fewest-GPUs search and the suggestions ask for the same units many times.
@functools.lru_cache(maxsize=256)
def sharding(g: Geometry, *, policy: str, min_num_params: int, shard_size: int,
             fsdp_version: int) -> Sharding:
    """Units for a wrap policy: transformer (one per layer), size, or none (root only).
    Every layer has one shape, so the work is done for one layer and counted, never
    repeated per layer."""
    layer, root = g.layer_tensors(), g.root_tensors()
    if policy == "transformer":
        units: tuple[Unit, ...] = (Unit("layer", _once(layer), g.num_layers),)
        return Sharding(units, Unit("root", _once(root)), shard_size, fsdp_version)
    if policy == "none":
        everything = _once(layer, g.num_layers) + _once(root)
        return Sharding((), Unit("root", everything), shard_size, fsdp_version)
    units, leftover = _size_units(g, min_num_params)
    return Sharding(tuple(units), Unit("root", leftover), shard_size, fsdp_version)


# A module tree: a dict of child name → subtree, with parameter shapes under "" (own).
Tree = dict
_LAYERS = "model.layers"


def _tree(tensors: list[tuple[str, Shape]], tree: Tree | None = None) -> Tree:
    tree = {} if tree is None else tree
    for name, shape in tensors:
        node = tree
        for part in name.split(".")[:-1]:
            node = node.setdefault(part, {})
        node.setdefault("", []).append((shape, 1))
    return tree


def _numel(shapes: list[tuple[Shape, int]]) -> int:
    return sum(math.prod(s) * n for s, n in shapes)


def _size_units(g: Geometry, min_num_params: int) -> tuple[list[Unit], Shapes]:
    """The engine's size policy: bottom-up, a module whose not-yet-claimed parameters
    reach ``min_num_params`` becomes a unit; what the root keeps is left over."""
    units: list[Unit] = []

    def claim(path: str, shapes: list[tuple[Shape, int]], times: int = 1) -> list:
        if _numel(shapes) >= min_num_params:
            units.append(Unit(path, tuple(shapes), times))
            return []
        return shapes

    def visit(node: Tree, path: str, times: int = 1) -> list[tuple[Shape, int]]:
        remaining: list[tuple[Shape, int]] = []
        for child, sub in node.items():
            name = f"{path}.{child}".lstrip(".")
            if name == _LAYERS:
                remaining += claim(name, layers())
            elif child:
                remaining += visit(sub, name, times)
        remaining += node.get("", [])
        return claim(path, remaining, times) if path else remaining

    def layers() -> list[tuple[Shape, int]]:
        # Identical layers: one is visited, standing for all (its units count num_layers).
        left = visit(_tree(g.layer_tensors()), f"{_LAYERS}.*", g.num_layers)
        return [(shape, n * g.num_layers) for shape, n in left]

    # Module order as transformers registers it: embeddings, layers, final norm, lm_head.
    embed, *rest = g.root_tensors()
    tree = _tree([embed])
    tree["model"]["layers"] = {}
    return units, tuple(visit(_tree(rest, tree), ""))
