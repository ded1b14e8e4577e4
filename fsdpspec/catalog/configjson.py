"""A total reader for a model's config.json: bounded in size and depth, reading special
floats as transformers writes and reads them (``{"__float__": "Infinity"}``, bare
Infinity / NaN) but strict about the numbers the planner reads (finite; no overflowing
floats or digit-limit ints), and typed for the
keys the planner and the engine read. Every problem is one line naming the key, so
that `validate` reports it as FS030 at `model.hf_config`."""

from __future__ import annotations

import json
import math
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

MAX_CONFIG_BYTES = 1 << 20
MAX_DEPTH = 32
MAX_INT_DIGITS = 100  # no model size needs more; Python refuses more than 4300 anyway


class ConfigJsonError(ValueError):
    """config.json cannot be used; the message is one line."""


# transformers writes the floats JSON has no numbers for as tagged objects, and reads
# them (and Python's bare Infinity / NaN) back as floats.
_FLOAT_TAG = "__float__"
_SPECIAL_FLOATS = {"Infinity": math.inf, "-Infinity": -math.inf, "NaN": math.nan}


def _special_float(name: str) -> float:
    return _SPECIAL_FLOATS[name]


def _decode_special_floats(value: Any) -> Any:
    """``{"__float__": "Infinity"}`` → inf, as transformers decodes it (recursive: called
    once the depth is known to be bounded)."""
    if isinstance(value, dict):
        if set(value) == {_FLOAT_TAG} and value[_FLOAT_TAG] in _SPECIAL_FLOATS:
            return _SPECIAL_FLOATS[value[_FLOAT_TAG]]
        return {k: _decode_special_floats(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode_special_floats(v) for v in value]
    return value


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise ConfigJsonError(f"an integer of {len(text)} digits is out of range")
    return int(text)


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ConfigJsonError(f"{text[:40]} overflows a float")
    return value


def _depth(value: Any) -> int:
    """Nesting depth, without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, level = stack.pop()
        deepest = max(deepest, level)
        children = node.values() if isinstance(node, dict) else node if isinstance(
            node, list) else ()
        stack.extend((child, level + 1) for child in children)
    return deepest


def read_bytes(path: Path) -> bytes:
    """At most MAX_CONFIG_BYTES + 1 bytes of a regular file (never a FIFO or device)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except (OSError, ValueError) as exc:
        raise ConfigJsonError(f"cannot read {path}: {getattr(exc, 'strerror', exc)}") from None
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ConfigJsonError(f"{path} is not a regular file")
        raw = fh.read(MAX_CONFIG_BYTES + 1)
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigJsonError(f"{path} is larger than 1 MiB; not a model config")
    return raw


def load_object(path: Path) -> dict[str, Any]:
    """The JSON object in ``path``; ConfigJsonError for anything else."""
    raw = read_bytes(path)
    try:
        data = json.loads(raw.decode("utf-8"), parse_constant=_special_float,
                          parse_int=_bounded_int, parse_float=_finite_float)
    except ConfigJsonError as exc:
        raise ConfigJsonError(f"{path}: {exc}") from None
    except RecursionError:
        raise ConfigJsonError(f"{path} is nested deeper than {MAX_DEPTH} levels") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigJsonError(f"{path} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigJsonError(f"{path} does not hold a JSON object")
    if _depth(data) > MAX_DEPTH:
        raise ConfigJsonError(f"{path} is nested deeper than {MAX_DEPTH} levels")
    return _decode_special_floats(data)


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
