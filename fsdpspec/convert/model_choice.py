"""Which model an imported spec names, and which of the source's layer classes belong
to it. A source that names a model gets it (a preset of the same geometry, a local
config, a cached Hub id); one the machine cannot read is planned with a marked
stand-in and the import says what to set. A layer class of another model is reported,
never copied (FS111 would reject the spec)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fsdpspec.catalog.config_source import ModelConfigError, read_hf_config, resolve_input_path
from fsdpspec.catalog.families import FAMILIES, family
from fsdpspec.catalog.hub import parse_hub_id
from fsdpspec.catalog.presets import HUB_PRESETS, PRESETS, preset_config
from fsdpspec.convert.draft import Assumptions, Draft, Entry, Note, origin

# A source that names no model and no layer class of a known family: a small preset.
DEFAULT_PRESET = "llama3.2-1b"


class ModelNeeded(ValueError):
    """Nothing in the source or on the command line says which model: the user must."""


def _family_of_layer(layers: Entry | None) -> Any:
    names = layers.value if layers else []
    first = names[0] if names else None
    return next((f for f in FAMILIES.values() if f.layer_class == first), None)


def _stand_in(layers: Entry | None) -> str:
    found = _family_of_layer(layers)
    return found.presets[0] if found and found.presets else DEFAULT_PRESET


def _named(draft: Draft, model: Entry, layers: Entry | None, base_dir: Path) -> dict | None:
    if not isinstance(model.value, str) or not model.value or "\x00" in model.value:
        draft.note(model, f"{model.written} {model.value!r} is not a model name; not imported")
        return apply_model(draft, None, layers, Assumptions(), base_dir)
    name = model.value
    preset = name if name in PRESETS else HUB_PRESETS.get(name)
    if preset:
        same = "" if preset == name else f" ({name} has this preset's geometry)"
        draft.put("model.preset", preset, origin(model) + same)
        return preset_config(preset)
    try:
        config = read_hf_config(name, base_dir)
    except (ModelConfigError, OSError, ValueError):
        config = None
    if config is not None:
        local = resolve_input_path(name, base_dir)
        draft.put("model.hf_config", str(local.resolve()) if local.exists() else name,
                  origin(model))
        return config
    stand_in = _stand_in(layers)
    draft.put("model.preset", stand_in, f"assumed: a stand-in for {name} (see the note)")
    if parse_hub_id(name) is not None:
        fix = (f"fetch its config (`huggingface-cli download {name} config.json`) and set "
               f"model.hf_config: {name}")
    else:
        fix = "set model.hf_config to the model's directory on this machine"
    draft.notes.append(Note(model.at, (
        f"{model.written} {name} is not a preset, a local config or in the Hugging Face "
        f"cache: planned as the preset {stand_in}; {fix}")))
    return preset_config(stand_in)


def apply_model(draft: Draft, model: Entry | None, layers: Entry | None,
                assumed: Assumptions, base_dir: Path) -> dict[str, Any] | None:
    """Put the model fields; the model's config (None when it cannot be read)."""
    if assumed.preset:
        draft.put("model.preset", assumed.preset, "--preset")
        return preset_config(assumed.preset)
    if assumed.hf_config:
        draft.put("model.hf_config", assumed.hf_config, "--hf-config")
        try:
            return read_hf_config(assumed.hf_config, base_dir)
        except ModelConfigError:
            return None  # `fsdpspec validate` says why (FS030)
    if model is not None:
        return _named(draft, model, layers, base_dir)
    found = _family_of_layer(layers)
    if found is not None and not found.presets:
        raise ModelNeeded(f"no preset of the {found.model_type} family wraps "
                          f"{found.layer_class}: name the model with --preset or --hf-config")
    preset = found.presets[0] if found else DEFAULT_PRESET
    draft.put("model.preset", preset, "not in the source: your model (--preset, --hf-config)")
    return preset_config(preset)


def apply_layers(draft: Draft, layers: Entry | None, config: dict[str, Any] | None) -> None:
    """Carry the layer classes that the model builds; report the others."""
    if layers is None or not layers.value:
        return
    found = family((config or {}).get("model_type"))
    if found is None:  # a model without a registered family: its classes are not known
        draft.carry("fsdp.transformer_layer_cls", list(layers.value), layers)
        return
    known = found.module_classes()
    kept = [name for name in layers.value if name in known]
    dropped = [name for name in layers.value if name not in known]
    if kept:
        draft.carry("fsdp.transformer_layer_cls", kept, layers)
    if dropped:
        model = draft.value("model.preset") or draft.value("model.hf_config")
        draft.notes.append(Note(layers.at, (
            f"{layers.written} {', '.join(dropped)} is not a layer of the model {model}: "
            f"not imported (the model's {found.layer_class} is wrapped)")))
