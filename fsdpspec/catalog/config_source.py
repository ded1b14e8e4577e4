"""Resolve a spec's model source to a Hugging Face-style config dict, without torch.

The planner, the lint rules and the engine all read the model through here, so the
geometry that is planned is the geometry that is trained.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from fsdpspec.catalog.configjson import ConfigJsonError, check_types, load_object
from fsdpspec.catalog.families import family
from fsdpspec.catalog.hub import HubError, HubId, parse_hub_id, snapshot
from fsdpspec.catalog.presets import preset_config
from fsdpspec.spec.v1 import Model


class ModelConfigError(ValueError):
    """A model source that cannot be read; the message is one line for the user."""


def resolve_input_path(value: str, base_dir: Path) -> Path:
    """Input paths in a spec are relative to the spec file's directory. A `~user` that
    names nobody stays as written (the file is then missing, and reported so)."""
    path = Path(os.path.expanduser(value))
    return path if path.is_absolute() else base_dir / path


def hub_input(value: str, base_dir: Path, repo_type: str = "model") -> HubId | None:
    """The Hub id an input names: shaped `org/name[@revision]` with no local path of that
    name (a local path always wins)."""
    if resolve_input_path(value, base_dir).exists():
        return None
    return parse_hub_id(value, repo_type)


def resolve_model_input(value: str, base_dir: Path) -> Path:
    """A local path, or the cached snapshot of a Hub id (HubError when not cached)."""
    hub = hub_input(value, base_dir)
    return snapshot(hub) if hub else resolve_input_path(value, base_dir)


def read_hf_config(value: str, base_dir: Path) -> dict[str, Any]:
    """Read a config.json (a file, a directory holding one, or a cached Hub id) as a dict,
    its types checked for every key the planner and the engine read."""
    try:
        path = resolve_model_input(value, base_dir)
        if path.is_dir():
            path = path / "config.json"
        if not path.exists():
            raise ModelConfigError(f"no config.json at {path}")
        data = load_object(path)
        check_types(data, str(path))
    except (HubError, ConfigJsonError) as exc:
        raise ModelConfigError(str(exc)) from None
    # Any model_type is accepted: one without an analytic family is planned by building
    # it on the meta device (fsdpspec.job.introspect), and trained as transformers builds it.
    if not isinstance(data.get("model_type"), str) or not data["model_type"]:
        raise ModelConfigError(f"{path} has no model_type; not a transformers config")
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
    found = family(config.get("model_type")) if config is not None else None
    return [found.layer_class] if found else []


def lora_targets(declared: list[str], config: dict[str, Any] | None) -> list[str]:
    """The modules a LoRA adapts: `peft.target_modules` when given, else the family's
    attention and MLP projections (empty when neither is known)."""
    if declared:
        return list(declared)
    found = family(config.get("model_type")) if config is not None else None
    return list(found.lora_targets) if found else []
