"""The FSDP units of a model, by module name: the one wrap-policy function.

A unit is what FSDP gathers and frees as one. The planner sizes the units this module
chooses and the engine shards the modules of these names (``get_submodule``), so the
plan and the run cannot disagree about them. Both read the same module tree: built from
the analytic geometry (``geometry_tree``), from a model introspected on the meta device,
or, for a factory model, from the built ``nn.Module`` itself
(``fsdpspec.job.introspect.module_tree``, which the engine calls).

Identical decoder layers are one template node standing for all of them, so a
2**31-layer model stays small; unit names under it carry ``*`` for the layer index.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from fsdpspec.catalog.families import CUSTOM, EXPERTS_MODULE, Family, family
from fsdpspec.job.geometry import Geometry
from fsdpspec.job.tree import LAYER, Node, Shape
from fsdpspec.semantics import checkpointed_count, is_checkpointed

# Tensor shapes, each with how many tensors have it.
Shapes = tuple[tuple[Shape, int], ...]
# While the policy walks the tree: (shape, how many, whether stacked experts).
_Tagged = list[tuple[Shape, int, bool]]


@dataclass(frozen=True)
class Unit:
    """One FSDP unit: a module, or (``layers`` set) the same module in each layer that
    ``layers`` selects ("all", "checkpointed" or "plain"), ``count`` of them."""

    name: str
    shapes: Shapes
    count: int = 1
    layers: str | None = None
    # Its stacked expert tensors (`fsdpspec.job.experts`), apart from ``shapes``: FSDP2
    # may shard them on another dim.
    experts: Shapes = ()

    @property
    def numel(self) -> int:
        """Parameters in one copy of the unit."""
        return sum(math.prod(s) * n for s, n in (*self.shapes, *self.experts))


def _unit(name: str, tagged: _Tagged, count: int = 1, layers: str | None = None) -> Unit:
    return Unit(name, tuple((s, n) for s, n, e in tagged if not e), count, layers,
                tuple((s, n) for s, n, e in tagged if e))


@dataclass(frozen=True)
class Wrap:
    """What decides the units: the policy and the layers' checkpointing."""

    policy: str  # transformer | size | none
    min_num_params: int
    layer_classes: tuple[str, ...]
    # `fsdp.activation_checkpointing` and `fsdp.ac_every` (whose default is the spec's).
    ac_mode: str
    ac_every: int
    # Nothing inside a checkpointed layer becomes a unit: under FSDP1 (it cannot map
    # optimizer state to names through a checkpoint wrapper with units inside it, so
    # such a run could never resume), and under op-level checkpointing (`job.wrap_of`).
    whole_checkpointed: bool = False


@dataclass(frozen=True)
class Units:
    """The units besides the root, in the order FSDP wraps them, what the root keeps,
    and the decoder layers: (name pattern, how many) in module order."""

    units: tuple[Unit, ...]
    root: Unit
    layers: tuple[tuple[str, int], ...]
    ac_mode: str
    ac_every: int
    # The experts modules (`Node.experts`): (name pattern, how many), as ``layers``.
    experts: tuple[tuple[str, int], ...] = ()

    @property
    def num_layers(self) -> int:
        return sum(n for _, n in self.layers)

    def names(self) -> Iterator[str]:
        """Every unit's module name, in wrap order (post-order, layer by layer)."""
        yield from _expand(self, self.units)

    def layer_names(self) -> Iterator[str]:
        """The decoder layers' module names, in order."""
        yield from _expand_patterns(self.layers)

    def expert_names(self) -> Iterator[str]:
        """The experts modules' names, whose parameters are stacked expert tensors."""
        yield from _expand_patterns(self.experts)

    def checkpointed(self) -> Iterator[str]:
        """The layers wrapped in activation checkpointing."""
        for index, name in enumerate(self.layer_names()):
            if self.is_checkpointed(index):
                yield name

    def is_checkpointed(self, index: int) -> bool:
        """Whether decoder layer ``index`` is wrapped in activation checkpointing."""
        return is_checkpointed(self.ac_mode, self.ac_every, index)

    def checkpointed_count(self, num_layers: int) -> int:
        """How many of layers 0..num_layers-1 are checkpointed (closed form, any depth)."""
        return checkpointed_count(self.ac_mode, self.ac_every, num_layers)


def _expand_patterns(patterns: tuple[tuple[str, int], ...]) -> Iterator[str]:
    for pattern, count in patterns:
        if LAYER in pattern:
            yield from (pattern.replace(LAYER, str(i)) for i in range(count))
        else:
            yield pattern


def _selects(layers: str, mode: str, every: int, index: int) -> bool:
    if layers == "all":
        return True
    return is_checkpointed(mode, every, index) == (layers == "checkpointed")


def _expand(units: Units, found: tuple[Unit, ...]) -> Iterator[str]:
    """Names of ``found``: templated units are interleaved layer by layer, as a
    post-order walk of the built model meets them."""
    index = 0
    while index < len(found):
        if found[index].layers is None:
            yield found[index].name
            index += 1
            continue
        block = []
        while index < len(found) and found[index].layers is not None:
            block.append(found[index])
            index += 1
        for layer in range(units.num_layers):
            for unit in block:
                if _selects(unit.layers, units.ac_mode, units.ac_every, layer):
                    yield unit.name.replace(LAYER, str(layer))


# ---- the one policy ------------------------------------------------------------------


def _own(node: Node) -> _Tagged:
    return [(s, 1, node.experts) for s in node.params]


def _all_shapes(node: Node) -> _Tagged:
    out = _own(node)
    for child in node.children:
        out += [(s, n * child.repeat, e) for s, n, e in _all_shapes(child)]
    return out


def _holds_tied(node: Node) -> bool:
    return node.tied or any(_holds_tied(c) for c in node.children)


def _numel(shapes: _Tagged) -> int:
    return sum(math.prod(s) * n for s, n, _ in shapes)


class _Walk:
    """Bottom-up, as FSDP's size policy: a module whose not-yet-claimed parameters reach
    ``min_num_params`` becomes a unit. Never the root (it is always one), a container
    (a ModuleList is never called, so it could never gather), a module holding a tied
    parameter or one above it (FSDP needs every holder of a shared parameter in one
    unit; they meet only at the root), or a module with no parameters left."""

    def __init__(self, wrap: Wrap) -> None:
        self.wrap = wrap
        self.layers_seen = 0  # layers listed one by one (an exact tree), in module order
        self.units: list[Unit] = []

    def claim(self, node: Node, path: str, shapes: list, tied: bool, times: int,
              layers: str | None, root: bool) -> list:
        numel = _numel(shapes)
        if (not root and not node.container and not tied and numel > 0
                and numel >= self.wrap.min_num_params):
            self.units.append(_unit(path, shapes, times, layers))
            return []
        return shapes

    def visit(self, node: Node, path: str, *, times: int = 1, layers: str | None = None,
              atomic: bool = False, root: bool = False) -> tuple[list, bool]:
        """(parameters left unclaimed below ``node``, whether they hold a tied one)."""
        if atomic:
            shapes, tied = _all_shapes(node), _holds_tied(node)
        else:
            shapes, tied = [], node.tied
            for child in node.children:
                name = f"{path}.{child.name}" if path else child.name
                if child.repeat > 1 or child.name == LAYER:
                    left, held = self.template(child, name, times)
                else:
                    left, held = self.visit(child, name, times=times, layers=layers,
                                            atomic=self._whole(child))
                shapes += left
                tied = tied or held
            shapes += _own(node)
        return self.claim(node, path, shapes, tied, times, layers, root), tied

    def template(self, node: Node, name: str, times: int) -> tuple[list, bool]:
        """Identical layers: visited once per kind (checkpointed, plain) that differs."""
        wrap, count = self.wrap, node.repeat
        split = wrap.whole_checkpointed and wrap.ac_mode != "none" and self._is_layer(node)
        kinds = [("all", count, False)]
        if split:
            done = checkpointed_count(wrap.ac_mode, wrap.ac_every, count)
            kinds = [("checkpointed", done, True), ("plain", count - done, False)]
        shapes, tied = [], False
        for kind, n, atomic in kinds:
            if n == 0:
                continue
            left, held = self.visit(node, name, times=times * n, layers=kind, atomic=atomic)
            shapes += [(s, k * n, e) for s, k, e in left]
            tied = tied or held
        return shapes, tied

    def _is_layer(self, node: Node) -> bool:
        return node.cls in self.wrap.layer_classes

    def _whole(self, node: Node) -> bool:
        """Whether a layer of an exact tree is checkpointed and so kept whole."""
        if not self._is_layer(node):
            return False
        index, self.layers_seen = self.layers_seen, self.layers_seen + 1
        wrap = self.wrap
        return wrap.whole_checkpointed and is_checkpointed(wrap.ac_mode, wrap.ac_every, index)


def _modules(tree: Node, picked: Callable[[Node], bool]) -> list[tuple[str, Node, int]]:
    """(name, node, how many) of every module ``picked`` takes, in module order."""
    found: list[tuple[str, Node, int]] = []

    def walk(node: Node, path: str, times: int) -> None:
        if picked(node):
            found.append((path, node, times))
        for child in node.children:
            walk(child, f"{path}.{child.name}" if path else child.name, times * child.repeat)

    walk(tree, "", 1)
    return found


def choose_units(tree: Node, wrap: Wrap) -> Units:
    """The units ``wrap`` makes of the model ``tree``: one per layer (transformer), by
    size, or none (the root holds everything)."""
    layers = _modules(tree, lambda node: node.cls in wrap.layer_classes)
    if wrap.policy == "transformer":
        units = [_unit(name, _all_shapes(node), times, "all" if LAYER in name else None)
                 for name, node, times in layers]
        root = _unit("", _outside(tree, {id(n) for _, n, _ in layers}))
    elif wrap.policy == "size":
        walk = _Walk(wrap)
        left, _ = walk.visit(tree, "", root=True)
        units, root = walk.units, _unit("", left)
    else:
        units, root = [], _unit("", _all_shapes(tree))
    experts = _modules(tree, lambda node: node.experts)
    return Units(tuple(units), root, tuple((name, times) for name, _, times in layers),
                 wrap.ac_mode, wrap.ac_every, tuple((name, times) for name, _, times in experts))


def _outside(tree: Node, excluded: set[int]) -> _Tagged:
    """Parameters not below any module in ``excluded``."""
    if id(tree) in excluded:
        return []
    out = _own(tree)
    for child in tree.children:
        out += [(s, n * child.repeat, e) for s, n, e in _outside(child, excluded)]
    return out


# ---- the tree of an analytic geometry ------------------------------------------------


def renamed_tensor(name: str, renames: dict[str, str]) -> str:
    """A tensor's name as transformers spells it: its module path renamed by the
    family's longest matching prefix."""
    module, _, param = name.rpartition(".")
    parts = module.split(".")
    for cut in range(len(parts), 0, -1):
        head = ".".join(parts[:cut])
        if head in renames:
            module = ".".join([renames[head], *parts[cut:]])
            break
    return f"{module}.{param}"


def _subtree(name: str, cls: str, tensors: list[tuple[str, Shape]],
             first: tuple[str, ...]) -> Node:
    """A node for dotted parameter names below it; children in the order listed, but
    the family's ``first`` modules ahead (the order transformers registers them)."""
    own = tuple(shape for n, shape in tensors if "." not in n)
    below: dict[str, list[tuple[str, Shape]]] = {}
    for n, shape in tensors:
        if "." in n:
            head, rest = n.split(".", 1)
            below.setdefault(head, []).append((rest, shape))
    order = sorted(below, key=lambda h: first.index(h) if h in first else len(first))
    return Node(name, cls, own, tuple(_subtree(h, "", below[h], first) for h in order))


def _marked_experts(node: Node, path: list[str]) -> Node:
    """``node`` with its module at ``path`` marked as the experts module."""
    if not path:
        return dataclasses.replace(node, experts=True)
    children = tuple(_marked_experts(c, path[1:]) if c.name == path[0] else c
                     for c in node.children)
    return dataclasses.replace(node, children=children)


@functools.lru_cache(maxsize=64)  # tune and float8 ask for one geometry's tree again and again
def geometry_tree(g: Geometry) -> Node:
    """The module tree transformers builds for ``g``, named as transformers names it
    (the family's renames), the decoder layers as one template."""
    fam: Family = family(g.family) or CUSTOM
    names, first = fam.module_names, fam.modules_first

    def tree(tensors: list[tuple[str, Shape]], name: str = "", cls: str = "") -> Node:
        return _subtree(name, cls, [(renamed_tensor(n, names), s) for n, s in tensors], first)

    layer = tree(g.layer_tensors(), LAYER, fam.layer_class)
    if g.experts is not None:
        layer = _marked_experts(layer, EXPERTS_MODULE.split("."))
    root = tree(g.root_tensors())
    embed_path = renamed_tensor(g.root_tensors()[0][0], names).rsplit(".", 1)[0]
    base_name, embed_name = embed_path.split(".")
    layers_name = renamed_tensor(f"model.layers.{LAYER}.x", names).split(".")[1]
    base = next(c for c in root.children if c.name == base_name)
    tied = g.tie_word_embeddings
    children = []
    for child in base.children:
        if child.name == embed_name:
            child = Node(embed_name, "Embedding", child.params, tied=tied)
        children.append(child)
        if child.name == embed_name:  # the layers follow the embeddings
            children.append(Node(layers_name, "ModuleList", container=True, children=(
                Node(LAYER, layer.cls, layer.params, layer.children, repeat=g.num_layers),)))
    top = [Node(base_name, f"{fam.prefix}Model", base.params, tuple(children)),
           *(c for c in root.children if c.name != base_name)]
    if tied:
        top.append(Node("lm_head", "Linear", tied=True))
    return Node("", f"{fam.prefix}ForCausalLM", root.params, tuple(top))
