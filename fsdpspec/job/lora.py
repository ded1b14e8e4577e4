"""A job's LoRA in the planner's terms: which modules carry adapters and which are
trained in full, as peft's own matching rules pick them out of the model's module tree
(the family's analytic tree, or the tree an introspected model built), and the trainable
tensors' shapes (the memory terms are `fsdpspec.plan.adapters`'). The engine hands peft
the same names, so the plan and the adapted model agree by construction
(tests/plan/test_lora_peft.py holds both against ``peft.get_peft_model``)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from fsdpspec.catalog.families import FAMILIES
from fsdpspec.catalog.modelconfig import lora_targets
from fsdpspec.job.geometry import Geometry, Shape
from fsdpspec.job.tree import LAYER, Node
from fsdpspec.job.units import geometry_tree
from fsdpspec.spec.v1 import JobSpec

# QLoRA's NF4 (the QLoRA paper's, bitsandbytes' and torchao's layout): one absmax per 64
# weights; double quantisation stores the absmaxes in 8 bits with one scale per 256.
NF4_BLOCK, NF4_SCALER_BLOCK = 64, 256

# The planner's names of the projections an adapter can go on.
_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "qkv_proj", "o_proj", "gate_proj", "up_proj",
                "gate_up_proj", "down_proj")
# peft's shorthand for every Linear module but the output head (`target_modules`).
ALL_LINEAR = "all-linear"
_INDEX = re.compile(r"(^|\.)\d+(\.|$)")


def _planned_name(tensor: str) -> str:
    """``self_attn.q_proj.weight`` → ``q_proj``."""
    return tensor.rsplit(".", 2)[-2]


@dataclass(frozen=True)
class Matched:
    """What peft's rules pick out of a model's module tree (`peft_matches`): the
    adapted Linear modules and the modules to save, per decoder layer and outside the
    layers, and the requests that match nothing or what the plan cannot adapt."""

    layer_linears: tuple[tuple[str, Shape], ...] = ()  # (module name, (out, in)) per layer
    root_linears: tuple[tuple[str, Shape], ...] = ()  # (module path, (out, in))
    # (module name, parameter shape) of the modules to save, per layer.
    layer_saved: tuple[tuple[str, Shape], ...] = ()
    root_saved: tuple[tuple[str, Shape], ...] = ()  # (module path, parameter shape)
    unmatched_targets: tuple[str, ...] = ()
    unmatched_saves: tuple[str, ...] = ()
    # (target, module path, its class): a target matching a module that is not Linear.
    not_linear: tuple[tuple[str, str, str], ...] = ()
    # Targets that match a module in some decoder layers only.
    some_layers: tuple[str, ...] = ()
    # (target, module to save) naming one module: peft adapts it, then copies it.
    saved_targets: tuple[tuple[str, str], ...] = ()


def _entries(tree: Node, layer_classes: tuple[str, ...]) -> list[tuple[str, Node, bool]]:
    """(path, node, inside the decoder layers) of every module, the decoder layers as one
    template: the analytic tree's ``*`` child, or a built tree's largest layer (of
    ``layer_classes``, the one the geometry's per-layer counts read; the other layers
    are left out), its index written ``*``."""
    out: list[tuple[str, Node, bool]] = []
    layers: list[Node] = []

    def find(node: Node) -> None:
        if node.cls in layer_classes:
            layers.append(node)
            return
        for child in node.children:
            find(child)

    find(tree)
    sizes = [sum(math.prod(s) for s in _all_params(layer)) for layer in layers]
    template = layers[sizes.index(max(sizes))] if layers else None

    def walk(node: Node, path: str, in_layer: bool) -> None:
        if not in_layer and (node.name == LAYER or node.cls in layer_classes):
            if node.name != LAYER and node is not template:
                return
            in_layer = True
            path = f"{path.rpartition('.')[0]}.{LAYER}".lstrip(".")
        out.append((path, node, in_layer))
        for child in node.children:
            walk(child, f"{path}.{child.name}" if path else child.name, in_layer)

    walk(tree, "", False)
    return out


def _paths(path: str, in_layer: bool, num_layers: int, indexed: bool) -> list[str]:
    """The real paths a template path stands for (one, when no name reads the index)."""
    if not in_layer:
        return [path]
    return [path.replace(LAYER, str(i), 1) for i in (range(num_layers) if indexed else (0,))]


def _target_hits(target: str, key: str) -> bool:
    """peft's ``check_target_module_exists`` for a list: the name, or a dotted suffix."""
    return key == target or key.endswith(f".{target}")


def peft_matches(tree: Node, g: Geometry, targets: tuple[str, ...],
                 saves: tuple[str, ...]) -> Matched:
    """The modules peft's rules pick for ``targets`` and ``saves`` (`modules_to_save`)
    in ``tree``, torch-free: a target matches a module whose path is the name or ends in
    ``.name`` (``all-linear``: every Linear but the output head), except inside a module
    to save; a module to save is every module whose path ends in the name (no dot
    needed: ``norm`` saves ``input_layernorm`` too), copied whole."""
    fam = FAMILIES.get(g.family)
    linear_leaves = set(fam.lora_targets) | {"lm_head"} if fam else set()
    if fam and fam.moe and fam.moe.router_linear:
        linear_leaves.add(fam.moe.router)
    entries = _entries(tree, g.built_layer_classes if g.introspected else ())
    indexed = any(_INDEX.search(name) for name in (*targets, *saves))
    excluded = [re.compile(rf"(^|.*\.){name}($|\..*)") for name in saves]
    all_linear = targets == (ALL_LINEAR,)

    def is_linear(node: Node) -> bool:
        if g.introspected:  # peft's all-linear: nn.Linear and transformers' Conv1D (GPT-2)
            return node.cls in ("Linear", "Conv1D")
        return node.cls == "Linear" or (node.name in linear_leaves and not node.children)

    def shape(node: Node) -> Shape:
        return node.params[0] if node.params else (g.vocab_size, g.hidden_size)  # tied head

    layer_linears, root_linears, layer_saved, root_saved = [], [], [], []
    found_targets, found_saves, not_linear, some_layers = set(), set(), [], set()
    saved_below: list[str] = []
    saved_targets: list[tuple[str, str]] = []
    for path, node, in_layer in entries:
        if not path or path.endswith(f".{LAYER}") or node.container:
            continue
        keys = _paths(path, in_layer, g.num_layers, indexed)
        if saved_below and any(path.startswith(f"{s}.") for s in saved_below):
            continue  # inside a copied module: copied with it
        save = [n for n in saves if all(k.endswith(n) for k in keys)]
        if save:
            found_saves.update(save)
            both = [t for t in targets if any(_target_hits(t, k) for k in keys)]
            saved_targets += [(t, save[0]) for t in both]
            found_targets.update(both)  # FS145's, not a target that matches nothing
            saved_below.append(path)
            # A tied head holds the embedding's weight, listed under the embedding.
            params = _all_params(node) or ([shape(node)] if node.tied else [])
            if in_layer:
                layer_saved += [(node.name, p) for p in params]
            else:
                root_saved += [(path, p) for p in params]
            continue
        if any(x.match(k) for x in excluded for k in keys):
            continue
        if all_linear:
            hit = [ALL_LINEAR] if is_linear(node) and path != "lm_head" else []
        else:
            hit = [t for t in targets if any(_target_hits(t, k) for k in keys)]
            some_layers.update(t for t in hit if not all(_target_hits(t, k) for k in keys))
        if not hit:
            continue
        found_targets.update(hit)
        if not is_linear(node):
            not_linear += [(t, path, node.cls or "not Linear") for t in hit]
        elif in_layer:
            layer_linears.append((node.name, shape(node)))
        else:
            root_linears.append((path, shape(node)))
    return Matched(
        tuple(layer_linears), tuple(root_linears), tuple(layer_saved), tuple(root_saved),
        tuple(t for t in targets if t not in found_targets and not all_linear),
        tuple(n for n in saves if n not in found_saves), tuple(not_linear),
        tuple(sorted(some_layers)), tuple(saved_targets))


def _all_params(node: Node) -> list[Shape]:
    """Every parameter below a module (a tied parameter once, where it is listed)."""
    out = list(node.params)
    for child in node.children:
        out += _all_params(child) * child.repeat
    return out


def adapted_linears(g: Geometry, matched: Matched) -> list[tuple[str, Shape]]:
    """The adapted projections of one decoder layer, as (planner's name, (out, in)):
    transformers' names mapped back to the planner's (GPT-NeoX's query_key_value is
    qkv_proj) for the activation model; ``lm_head`` is counted with the root."""
    fam = FAMILIES.get(g.family)
    planned = {fam.projection_name(p): p for p in _PROJECTIONS} if fam else {}
    return [(planned.get(name, name), shape) for name, shape in matched.layer_linears]


def quantised_projections(g: Geometry) -> list[tuple[str, Shape]]:
    """The weights of one decoder layer that QLoRA stores in 4 bits, as (transformers'
    module name, (out, in)): every Linear projection, adapted or not (the planner's
    ``*_proj`` names; not the router, nor a Mixture of Experts' stacked experts, which
    are not Linear modules, nor lm_head, which is outside the layers)."""
    fam = FAMILIES.get(g.family)
    out = []
    for name, shape in g.layer_tensors():
        planned = _planned_name(name) if name.endswith(".weight") else ""
        if planned in _PROJECTIONS and len(shape) == 2 and ".experts." not in name:
            out.append((fam.projection_name(planned) if fam else planned, shape))
    return out


@dataclass(frozen=True)
class Adapters:
    """The LoRA of a job, in the planner's terms."""

    method: str
    r: int
    dropout: float
    # The adapted projections of one layer: (planner's name, (out, in)).
    linears: tuple[tuple[str, Shape], ...]
    matched: Matched  # what peft's rules match in the model (lint reads the misses)
    double_quant: bool
    merged: bool  # the final export merges the adapters into a full model

    @property
    def head(self) -> bool:
        """lm_head carries an adapter."""
        return any(path == "lm_head" for path, _ in self.matched.root_linears)

    @property
    def saves_head(self) -> bool:
        """lm_head is trained in full (modules_to_save)."""
        return self.saves_root("lm_head")

    def trained_norms(self, names: tuple[str, ...]) -> set[str]:
        """Which of a layer's norms (``names``) are trained in full (modules_to_save)."""
        return {name for name, _ in self.matched.layer_saved} & set(names)

    def saves_root(self, path: str) -> bool:
        """The module at ``path`` outside the layers is trained in full."""
        return any(saved == path for saved, _ in self.matched.root_saved)

    def saved_modules(self, num_layers: int) -> int:
        """How many modules peft trains in full (a module to save in every layer counts
        once per layer)."""
        per_layer = {name for name, _ in self.matched.layer_saved}
        return len(per_layer) * num_layers + len({path for path, _ in self.matched.root_saved})

    def layer_shapes(self) -> list[Shape]:
        """A (r × in) and B (out × r) of each adapted projection of one layer, and the
        parameters of the layer's modules to save (trained copies)."""
        adapters = [s for _, (out, into) in self.linears for s in ((self.r, into), (out, self.r))]
        return adapters + [s for _, s in self.matched.layer_saved]

    def root_shapes(self) -> list[Shape]:
        """Trainable tensors outside the layers: adapters (lm_head's), full copies of the
        modules to save."""
        adapters = [s for _, (out, into) in self.matched.root_linears
                    for s in ((self.r, into), (out, self.r))]
        return adapters + [s for _, s in self.matched.root_saved]


def targets_of(spec: JobSpec, config: dict[str, Any] | None) -> tuple[str, ...]:
    """The modules the spec's LoRA adapts, by transformers' names (`peft.target_modules`,
    else the family's projections; empty without a `peft` section, or for a model whose
    family has no default targets, which FS141 reports)."""
    peft = spec.peft
    return () if peft is None else tuple(lora_targets(peft.target_modules, config))


def adapters_of(spec: JobSpec, g: Geometry, targets: tuple[str, ...]) -> Adapters | None:
    """The spec's LoRA on geometry ``g`` (None without a `peft` section): what peft
    matches in the model's module tree (the built one of an introspected model, else
    the family's)."""
    peft = spec.peft
    if peft is None:
        return None
    tree = g.built_tree if g.built_tree is not None else geometry_tree(g)
    matched = peft_matches(tree, g, targets, tuple(peft.modules_to_save))
    return Adapters(
        method=peft.method, r=peft.r, dropout=peft.dropout,
        linears=tuple(adapted_linears(g, matched)), matched=matched,
        double_quant=peft.quantization.double_quant, merged=peft.merged,
    )
