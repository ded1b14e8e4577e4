"""Resolve a spec's model source to a Hugging Face-style config dict, without torch.

The planner, the lint rules and the engine all read the model through here, so the
geometry that is planned is the geometry that is trained.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from fsdpspec.catalog.configjson import ConfigJsonError, check_types, load_object
from fsdpspec.catalog.presets import preset_config
from fsdpspec.spec.v1 import Model

# model_type → the repeated decoder layer class transformers builds for it.
DECODER_LAYERS: dict[str, str] = {
    "llama": "LlamaDecoderLayer",
    "mistral": "MistralDecoderLayer",
    "qwen2": "Qwen2DecoderLayer",
    "qwen3": "Qwen3DecoderLayer",
    "gemma": "GemmaDecoderLayer",
    "gemma2": "Gemma2DecoderLayer",
    "phi3": "Phi3DecoderLayer",
}


class ModelConfigError(ValueError):
    """A model source that cannot be read; the message is one line for the user."""


def resolve_input_path(value: str, base_dir: Path) -> Path:
    """Input paths in a spec are relative to the spec file's directory. A `~user` that
    names nobody stays as written (the file is then missing, and reported so)."""
    path = Path(os.path.expanduser(value))
    return path if path.is_absolute() else base_dir / path


def read_hf_config(value: str, base_dir: Path) -> dict[str, Any]:
    """Read a local config.json (or a directory holding one) as a dict, its types checked
    for every key the planner and the engine read."""
    try:
        path = resolve_input_path(value, base_dir)
        if path.is_dir():
            path = path / "config.json"
        if not path.exists():
            raise ModelConfigError(f"no config.json at {path}")
        data = load_object(path)
        check_types(data, str(path))
    except ConfigJsonError as exc:
        raise ModelConfigError(str(exc)) from None
    model_type = data.get("model_type")
    if model_type not in DECODER_LAYERS:
        known = ", ".join(DECODER_LAYERS)
        raise ModelConfigError(f"{path}: model_type {model_type!r} is not supported ({known})")
    return data


def model_config(model: Model, base_dir: Path) -> dict[str, Any] | None:
    """The HF config dict of the model, or None for a factory model.

    A factory model's ``geometry`` is returned in HF form when given, so the planner
    can still count it.
    """
    if model.preset is not None:
        return preset_config(model.preset)
    if model.hf_config is not None:
        return read_hf_config(model.hf_config, base_dir)
    if model.geometry is not None:
        return model.geometry.model_dump(exclude_none=True) | {"model_type": "custom"}
    return None


def layer_classes(declared: list[str], config: dict[str, Any] | None) -> list[str]:
    """The wrapping units: `fsdp.transformer_layer_cls` when given, else the family's
    decoder layer (empty when neither is known)."""
    if declared:
        return list(declared)
    if config is not None and config.get("model_type") in DECODER_LAYERS:
        return [DECODER_LAYERS[config["model_type"]]]
    return []
