"""A job's LoRA in the planner's terms: which modules carry adapters and which are
trained in full, as peft's own matching rules pick them out of the model's module tree
(the family's analytic tree, or the tree an introspected model built), and the trainable
tensors' shapes (the memory terms are `fsdpspec.plan.lora`'). The engine hands peft
the same names, so the plan and the adapted model agree by construction
(tests/plan/test_lora_peft.py holds both against ``peft.get_peft_model``)."""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fsdpspec.catalog.config_source import lora_targets
from fsdpspec.catalog.families import FAMILIES
from fsdpspec.job.geometry import Geometry, Shape
from fsdpspec.job.tree import LAYER, Node, names_module
from fsdpspec.job.units import geometry_tree, renamed_tensor
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
    # How many decoder layers carry the per-layer lists (a built model's layers that
    # match otherwise, a vision tower's say, are listed with the root by path).
    layer_count: int = 0
    # `target_parameters`: (parameter path below a layer, shape) adapted in every layer;
    # (parameter path, shape) outside the layers or in some layers only; the names that
    # match no parameter.
    layer_params: tuple[tuple[str, Shape], ...] = ()
    root_params: tuple[tuple[str, Shape], ...] = ()
    unmatched_parameters: tuple[str, ...] = ()
    # A regular expression on a model peft converts from transformers 4's names: the
    # leaf names of what it matched, which peft adapts instead (in every layer).
    resolved_targets: tuple[str, ...] = ()


def _entries(tree: Node) -> list[tuple[str, Node, bool]]:
    """(path, node, inside the decoder layers) of every module of an analytic tree, the
    decoder layers as its one template child ``*``."""
    out: list[tuple[str, Node, bool]] = []

    def walk(node: Node, path: str, in_layer: bool) -> None:
        in_layer = in_layer or node.name == LAYER
        out.append((path, node, in_layer))
        for child in node.children:
            walk(child, f"{path}.{child.name}" if path else child.name, in_layer)

    walk(tree, "", False)
    return out


def _built_entries(tree: Node, layer_classes: tuple[str, ...]
                   ) -> tuple[list[tuple[str, Node, int]], list[tuple[str, Node]]]:
    """(real path, node, index of the decoder layer holding it or -1) of every module of
    a built tree, every layer walked (a multimodal model's vision layers, a Mixture of
    Experts' dense first layers: layers need not be alike), and (path, node) of the
    layers."""
    out: list[tuple[str, Node, int]] = []
    layers: list[tuple[str, Node]] = []

    def walk(node: Node, path: str, layer: int) -> None:
        if layer < 0 and node.cls in layer_classes:
            layer = len(layers)
            layers.append((path, node))
        out.append((path, node, layer))
        for child in node.children:
            walk(child, f"{path}.{child.name}" if path else child.name, layer)

    walk(tree, "", -1)
    return out, layers


def _paths(path: str, in_layer: bool, num_layers: int, indexed: bool) -> list[str]:
    """The real paths a template path stands for (one, when no name reads the index)."""
    if not in_layer:
        return [path]
    return [path.replace(LAYER, str(i), 1) for i in (range(num_layers) if indexed else (0,))]


def linear_test(g: Geometry, *, conv1d: bool) -> Callable[[Node], bool]:
    """Whether a node of ``g``'s module tree is an nn.Linear (``conv1d``: or transformers'
    Conv1D, GPT-2's, which peft's all-linear takes too): a built tree says so; in a
    family's analytic tree, its projections, the head and a Linear router are."""
    fam = FAMILIES.get(g.family)
    leaves = set(fam.lora_targets) | {"lm_head"} if fam else set()
    if fam and fam.moe and fam.moe.router_linear:
        leaves.add(fam.moe.router)

    def is_linear(node: Node) -> bool:
        if g.introspected:
            return node.linear or (conv1d and node.cls == "Conv1D")
        return node.cls == "Linear" or (node.name in leaves and not node.children)

    return is_linear


def peft_matches(tree: Node, g: Geometry, targets: tuple[str, ...],
                 saves: tuple[str, ...], *, regex: bool = False) -> Matched:
    """The modules peft's rules pick for ``targets`` and ``saves`` (`modules_to_save`)
    in ``tree``, torch-free: a target matches a module whose path is the name or ends in
    ``.name`` (``regex``: the one target is a regular expression the whole path must
    match; ``all-linear``: every Linear but the output head), except inside a module to
    save; a module to save is every module whose path ends in the name (no dot needed:
    ``norm`` saves ``input_layernorm`` too), copied whole. A built tree (an introspected
    model) is matched at every real path; its largest layer's matches are the per-layer
    lists, counted for every layer that matches alike."""
    is_linear = linear_test(g, conv1d=True)
    indexed = regex or any(_INDEX.search(name) for name in (*targets, *saves))

    def names(target: str, path: str) -> bool:
        return bool(re.fullmatch(target, path)) if regex else names_module(target, path)
    if g.introspected:
        built, layers = _built_entries(tree, g.built_layer_classes)
        entries = [(path, node, layer, [path]) for path, node, layer in built]
        layer_paths, layer_nodes = [p for p, _ in layers], [n for _, n in layers]
        sizes = [sum(math.prod(s) for s in _all_params(n)) for n in layer_nodes]
        template = sizes.index(max(sizes)) if sizes else 0
    else:
        entries = [(path, node, 0 if in_layer else -1,
                    _paths(path, in_layer, g.num_layers, indexed))
                   for path, node, in_layer in _entries(tree)]
        layer_nodes, layer_paths, template = [], [], 0
    excluded = [re.compile(rf"(^|.*\.){name}($|\..*)") for name in saves]
    all_linear = targets == (ALL_LINEAR,)

    def shape(node: Node) -> Shape:
        return node.params[0] if node.params else (g.vocab_size, g.hidden_size)  # tied head

    hits: list[_Hit] = []
    found_targets, found_saves, not_linear, some_layers = set(), set(), [], set()
    target_layers: dict[str, set[int]] = {}
    saved_below: list[str] = []
    saved_targets: list[tuple[str, str]] = []
    for path, node, layer, keys in entries:
        if not path or path.endswith(f".{LAYER}") or node.container:
            continue
        if saved_below and any(path.startswith(f"{s}.") for s in saved_below):
            continue  # inside a copied module: copied with it
        save = [n for n in saves if all(k.endswith(n) for k in keys)]
        if save:
            found_saves.update(save)
            both = [t for t in targets if any(names(t, k) for k in keys)]
            saved_targets += [(t, save[0]) for t in both]
            found_targets.update(both)  # FS145's, not a target that matches nothing
            saved_below.append(path)
            # A tied head holds the embedding's weight, listed under the embedding.
            params = _all_params(node) or ([shape(node)] if node.tied else [])
            hits.append((path, node.name, layer, True, params))
            continue
        if any(x.match(k) for x in excluded for k in keys):
            continue
        if all_linear:
            hit = [ALL_LINEAR] if is_linear(node) and path != "lm_head" else []
        else:
            hit = [t for t in targets if any(names(t, k) for k in keys)]
            some_layers.update(t for t in hit if not all(names(t, k) for k in keys))
        if not hit:
            continue
        found_targets.update(hit)
        for t in hit:
            target_layers.setdefault(t, set()).add(layer)
        picked = [k for k in keys if any(names(t, k) for t in hit)]
        if not is_linear(node):
            not_linear += [(t, path, node.cls or "not Linear") for t in hit]
        elif regex and len(picked) < len(keys):  # some layers of a template: by path
            hits += [(k, node.name, -1, False, [shape(node)]) for k in picked]
        else:
            hits.append((path, node.name, layer, False, [shape(node)]))
    if layer_nodes:
        some_layers.update(_in_some_layers(target_layers, layer_nodes))
    per_layer, root, layer_count = _by_layer(hits, template, layer_paths, g.num_layers)
    return Matched(
        tuple((name, s) for _, name, _, saved, shapes in per_layer if not saved for s in shapes),
        tuple((path, s) for path, _, _, saved, shapes in root if not saved for s in shapes),
        tuple((name, s) for _, name, _, saved, shapes in per_layer if saved for s in shapes),
        tuple((path, s) for path, _, _, saved, shapes in root if saved for s in shapes),
        tuple(t for t in targets if t not in found_targets and not all_linear),
        tuple(n for n in saves if n not in found_saves), tuple(not_linear),
        tuple(sorted(some_layers)), tuple(saved_targets), layer_count)


def parameter_matches(g: Geometry, names: tuple[str, ...]) -> Matched:
    """The parameters peft's `target_parameters` rule picks for ``names`` in an
    analytic geometry (tuners_utils ``_inject_parameters``): a parameter whose path is
    the name or ends in ``.name``. One adapted in every layer is listed per layer; one
    outside the layers, or in some layers only, by its path."""
    fam = FAMILIES.get(g.family)
    renames = fam.module_names if fam else {}

    def hit(path: str) -> bool:
        return any(path == n or path.endswith(f".{n}") for n in names)

    found: set[str] = set()
    layer, root = [], []
    for name, shape in g.layer_tensors():
        paths = [renamed_tensor(f"model.layers.{i}.{name}", renames)
                 for i in range(g.num_layers)]
        hits = [path for path in paths if hit(path)]
        found.update(n for n in names for path in hits
                     if path == n or path.endswith(f".{n}"))
        if len(hits) == len(paths):
            layer.append((name, shape))
        else:
            root += [(path, shape) for path in hits]
    for name, shape in g.root_tensors():
        path = renamed_tensor(name, renames)
        if hit(path):
            found.update(n for n in names if path == n or path.endswith(f".{n}"))
            root.append((path, shape))
    return Matched(layer_params=tuple(layer), root_params=tuple(root),
                   unmatched_parameters=tuple(n for n in names if n not in found))


def parameter_adapter(shape: Shape, r: int, *, input_major: bool) -> list[Shape]:
    """A and B of peft's ParamWrapper on a parameter of ``shape``: one rank-r pair per
    expert of a stacked (E, out, in) tensor (``input_major``: (E, in, out), gpt-oss's
    ``is_transposed``), A (r·E × in) and B (out × r·E); a 2-D weight is one Linear's."""
    if len(shape) == 2:
        out, into = shape
        return [(r, into), (out, r)]
    experts, first, second = shape
    into, out = (first, second) if input_major else (second, first)
    return [(r * experts, into), (out, r * experts)]


def _in_some_layers(target_layers: dict[str, set[int]], layers: list[Node]) -> set[str]:
    """Targets that match in some layers of a class but not in all of them."""
    out = set()
    for target, hit in target_layers.items():
        for cls in {n.cls for n in layers}:
            alike = {i for i, n in enumerate(layers) if n.cls == cls}
            if hit & alike and not alike <= hit:
                out.add(target)
    return out


# (path, leaf name, layer or -1, saved, shapes) of a module peft adapts or copies.
_Hit = tuple[str, str, int, bool, list[Shape]]


def _by_layer(hits: list[_Hit], template: int, layer_paths: list[str], num_layers: int
              ) -> tuple[list[_Hit], list[_Hit], int]:
    """The template layer's hits; the root's, with those of every built layer that
    matches otherwise than the template (``layer_paths``: a built tree's layers); how
    many layers match as the template does."""
    if not layer_paths:
        return [h for h in hits if h[2] == 0], [h for h in hits if h[2] < 0], num_layers

    def below(layer: int) -> list[tuple[str, bool, list[Shape]]]:
        cut = len(layer_paths[layer]) + 1
        return [(path[cut:], saved, shapes) for path, _, at, saved, shapes in hits
                if at == layer]

    alike = {i for i in range(len(layer_paths)) if below(i) == below(template)}
    return ([h for h in hits if h[2] == template],
            [h for h in hits if h[2] < 0 or h[2] not in alike], len(alike))


def _all_params(node: Node) -> list[Shape]:
    """Every parameter below a module (a tied parameter once, where it is listed)."""
    out = list(node.params)
    for child in node.children:
        out += _all_params(child) * child.repeat
    return out


def adapted_linears(g: Geometry, matched: Matched, *, saved: bool = False
                    ) -> list[tuple[str, Shape]]:
    """The adapted projections of one decoder layer (``saved``: the modules trained in
    full), as (planner's name, (out, in)): transformers' names mapped back to the
    planner's (GPT-NeoX's query_key_value is qkv_proj) for the activation model;
    ``lm_head`` is counted with the root."""
    fam = FAMILIES.get(g.family)
    planned = {fam.projection_name(p): p for p in _PROJECTIONS} if fam else {}
    found = matched.layer_saved if saved else matched.layer_linears
    return [(planned.get(name, name), shape) for name, shape in found]


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
    # The stacked experts are stored (E, in, out): peft's ParamWrapper reads them so.
    input_major: bool = False

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

    @property
    def layers(self) -> int:
        """How many decoder layers carry `layer_shapes` (the others' are the root's)."""
        return self.matched.layer_count

    def saved_modules(self) -> int:
        """How many modules peft trains in full (a module to save in every layer counts
        once per layer)."""
        per_layer = {name for name, _ in self.matched.layer_saved}
        return len(per_layer) * self.layers + len({path for path, _ in self.matched.root_saved})

    def layer_shapes(self) -> list[Shape]:
        """A (r × in) and B (out × r) of each adapted projection of one layer, and the
        parameters of the layer's modules to save (trained copies)."""
        adapters = [s for _, (out, into) in self.linears for s in ((self.r, into), (out, self.r))]
        return (adapters + self._parameter_adapters(self.matched.layer_params)
                + [s for _, s in self.matched.layer_saved])

    def _parameter_adapters(self, params: tuple[tuple[str, Shape], ...]) -> list[Shape]:
        return [s for _, shape in params
                for s in parameter_adapter(shape, self.r, input_major=self.input_major)]

    def root_shapes(self) -> list[Shape]:
        """Trainable tensors outside the layers: adapters (lm_head's), full copies of the
        modules to save."""
        adapters = [s for _, (out, into) in self.matched.root_linears
                    for s in ((self.r, into), (out, self.r))]
        return (adapters + self._parameter_adapters(self.matched.root_params)
                + [s for _, s in self.matched.root_saved])


def targets_of(spec: JobSpec, config: dict[str, Any] | None) -> tuple[str, ...]:
    """The modules the spec's LoRA adapts, by transformers' names (`peft.target_modules`,
    a regular expression as its one entry; else the family's projections, or none when
    `target_parameters` is set, as peft leaves modules alone then; empty without a
    `peft` section, or for a model whose family has no default targets, which FS141
    reports)."""
    peft = spec.peft
    if peft is None:
        return ()
    declared = peft.target_modules
    if isinstance(declared, str):
        return (declared,)
    return () if not declared and peft.target_parameters else tuple(
        lora_targets(declared, config))


def _converted(g: Geometry) -> bool:
    """peft rewrites the config of this model (transformers 4's expert names)."""
    fam = FAMILIES.get(g.family)
    return bool(fam.moe.peft_expert_names if fam and fam.moe else
                not fam and g.peft_expert_names)


def _matched_paths(matched: Matched) -> list[str]:
    return [*(name for name, _ in matched.layer_linears),
            *(path for path, _ in matched.root_linears),
            *(path for _, path, _ in matched.not_linear)]


def regex_targets(spec: JobSpec) -> bool:
    """`peft.target_modules` is a regular expression (peft full-matches a string)."""
    return spec.peft is not None and isinstance(spec.peft.target_modules, str)


def adapters_of(spec: JobSpec, g: Geometry, targets: tuple[str, ...]) -> Adapters | None:
    """The spec's LoRA on geometry ``g`` (None without a `peft` section): what peft
    matches in the model's module tree (the built one of an introspected model, else
    the family's)."""
    peft = spec.peft
    if peft is None:
        return None
    tree = g.built_tree if g.built_tree is not None else geometry_tree(g)
    saves, regex = tuple(peft.modules_to_save), regex_targets(spec)
    matched = peft_matches(tree, g, targets, saves, regex=regex)
    if regex and targets != (ALL_LINEAR,) and _converted(g):
        # peft's transformers_weight_conversion resolves the expression to the leaf
        # names it matched, then matches those names as a list.
        leaves = tuple(sorted({path.rsplit(".", 1)[-1] for path in _matched_paths(matched)}))
        matched = dataclasses.replace(peft_matches(tree, g, leaves, saves),
                                      resolved_targets=leaves)
    if peft.target_parameters and not g.introspected:  # a built model's: FS146
        params = parameter_matches(g, tuple(peft.target_parameters))
        matched = dataclasses.replace(
            matched, layer_params=params.layer_params, root_params=params.root_params,
            unmatched_parameters=params.unmatched_parameters)
    return Adapters(
        method=peft.method, r=peft.r, dropout=peft.dropout,
        linears=tuple(adapted_linears(g, matched)), matched=matched,
        double_quant=peft.quantization.double_quant, merged=peft.merged,
        input_major=bool(g.experts and g.experts.block.input_major),
    )
