"""Model geometry from a Hugging Face-style config dict, without torch.

Every parameter tensor a registered family (fsdpspec.catalog.families) builds is listed
with its shape, so that the planner can count parameters exactly (as transformers does)
and size each FSDP shard with the padding FSDP adds. Missing config keys take the
defaults of the family's transformers config class, as ``AutoConfig.for_model`` would.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

from fsdpspec.catalog.families import CUSTOM, EXPERTS_MODULE, NORMS, Bias, Family, Moe, family
from fsdpspec.job.tree import Node, Shape

_COMMON_DEFAULTS = {"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
                    "max_position_embeddings": 4096}


class GeometryError(ValueError):
    """A config that does not describe a model the planner can count (one line)."""


class UnknownFamilyError(GeometryError):
    """A model without an analytic geometry: a model_type outside the registry, or a
    layout its family's formulas do not cover (the planner may introspect it)."""


@dataclass(frozen=True)
class Experts:
    """The Mixture-of-Experts block of every layer: ``count`` experts of MLP width
    ``width``, ``active`` of them routed per token; ``block``: the family's router and
    biases, and what each routed token saves (declared once, in the family registry)."""

    count: int
    active: int
    width: int
    block: Moe


@dataclass(frozen=True)
class Geometry:
    """Shape of a decoder-only transformer, in the terms the memory model needs."""

    family: str
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    tie_word_embeddings: bool
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    mlp: str = "gated"
    fused_qkv: bool = False
    norm_bias: bool = False
    norm_names: tuple[str, ...] = NORMS["pre"]
    parallel_residual: bool = False
    head_major_query: bool = False
    qk_norm: str | None = None
    fp32_norm: bool = False
    attention_sinks: bool = False
    # Dropout masks (a bool per element of the hidden states) kept for backward: per
    # layer (its sublayers' outputs), and on the embeddings.
    layer_dropout_masks: int = 0
    embedding_dropout_mask: bool = False
    lm_head_bias: bool = False
    experts: Experts | None = None
    sliding_window: int | None = None
    # Layers whose attention is limited to the window (all of them unless the family
    # mixes sliding and global layers).
    sliding_layers: int = 0
    attn_softcap: float | None = None
    final_softcap: float | None = None
    max_position_embeddings: int = 4096
    # What `model.attention: auto` builds: what transformers picks for the model class
    # (`catalog.families.attention_picked`).
    auto_attention: str = "sdpa"
    # Read off a model built on the meta device (no analytic family): one layer's and
    # the root's parameters, as built.
    built_layer: tuple[tuple[str, Shape], ...] | None = None
    built_root: tuple[tuple[str, Shape], ...] | None = None
    # Its exact count, and its module tree (what the wrap policy reads).
    built_params: int | None = None
    # What one token passes through: the count less the routed experts it skips.
    built_active_params: int | None = None
    built_tree: Node | None = None
    # The decoder layer classes it declares (``_no_split_modules``).
    built_layer_classes: tuple[str, ...] = ()
    # The target names peft maps onto its stacked experts (`introspect.peft_expert_names`).
    peft_expert_names: tuple[str, ...] = ()

    @property
    def introspected(self) -> bool:
        return self.built_layer is not None

    @property
    def q_width(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_width(self) -> int:
        return self.num_kv_heads * self.head_dim

    @property
    def norms_per_layer(self) -> int:
        return len(self.norm_names)

    def layer_tensors(self) -> list[tuple[str, Shape]]:
        """The parameters of one decoder layer, as transformers names and shapes them."""
        if self.built_layer is not None:
            return list(self.built_layer)
        mlp = _expert_tensors(self) if self.experts else _mlp_tensors(self)
        return _attention_tensors(self) + mlp + _norm_tensors(self, self.norm_names)

    def root_tensors(self) -> list[tuple[str, Shape]]:
        """Parameters outside the layers: embeddings, final norm, and an untied lm_head."""
        if self.built_root is not None:
            return list(self.built_root)
        out = [("model.embed_tokens.weight", (self.vocab_size, self.hidden_size)),
               *_norm_tensors(self, ("model.norm",))]
        if not self.tie_word_embeddings:
            out.append(("lm_head.weight", (self.vocab_size, self.hidden_size)))
        if self.lm_head_bias:
            out.append(("lm_head.bias", (self.vocab_size,)))
        return out

    # Cached: `fsdpspec tune` plans thousands of candidates of one geometry.
    @functools.cached_property
    def layer_params(self) -> int:
        return sum(math.prod(s) for _, s in self.layer_tensors())

    @functools.cached_property
    def root_params(self) -> int:
        return sum(math.prod(s) for _, s in self.root_tensors())

    @functools.cached_property
    def total_params(self) -> int:
        """Parameters transformers instantiates (tied embeddings counted once)."""
        if self.built_params is not None:
            return self.built_params
        return self.num_layers * self.layer_params + self.root_params

    @functools.cached_property
    def active_params(self) -> int:
        """Parameters one token passes through: all, less the experts it is not routed to."""
        if self.built_active_params is not None:
            return self.built_active_params
        if self.experts is None:
            return self.total_params
        e = self.experts
        per_expert = _expert_numel(self) // e.count
        return self.total_params - self.num_layers * (e.count - e.active) * per_expert

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def down_proj_numel(self) -> int:
        """The MLP's output projection (every expert's): the first gradient backward
        makes in a layer."""
        e = self.experts
        return self.hidden_size * (e.count * e.width if e else self.intermediate_size)

    @property
    def experts_numel(self) -> int:
        """Parameters of one layer's experts (0 for a dense model)."""
        return _expert_numel(self) if self.experts else 0


def _norm_tensors(g: Geometry, names: tuple[str, ...]) -> list[tuple[str, Shape]]:
    params = ("weight", "bias") if g.norm_bias else ("weight",)
    return [(f"{n}.{p}", (g.hidden_size,)) for n in names for p in params]


def _linear(name: str, out: int, into: int, bias: bool) -> list[tuple[str, Shape]]:
    return [(f"{name}.weight", (out, into))] + ([(f"{name}.bias", (out,))] if bias else [])


def _attention_tensors(g: Geometry) -> list[tuple[str, Shape]]:
    h, q, kv = g.hidden_size, g.q_width, g.kv_width
    if g.fused_qkv:
        out = _linear("self_attn.qkv_proj", q + 2 * kv, h, g.qkv_bias)
    else:
        out = [t for name, width in (("q_proj", q), ("k_proj", kv), ("v_proj", kv))
               for t in _linear(f"self_attn.{name}", width, h, g.qkv_bias)]
    out += _linear("self_attn.o_proj", h, q, g.o_bias)
    if g.qk_norm:
        widths = (g.head_dim, g.head_dim) if g.qk_norm == "head" else (q, kv)
        out += [("self_attn.q_norm.weight", (widths[0],)),
                ("self_attn.k_norm.weight", (widths[1],))]
    if g.attention_sinks:
        out.append(("self_attn.sinks", (g.num_heads,)))
    return out


def _mlp_tensors(g: Geometry) -> list[tuple[str, Shape]]:
    h, i, bias = g.hidden_size, g.intermediate_size, g.mlp_bias
    if g.mlp == "gated_fused":
        ins = _linear("mlp.gate_up_proj", 2 * i, h, bias)
    elif g.mlp == "plain":
        ins = _linear("mlp.up_proj", i, h, bias)
    else:
        ins = _linear("mlp.gate_proj", i, h, bias) + _linear("mlp.up_proj", i, h, bias)
    return ins + _linear("mlp.down_proj", h, i, bias)


def _expert_tensors(g: Geometry) -> list[tuple[str, Shape]]:
    """The router and the experts, stacked as one tensor per projection, the expert
    index on dim 0 (where FSDP2 shards them: `fsdpspec.job.experts`)."""
    e, h = g.experts, g.hidden_size
    assert e is not None
    out = _linear(f"mlp.{e.block.router}", e.count, h, e.block.router_bias)
    gate_up, down = (2 * e.width, h), (h, e.width)
    if e.block.input_major:
        gate_up, down = gate_up[::-1], down[::-1]
    out += [(f"{EXPERTS_MODULE}.gate_up_proj", (e.count, *gate_up)),
            (f"{EXPERTS_MODULE}.down_proj", (e.count, *down))]
    if e.block.expert_bias:
        out += [(f"{EXPERTS_MODULE}.gate_up_proj_bias", (e.count, 2 * e.width)),
                (f"{EXPERTS_MODULE}.down_proj_bias", (e.count, h))]
    return out


def _expert_numel(g: Geometry) -> int:
    return sum(math.prod(s) for n, s in _expert_tensors(g) if ".experts." in n)


def _positive_int(key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise GeometryError(f"config {key} must be a positive integer, got {value!r}")
    return value


def _bias(rule: Bias, merged: dict[str, Any]) -> bool:
    return bool(merged.get(rule, False)) if isinstance(rule, str) else rule


def analytic_family(config: dict[str, Any]) -> Family:
    """The family the planner counts ``config`` as; GeometryError when it has none."""
    model_type = config.get("model_type")
    found = CUSTOM if model_type == "custom" else family(model_type)
    if found is None:
        raise UnknownFamilyError(f"model_type {model_type!r} has no analytic family")
    return found


def geometry_from_config(config: dict[str, Any]) -> Geometry:
    """The geometry of an HF-style config dict (a preset, a local config.json, or a
    spec's `model.geometry` tagged ``model_type: custom``)."""
    fam = analytic_family(config)
    merged = _COMMON_DEFAULTS | fam.defaults | _with_aliases(fam, config)

    def num(key: str) -> int:
        return _positive_int(key, merged.get(key))

    hidden, heads = num("hidden_size"), num("num_attention_heads")
    kv_heads = (merged.get("num_key_value_heads") if fam.gqa else None) or heads
    if heads % kv_heads:
        raise GeometryError(f"config num_attention_heads {heads} is not a multiple of "
                            f"num_key_value_heads {kv_heads}")
    if not merged.get("head_dim") and hidden % heads:
        raise GeometryError(f"config hidden_size {hidden} is not a multiple of "
                            f"num_attention_heads {heads} (or set head_dim)")
    layers = num("num_hidden_layers")
    window = _window(fam, merged)
    return Geometry(
        family=fam.model_type,
        hidden_size=hidden,
        intermediate_size=num("intermediate_size"),
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=_positive_int("num_key_value_heads", kv_heads),
        head_dim=_positive_int("head_dim", merged.get("head_dim") or hidden // heads),
        vocab_size=num("vocab_size"),
        tie_word_embeddings=bool(merged.get("tie_word_embeddings")),
        qkv_bias=_bias(fam.qkv_bias, merged),
        o_bias=_bias(fam.o_bias, merged),
        mlp_bias=_bias(fam.mlp_bias, merged),
        mlp=fam.mlp,
        fused_qkv=fam.fused_qkv,
        norm_bias=fam.norm == "layernorm",
        norm_names=NORMS[fam.norm_placement],
        parallel_residual=_bias(fam.parallel_residual, merged),
        head_major_query=fam.head_major_query,
        qk_norm=fam.qk_norm,
        fp32_norm=fam.fp32_norm,
        attention_sinks=fam.attention_sinks,
        **_dropout_masks(fam, merged),
        lm_head_bias=_bias(fam.lm_head_bias, merged),
        experts=_experts(fam, merged),
        sliding_window=window,
        sliding_layers=_sliding_layers(fam, merged, layers) if window else 0,
        attn_softcap=merged.get("attn_logit_softcapping") if fam.softcap else None,
        final_softcap=merged.get("final_logit_softcapping") if fam.softcap else None,
        max_position_embeddings=num("max_position_embeddings"),
        auto_attention=fam.auto_attention,
    )


def _dropout_masks(fam: Family, merged: dict[str, Any]) -> dict[str, Any]:
    """The Geometry's dropout-mask fields: a mask for every dropout whose rate is not 0."""
    if fam.hidden_dropout is None:
        return {}
    layer_key, embedding_key = fam.hidden_dropout
    return {"layer_dropout_masks": 2 if merged.get(layer_key) else 0,
            "embedding_dropout_mask": bool(embedding_key and merged.get(embedding_key))}


def _with_aliases(fam: Family, config: dict[str, Any]) -> dict[str, Any]:
    """``config`` with each attribute the family's config class aliases under both names,
    as transformers reads it (a key written under either name wins over the defaults)."""
    out = dict(config)
    for alias, stored in fam.aliases.items():
        if stored in config:
            out[alias] = config[stored]
        elif alias in config:
            out[stored] = config[alias]
    return out


def _experts(fam: Family, merged: dict[str, Any]) -> Experts | None:
    if fam.moe is None:
        return None
    m = fam.moe
    # Dense layers between expert layers: planned from the model built on the meta device.
    for key in ("mlp_only_layers", "first_k_dense_replace"):
        if merged.get(key):
            raise UnknownFamilyError(f"config {key} mixes dense and expert layers, which "
                                     "the analytic planner does not count")
    if merged.get("decoder_sparse_step", 1) != 1:
        raise UnknownFamilyError("config decoder_sparse_step mixes dense and expert layers, "
                                 "which the analytic planner does not count")
    count = _positive_int(m.experts_key, merged.get(m.experts_key))
    return Experts(count=count, active=_positive_int("num_experts_per_tok",
                                                     merged.get("num_experts_per_tok")),
                   width=_positive_int(m.width_key, merged.get(m.width_key)),
                   block=m)


def _window(fam: Family, merged: dict[str, Any]) -> int | None:
    """The attention window, when the family's attention honours `sliding_window`
    (Qwen 2/3 only with `use_sliding_window`; Llama and Gemma ignore the key); 0
    disables it, as in transformers' masks."""
    if fam.window == "never" or (fam.window == "flag" and not merged.get("use_sliding_window")):
        return None
    return merged.get("sliding_window") or None  # 0, like null, means no window


def _sliding_layers(fam: Family, merged: dict[str, Any], layers: int) -> int:
    """Layers attending within the window: those `layer_types` marks sliding, or by
    the family's default pattern (every n-th layer global)."""
    if fam.window != "layer_types":
        return layers
    types = merged.get("layer_types")
    if isinstance(types, list):
        return sum(1 for t in types[:layers] if t == "sliding_attention")
    pattern = merged.get("sliding_window_pattern") or 1
    return layers - layers // pattern
