"""Model geometry from a Hugging Face-style config dict, without torch.

Every parameter tensor the supported families build is listed with its shape, so that
the planner can count parameters exactly (as transformers does) and size each FSDP shard
with the padding FSDP adds. Missing config keys take the defaults of the family's
transformers config class, as ``AutoConfig.for_model`` would.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

Shape = tuple[int, ...]

# Defaults of each family's transformers config class for the keys that change geometry.
_FAMILY_DEFAULTS: dict[str, dict[str, Any]] = {
    "llama": {"intermediate_size": 11008, "num_key_value_heads": None, "vocab_size": 32000,
              "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False},
    "mistral": {"intermediate_size": 14336, "num_key_value_heads": 8, "vocab_size": 32000,
                "tie_word_embeddings": False, "sliding_window": 4096},
    "qwen2": {"intermediate_size": 22016, "num_key_value_heads": 32, "vocab_size": 151936,
              "tie_word_embeddings": False},
    "qwen3": {"intermediate_size": 22016, "num_key_value_heads": 32, "vocab_size": 151936,
              "tie_word_embeddings": False, "attention_bias": False, "head_dim": 128},
    "gemma": {"hidden_size": 3072, "intermediate_size": 24576, "num_hidden_layers": 28,
              "num_attention_heads": 16, "num_key_value_heads": 16, "head_dim": 256,
              "vocab_size": 256000, "tie_word_embeddings": True, "attention_bias": False},
    "gemma2": {"hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
               "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
               "vocab_size": 256000, "tie_word_embeddings": True, "attention_bias": False,
               "sliding_window": 4096, "attn_logit_softcapping": 50.0,
               "final_logit_softcapping": 30.0},
    "phi3": {"hidden_size": 3072, "intermediate_size": 8192, "num_hidden_layers": 32,
             "num_attention_heads": 32, "num_key_value_heads": None, "vocab_size": 32064,
             "tie_word_embeddings": False},
    # A factory model described by `model.geometry`: counted as a Llama-style decoder.
    "custom": {"tie_word_embeddings": False, "attention_bias": False},
}
# Families whose attention projections take `attention_bias` (q, k, v and o alike);
# Qwen2 always biases q/k/v and never o; Mistral and Phi-3 never bias.
_CONFIGURABLE_BIAS = ("llama", "qwen3", "gemma", "gemma2", "custom")
_COMMON_DEFAULTS = {"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
                    "max_position_embeddings": 4096}


class GeometryError(ValueError):
    """A config that does not describe a model the planner can count (one line)."""


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
    qk_norm: bool = False
    fused_projections: bool = False
    norms_per_layer: int = 2
    sliding_window: int | None = None
    attn_softcap: float | None = None
    final_softcap: float | None = None
    max_position_embeddings: int = 4096

    @property
    def q_width(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_width(self) -> int:
        return self.num_kv_heads * self.head_dim

    @property
    def gemma_norm(self) -> bool:
        """Gemma norms compute entirely in fp32 (and scale by 1 + weight)."""
        return self.family in ("gemma", "gemma2")

    def layer_tensors(self) -> list[tuple[str, Shape]]:
        """The parameters of one decoder layer, as transformers names and shapes them."""
        h, i = self.hidden_size, self.intermediate_size
        out = _attention_tensors(self) + _mlp_tensors(self, h, i)
        norm_names = ["input_layernorm", "post_attention_layernorm"]
        if self.norms_per_layer == 4:
            norm_names += ["pre_feedforward_layernorm", "post_feedforward_layernorm"]
        out += [(f"{n}.weight", (h,)) for n in norm_names]
        return out

    def root_tensors(self) -> list[tuple[str, Shape]]:
        """Parameters outside the layers: embeddings, final norm, and an untied lm_head."""
        out = [("model.embed_tokens.weight", (self.vocab_size, self.hidden_size)),
               ("model.norm.weight", (self.hidden_size,))]
        if not self.tie_word_embeddings:
            out.append(("lm_head.weight", (self.vocab_size, self.hidden_size)))
        return out

    @property
    def layer_params(self) -> int:
        return sum(math.prod(s) for _, s in self.layer_tensors())

    @property
    def root_params(self) -> int:
        return sum(math.prod(s) for _, s in self.root_tensors())

    @property
    def total_params(self) -> int:
        """Parameters transformers instantiates (tied embeddings counted once)."""
        return self.num_layers * self.layer_params + self.root_params

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size


def _attention_tensors(g: Geometry) -> list[tuple[str, Shape]]:
    h, q, kv = g.hidden_size, g.q_width, g.kv_width
    out: list[tuple[str, Shape]] = []
    if g.fused_projections:
        out.append(("self_attn.qkv_proj.weight", (q + 2 * kv, h)))
    else:
        out += [("self_attn.q_proj.weight", (q, h)), ("self_attn.k_proj.weight", (kv, h)),
                ("self_attn.v_proj.weight", (kv, h))]
        if g.qkv_bias:
            out += [("self_attn.q_proj.bias", (q,)), ("self_attn.k_proj.bias", (kv,)),
                    ("self_attn.v_proj.bias", (kv,))]
    out.append(("self_attn.o_proj.weight", (h, q)))
    if g.o_bias:
        out.append(("self_attn.o_proj.bias", (h,)))
    if g.qk_norm:
        out += [("self_attn.q_norm.weight", (g.head_dim,)),
                ("self_attn.k_norm.weight", (g.head_dim,))]
    return out


def _mlp_tensors(g: Geometry, h: int, i: int) -> list[tuple[str, Shape]]:
    if g.fused_projections:
        return [("mlp.gate_up_proj.weight", (2 * i, h)), ("mlp.down_proj.weight", (h, i))]
    out = [("mlp.gate_proj.weight", (i, h)), ("mlp.up_proj.weight", (i, h)),
           ("mlp.down_proj.weight", (h, i))]
    if g.mlp_bias:
        out += [("mlp.gate_proj.bias", (i,)), ("mlp.up_proj.bias", (i,)),
                ("mlp.down_proj.bias", (h,))]
    return out


def _positive_int(config: dict[str, Any], key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise GeometryError(f"config {key} must be a positive integer, got {value!r}")
    return value


def geometry_from_config(config: dict[str, Any]) -> Geometry:
    """The geometry of an HF-style config dict (a preset, a local config.json, or a
    spec's `model.geometry` tagged ``model_type: custom``)."""
    family = config.get("model_type")
    if family not in _FAMILY_DEFAULTS:
        raise GeometryError(f"model_type {family!r} is not one the planner knows")
    merged = _COMMON_DEFAULTS | _FAMILY_DEFAULTS[family] | config

    def num(key: str) -> int:
        return _positive_int(config, key, merged.get(key))

    hidden, heads = num("hidden_size"), num("num_attention_heads")
    kv_heads = merged.get("num_key_value_heads") or heads
    if heads % kv_heads:
        raise GeometryError(f"config num_attention_heads {heads} is not a multiple of "
                            f"num_key_value_heads {kv_heads}")
    if not merged.get("head_dim") and hidden % heads:
        raise GeometryError(f"config hidden_size {hidden} is not a multiple of "
                            f"num_attention_heads {heads} (or set head_dim)")
    head_dim = merged.get("head_dim") or hidden // heads
    attention_bias = bool(merged.get("attention_bias", False))
    return Geometry(
        family=family,
        hidden_size=hidden,
        intermediate_size=num("intermediate_size"),
        num_layers=num("num_hidden_layers"),
        num_heads=heads,
        num_kv_heads=_positive_int(config, "num_key_value_heads", kv_heads),
        head_dim=_positive_int(config, "head_dim", head_dim),
        vocab_size=num("vocab_size"),
        tie_word_embeddings=bool(merged.get("tie_word_embeddings")),
        qkv_bias=family == "qwen2" or (attention_bias and family in _CONFIGURABLE_BIAS),
        o_bias=attention_bias and family in _CONFIGURABLE_BIAS,
        mlp_bias=family == "llama" and bool(merged.get("mlp_bias", False)),
        qk_norm=family == "qwen3",
        fused_projections=family == "phi3",
        norms_per_layer=4 if family == "gemma2" else 2,
        sliding_window=merged.get("sliding_window") if _uses_window(merged) else None,
        attn_softcap=merged.get("attn_logit_softcapping") if family == "gemma2" else None,
        final_softcap=merged.get("final_logit_softcapping") if family == "gemma2" else None,
        max_position_embeddings=num("max_position_embeddings"),
    )


def _uses_window(merged: dict[str, Any]) -> bool:
    """Whether the family's attention honours `sliding_window` (Qwen 2/3 only with
    `use_sliding_window`; Llama and Gemma ignore the key)."""
    family = merged["model_type"]
    if family in ("qwen2", "qwen3"):
        return bool(merged.get("use_sliding_window"))
    return family in ("mistral", "gemma2", "phi3") and merged.get("sliding_window") is not None
