"""Geometry of a causal LM without an analytic family, read off the model itself.

transformers builds the model on the meta device (no memory): its parameters give the
exact counts and shard shapes, its ``_no_split_modules`` the decoder layers, and its
config the widths the activation model reads (counted as a Llama-style decoder). Needs
the training extra (torch and transformers); imported only when a plan asks for it, so
`validate` stays torch-free.
"""

from __future__ import annotations

import re
from typing import Any

from fsdpspec.catalog.families import attention_picked
from fsdpspec.job.experts import expert_module_patterns
from fsdpspec.job.geometry import Geometry, GeometryError, UnknownFamilyError
from fsdpspec.job.quiet_libraries import quiet
from fsdpspec.job.tree import Node


class NotIntrospected(UnknownFamilyError):
    """A model without an analytic family, and no torch to build it on the meta device."""

# Building a model on the meta device costs time per layer (a 3000-layer config took
# over 15 s); no causal LM has more than a few hundred layers.
MAX_INTROSPECTED_LAYERS = 1024


def introspected_geometry(config: dict[str, Any]) -> Geometry:
    """Build ``config`` on the meta device and read its parameters and layers."""
    model_type = config.get("model_type")
    quiet()
    try:
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM
    except ImportError:
        raise NotIntrospected(f"model_type {model_type!r} has no analytic family; install "
                              "fsdpspec[train] to plan it from the model built on the meta "
                              "device") from None
    try:
        hf = AutoConfig.for_model(**config)
        _check_layer_count(hf.get_text_config(), model_type)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(hf)
    except GeometryError:
        raise
    except Exception as exc:  # transformers raises many kinds for a config it rejects
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise GeometryError(f"model_type {model_type!r}: transformers cannot build it: "
                            f"{first}") from None
    try:
        return _geometry_of(model, hf.get_text_config(), str(model_type))
    except (TypeError, ValueError, ZeroDivisionError) as exc:  # a width it lacks
        raise GeometryError(f"model_type {model_type!r}: cannot read its widths off the "
                            f"built model: {exc}") from None


def _check_layer_count(text_config: Any, model_type: Any) -> None:
    layers = getattr(text_config, "num_hidden_layers", None)
    if isinstance(layers, int) and layers > MAX_INTROSPECTED_LAYERS:
        raise GeometryError(f"FS043 model_type {model_type!r} declares {layers} layers; a "
                            f"model without an analytic family is built on the meta device "
                            f"to be planned, with at most {MAX_INTROSPECTED_LAYERS} layers")


def _layers(model: Any) -> list[Any]:
    names = set(getattr(model, "_no_split_modules", None) or ())
    layers = [m for m in model.modules() if type(m).__name__ in names]
    if not layers:
        raise GeometryError(f"{type(model).__name__} declares no decoder layer class "
                            "(_no_split_modules); set fsdp.transformer_layer_cls")
    return layers


def _experts_module(model: Any) -> re.Pattern[str] | None:
    """The module paths its config's ``base_model_ep_plan`` names experts (its patterns
    are below the base model: matched as a suffix, ``*`` a layer index); None without."""
    config = getattr(model, "config", None)
    configs = [config, *([config.get_text_config()] if hasattr(config, "get_text_config")
                         else [])]
    patterns = {p for c in configs
                for p in expert_module_patterns(getattr(type(c), "base_model_ep_plan", None))}
    if not patterns:
        return None
    pieces = (re.escape(p).replace(r"\*", r"\d+") for p in sorted(patterns))
    return re.compile(rf"(?:^|\.)(?:{'|'.join(pieces)})$")


def module_tree(model: Any) -> Node:
    """The module tree of a built ``nn.Module`` (meta or not): classes, own parameters
    (a parameter shared by several modules listed under the first), children, and the
    experts modules its config names (`fsdpspec.job.experts`)."""
    from torch import nn

    holders: dict[int, list[int]] = {}
    for module in model.modules():
        for param in module._parameters.values():
            if param is not None:
                holders.setdefault(id(param), []).append(id(module))
    tied = {m for found in holders.values() if len(found) > 1 for m in found}
    experts = _experts_module(model)
    seen: set[int] = set()

    def node(name: str, path: str, module: Any) -> Node:
        own = []
        for param in module._parameters.values():
            if param is not None and id(param) not in seen:
                seen.add(id(param))
                own.append(tuple(param.shape))
        children = tuple(node(n, f"{path}.{n}" if path else n, c)
                         for n, c in module.named_children())
        return Node(name, type(module).__name__, tuple(own), children,
                    container=isinstance(module, (nn.ModuleList, nn.ModuleDict)),
                    tied=id(module) in tied, linear=isinstance(module, nn.Linear),
                    experts=bool(experts and experts.search(path)))

    return node("", "", model)


def _config_value(c: Any, name: str) -> Any:
    """A config attribute; one that varies per layer (Gemma 4's ``per_layer_config``,
    which transformers refuses to read globally) is its largest layer's value, so the
    activation model counts the widest layer."""
    try:
        return getattr(c, name, None)
    except Exception:  # transformers' AmbiguousGlobalPerLayerAttributeError, among others
        layers = getattr(c, "per_layer_config", None) or ()
        values = [getattr(layers[i], name, None) for i in range(len(layers))]
        return max((v for v in values if isinstance(v, int)), default=None)


def _geometry_of(model: Any, c: Any, model_type: str) -> Geometry:
    layers = _layers(model)
    # Layers that differ (dense first layers, say): the activation model reads the
    # largest; the units and the count are exact.
    largest = max(layers, key=lambda m: sum(p.numel() for p in m.parameters()))
    layer = tuple((n, tuple(p.shape)) for n, p in largest.named_parameters())
    in_layers = {id(p) for m in layers for p in m.parameters()}
    root = tuple((n, tuple(p.shape)) for n, p in model.named_parameters()
                 if id(p) not in in_layers)

    def value(name: str, default: Any = None) -> Any:
        return _config_value(c, name) or default

    hidden, heads = int(value("hidden_size")), int(value("num_attention_heads"))
    return Geometry(
        family=model_type,
        hidden_size=hidden,
        intermediate_size=int(value("intermediate_size", 4 * hidden)),
        num_layers=len(layers),
        num_heads=heads,
        num_kv_heads=int(value("num_key_value_heads", heads)),
        head_dim=int(value("head_dim", hidden // heads)),
        vocab_size=int(value("vocab_size")),
        tie_word_embeddings=bool(value("tie_word_embeddings", False)),
        max_position_embeddings=int(value("max_position_embeddings", 4096)),
        auto_attention=attention_picked(supports_sdpa=bool(model._supports_sdpa)),
        built_layer=layer,
        built_root=root,
        built_params=sum(p.numel() for p in model.parameters()),
        built_active_params=_active_params(model, value("num_experts_per_tok")),
        built_tree=module_tree(model),
        built_layer_classes=tuple(sorted(model._no_split_modules or ())),
        peft_expert_names=peft_expert_names(model_type),
    )


def _active_params(model: Any, routed: Any) -> int:
    """The parameters one token passes through: all, less the share of each experts
    module's stacked tensors (the expert index on dim 0) that its router skips. A model
    whose config names no experts module (Llama 4 runs every expert on every token,
    scaled by its router score) passes through all."""
    experts = _experts_module(model)
    total = sum(p.numel() for p in model.parameters())
    if experts is None or not isinstance(routed, int):
        return total
    skipped = sum(p.numel() // p.shape[0] * (p.shape[0] - routed)
                  for path, module in model.named_modules() if experts.search(path)
                  for p in module.parameters(recurse=False))
    return total - skipped


def peft_expert_names(model_type: str) -> tuple[str, ...]:
    """transformers 4's names of a Mixture of Experts' expert projections and router
    that peft maps onto transformers 5's stacked expert tensors for this model_type
    (peft's own table, `transformers_weight_conversion`): a target naming one, or
    all-linear, makes peft adapt the experts. Empty without peft, or for a model peft
    does not convert."""
    quiet()
    try:
        from peft.utils import transformers_weight_conversion as conversion
        from transformers.conversion_mapping import get_checkpoint_conversion_mapping
    except ImportError:
        return ()
    if get_checkpoint_conversion_mapping(model_type) is None:
        return ()
    base = conversion._MODEL_TO_CONVERSION_PATTERN.get(model_type)
    if base not in conversion._MOE_FUSED_TARGETS:
        return ()
    return tuple(conversion._MOE_TARGET_MODULE_MAPPING.get(base, {}))
