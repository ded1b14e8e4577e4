"""A model's module tree as data: what the wrap policy (`fsdpspec.job.units`) reads,
built from an analytic geometry, a model introspected on the meta device, or (in the
engine) a built ``nn.Module``."""

from __future__ import annotations

from dataclasses import dataclass

Shape = tuple[int, ...]
LAYER = "*"  # a template child's name: it stands for every layer index


def names_module(name: str, path: str) -> bool:
    """Whether a name in a list of module names (peft.target_modules, float8.exclude)
    names the module at ``path``: peft's ``check_target_module_exists`` for a list, the
    path itself or a dotted suffix of it. Literal: a name is no regular expression."""
    return path == name or path.endswith(f".{name}")


@dataclass(frozen=True)
class Node:
    """One module: its class, its own parameters, its children. ``tied``: it holds a
    parameter another module holds too (an input embedding shared with ``lm_head``),
    listed under the first holder only."""

    name: str
    cls: str
    params: tuple[Shape, ...] = ()
    children: tuple[Node, ...] = ()
    container: bool = False
    tied: bool = False
    # A template child (name ``*``) of a ModuleList stands for this many layers.
    repeat: int = 1
    # A built module that is an nn.Linear (a subclass too: peft's all-linear takes it).
    linear: bool = False
    # A Mixture of Experts' experts module: its own parameters are stacked expert tensors,
    # the expert index on dim 0 (`fsdpspec.job.experts`).
    experts: bool = False

    def as_json(self) -> list:
        """Compact JSON: [name, cls, params, children, container, tied, repeat, linear,
        experts]."""
        return [self.name, self.cls, [list(s) for s in self.params],
                [c.as_json() for c in self.children], self.container, self.tied, self.repeat,
                self.linear, self.experts]

    @staticmethod
    def from_json(data: list) -> Node:
        # A run directory recorded before `linear` (`experts`) holds seven (eight) fields.
        name, cls, params, children, container, tied, repeat, *flags = data
        linear, experts = (*flags, False, False)[:2]
        return Node(name, cls, tuple(tuple(s) for s in params),
                    tuple(Node.from_json(c) for c in children), container, tied, repeat,
                    bool(linear), bool(experts))
