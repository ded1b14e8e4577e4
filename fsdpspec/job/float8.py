"""A job's float8 training in the planner's terms: which Linear modules torchao's
`convert_to_float8_training` converts (the one filter the engine hands torchao, so the
plan and the converted model agree by construction), and whether FSDP2 all-gathers
their weights in float8. Torch-free."""

from __future__ import annotations

import math
from dataclasses import dataclass

from fsdpspec.job.geometry import Geometry, Shape
from fsdpspec.job.layout import Layout
from fsdpspec.job.lora import linear_test, peft_matches
from fsdpspec.job.tree import LAYER, Node, names_module
from fsdpspec.job.units import geometry_tree
from fsdpspec.spec.v1 import Float8 as Float8Section

# torch._scaled_mm takes operands whose dimensions are multiples of 16, in the forward
# (in, out) and in the weight gradient (the tokens of a micro-batch).
SCALED_MM_MULTIPLE = 16


def excluded(path: str, exclude: list[str] | tuple[str, ...]) -> bool:
    """`float8.exclude` matches a module as peft matches names: the path or its end."""
    return any(names_module(name, path) for name in exclude)


def too_small(shape: Shape, recipe: str) -> bool:
    """torchao's `auto_filter_small_kn` thresholds (benchmarked on H100): below them the
    casts cost more than the float8 matmul saves. ``shape`` is the weight's (out, in)."""
    n, k = shape
    if recipe == "tensorwise":
        return k <= 4096 and n <= 1024
    return n <= 2048 or k <= 1024 or (n <= 4096 and k <= 2048)


def converts(path: str, shape: Shape, section: Float8Section) -> bool:
    """Whether float8 training converts the Linear at ``path`` of weight ``shape``."""
    if excluded(path, section.exclude):
        return False
    return not (section.skip_small and too_small(shape, section.recipe))


def fits_scaled_mm(shape: Shape) -> bool:
    return all(d % SCALED_MM_MULTIPLE == 0 for d in shape)


@dataclass(frozen=True)
class Float8:
    """The converted Linear modules and how their weights are gathered."""

    section: Float8Section
    # FSDP2 all-gathers the converted weights in float8 (torchao's
    # `enable_fsdp_float8_all_gather`), tensorwise only.
    all_gather: bool
    # (path, (out, in), how many): a decoder layer's converted modules under the layer
    # template `*` once, counted for every layer; the others by path.
    linears: tuple[tuple[str, Shape, int], ...]
    # (name, why) of the `exclude` names that exclude nothing (FS326).
    unmatched_exclude: tuple[tuple[str, str], ...] = ()

    @property
    def recipe(self) -> str:
        return self.section.recipe

    def converts(self, path: str, shape: Shape) -> bool:
        return converts(path, shape, self.section)

    @property
    def numel(self) -> int:
        """Weights of the converted modules, every layer counted."""
        return sum(math.prod(shape) * count for _, shape, count in self.linears)

    def layer_numel(self) -> int:
        """The converted weights of one decoder layer (the template's)."""
        return sum(math.prod(s) for path, s, _ in self.linears if f".{LAYER}." in path)

    def misfits(self) -> list[tuple[str, Shape]]:
        """Converted modules whose dimensions `_scaled_mm` does not take."""
        return [(path, s) for path, s, _ in self.linears if not fits_scaled_mm(s)]


def all_gathers_float8(section: Float8Section, lay: Layout) -> bool:
    """`float8.fsdp_all_gather`, null resolved: on where FSDP2 gathers sharded weights
    under the tensorwise recipe (FS324 refuses a `true` that cannot run)."""
    if section.fsdp_all_gather is not None:
        return section.fsdp_all_gather
    return (section.recipe == "tensorwise" and lay.fsdp_version == 2 and not lay.ddp
            and lay.shard_size > 1)


def converted_linears(tree: Node, g: Geometry,
                      section: Float8Section) -> tuple[tuple[str, Shape, int], ...]:
    """The Linear modules of ``tree`` (a family's analytic tree, or the tree an
    introspected model built) that `converts`, with how many each path stands for."""
    is_linear = linear_test(g, conv1d=False)
    out: list[tuple[str, Shape, int]] = []

    def walk(node: Node, path: str, count: int) -> None:
        count *= node.repeat
        if path and not node.container and is_linear(node):
            shape = node.params[0] if node.params else (g.vocab_size, g.hidden_size)
            if converts(path, shape[:2], section):
                out.append((path, shape[:2], count))
        for child in node.children:
            walk(child, f"{path}.{child.name}" if path else child.name, count)

    walk(tree, "", 1)
    return tuple(out)


def unmatched_exclude(tree: Node, g: Geometry, exclude: list[str]
                      ) -> tuple[tuple[str, str], ...]:
    """(name, why) of each `exclude` name that keeps no Linear module out of float8, by
    peft's matcher over every module (a layer's at its index where the name has one): it
    matches no module, or only modules that are not Linear (a block: float8 converts
    each Linear by its own path, so naming its block keeps nothing out)."""
    matched = peft_matches(tree, g, tuple(exclude), ())
    linears = [name for name, _ in matched.layer_linears] + \
        [path for path, _ in matched.root_linears]
    why = {name: "matches no module" for name in matched.unmatched_targets}
    for name, path, cls in matched.not_linear:
        if not any(names_module(name, linear) for linear in linears):
            shown = "" if cls == "not Linear" else f" ({cls})"  # an analytic tree's block
            why.setdefault(name, f"matches {path}{shown}, not a Linear module")
    return tuple((name, why[name]) for name in exclude if name in why)


def float8_of(section: Float8Section | None, g: Geometry | None, lay: Layout) -> Float8 | None:
    """The job's float8 training (None without a `float8` section); no modules are known
    without a geometry (a factory model: the engine applies `converts` to what it built)."""
    if section is None:
        return None
    linears, unmatched = (), ()
    if g is not None:
        tree = g.built_tree if g.built_tree is not None else geometry_tree(g)
        linears = converted_linears(tree, g, section)
        unmatched = unmatched_exclude(tree, g, section.exclude)
    return Float8(section=section, all_gather=all_gathers_float8(section, lay),
                  linears=linears, unmatched_exclude=unmatched)
