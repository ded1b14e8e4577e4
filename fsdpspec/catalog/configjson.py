"""A total reader for a model's config.json: bounded in size and depth, reading special
floats as transformers writes and reads them (``{"__float__": "Infinity"}``, bare
Infinity / NaN) but strict about the numbers the planner reads (finite; no overflowing
floats or digit-limit ints), and typed for the
keys the planner and the engine read. Every problem is one line naming the key, so
that `validate` reports it as FS030 at `model.hf_config`."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fsdpspec import jsonfile
from fsdpspec.jsonfile import JsonFileError, Limits, read_regular

CONFIG_LIMITS = Limits(max_bytes=1 << 20, max_depth=32, max_int_digits=100,
                       max_string=1 << 20, nonfinite=True)


class ConfigJsonError(ValueError):
    """config.json cannot be used; the message is one line."""


# transformers writes the floats JSON has no numbers for as tagged objects, and reads
# them (and Python's bare Infinity / NaN, which CONFIG_LIMITS lets through) back as floats.
_FLOAT_TAG = "__float__"
_SPECIAL_FLOATS = {"Infinity": math.inf, "-Infinity": -math.inf, "NaN": math.nan}


def _decode_special_floats(value: Any) -> Any:
    """``{"__float__": "Infinity"}`` → inf, as transformers decodes it (recursive: the
    reader has bounded the depth)."""
    if isinstance(value, dict):
        if set(value) == {_FLOAT_TAG} and value[_FLOAT_TAG] in _SPECIAL_FLOATS:
            return _SPECIAL_FLOATS[value[_FLOAT_TAG]]
        return {k: _decode_special_floats(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode_special_floats(v) for v in value]
    return value


def read_bytes(path: Path) -> bytes:
    """At most 1 MiB of a regular file (never a FIFO or device)."""
    try:
        return read_regular(path, CONFIG_LIMITS.max_bytes)
    except JsonFileError as exc:
        raise ConfigJsonError(str(exc)) from None


def load_object(path: Path) -> dict[str, Any]:
    """The JSON object in ``path``; ConfigJsonError for anything else."""
    try:
        return _decode_special_floats(jsonfile.load_object(path, CONFIG_LIMITS))
    except JsonFileError as exc:
        raise ConfigJsonError(str(exc)) from None


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _finite(value: Any) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value))


def _non_negative_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


# key → (test, what it must be); None is allowed for every key (the family default).
_TYPES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "model_type": (lambda v: isinstance(v, str), "a string"),
    **{key: (_positive_int, "a positive integer") for key in (
        "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
        "num_key_value_heads", "head_dim", "vocab_size", "max_position_embeddings")},
    # 0, like null, means no window.
    "sliding_window": (_non_negative_int, "a non-negative integer"),
    **{key: (lambda v: isinstance(v, bool), "true or false") for key in (
        "tie_word_embeddings", "attention_bias", "mlp_bias", "use_sliding_window")},
    **{key: (_finite, "a finite number") for key in (
        "attn_logit_softcapping", "final_logit_softcapping", "rope_theta")},
}


def describe(value: Any) -> str:
    shown = json.dumps(value)
    return shown if len(shown) <= 40 else shown[:37] + "…"


def check_types(data: dict[str, Any], where: str) -> None:
    """Raise ConfigJsonError for the first key the planner reads with a wrong type, or
    attention heads that key/value heads do not divide."""
    for key, (test, wanted) in _TYPES.items():
        value = data.get(key)
        if value is not None and not test(value):
            raise ConfigJsonError(f"{where}: {key} must be {wanted}, got {describe(value)}")
    heads, kv_heads = data.get("num_attention_heads"), data.get("num_key_value_heads")
    if heads and kv_heads and heads % kv_heads:
        raise ConfigJsonError(f"{where}: num_attention_heads {heads} is not a multiple of "
                              f"num_key_value_heads {kv_heads}")
