"""Which model an imported spec names, and which of the source's layer classes belong
to it. A source that names a model gets it (a preset of the same geometry, a local
config, a cached Hub id); one the machine cannot read is planned with a marked
stand-in and the import says what to set. A layer class of another model is reported,
never copied (FS111 would reject the spec)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, NoReturn

from fsdpspec.catalog.config_source import ModelConfigError, read_hf_config, resolve_input_path
from fsdpspec.catalog.families import FAMILIES, family
from fsdpspec.catalog.hub import parse_hub_id
from fsdpspec.catalog.model_names import NamedFamily, named_family, of_model_type
from fsdpspec.catalog.presets import HUB_PRESETS, PRESETS, preset_config
from fsdpspec.convert.draft import Assumptions, Draft, Entry, ImportRefused, Note, origin

# A source that names no model and no layer class of a known family: a small preset.
DEFAULT_PRESET = "llama3.2-1b"


class ModelNeeded(ValueError):
    """Nothing in the source or on the command line says which model: the user must."""


def _family_of_layer(layers: Entry | None) -> Any:
    names = layers.value if layers else []
    first = names[0] if names else None
    return next((f for f in FAMILIES.values() if f.layer_class == first), None)


def _named_by_layer(layers: Entry | None) -> NamedFamily | None:
    """The family a layer class says: the registered one that builds it, else its name's."""
    found = _family_of_layer(layers)
    if found is not None:
        return of_model_type(found.model_type)
    first = layers.value[0] if layers and layers.value else None
    return named_family(first) if isinstance(first, str) else None


def _family_of(preset: str) -> str:
    return PRESETS[preset]["model_type"]


def _stand_in_preset(named: NamedFamily | None, *, by_layer: bool = False) -> str | None:
    """The preset planned in place of a model of ``named``'s family that the machine
    cannot read: the family's first (the small DEFAULT_PRESET for a Llama known by name
    only, which says the family but not the size); a dense Llama for a dense model of a
    family without presets, or of none fsdpspec can tell; None for a Mixture of Experts
    that no preset of its own family holds (no dense model stands in for one)."""
    found = family(named.model_type) if named else None
    if not by_layer and found is not None and found.model_type == _family_of(DEFAULT_PRESET):
        return DEFAULT_PRESET
    if found is not None and found.presets:
        return found.presets[0]
    return None if named is not None and named.moe else DEFAULT_PRESET


def _standing_in(stand_in: str, named: NamedFamily | None, what: str) -> str:
    """What the spec's comment and the note say of a stand-in: both models' families,
    ahead of ``what`` (a source's name, which may be long)."""
    if named is not None and _family_of(stand_in) == named.model_type:
        return f"{stand_in} stands in for a {named.title} model of its family ({named.kind}): " \
            f"{what}"
    mine = of_model_type(_family_of(stand_in))
    theirs = f"a {named.title} model ({named.kind})" if named else \
        "a model of a family fsdpspec cannot tell"
    return f"{stand_in} ({mine.title}, {mine.kind}) stands in for {theirs}: {what}"


def _refuse_unresolved(entry: Entry, what: str, named: NamedFamily, fix: str) -> NoReturn:
    """Stop: a Mixture of Experts whose config is not here and that no preset stands in for."""
    raise ImportRefused([Note(entry.at, (
        f"FS055 {entry.written} {what}: {named.what} that no preset stands in for; "
        f"{fix}"))])


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
    if parse_hub_id(name) is not None:
        fix = (f"pass --preset NAME, or --hf-config {name} once its config is cached "
               f"(`huggingface-cli download {name} config.json`)")
    else:
        fix = "pass --hf-config DIR (the model's config.json) or --preset NAME"
    # The class the file wraps is exact where fsdpspec knows it; the name comes next.
    by_layer = _family_of_layer(layers) is not None
    named = (_named_by_layer(layers) if by_layer else None) or named_family(name) \
        or _named_by_layer(layers)
    stand_in = _stand_in_preset(named, by_layer=by_layer)
    if stand_in is None:
        _refuse_unresolved(model, name, named, fix)
    said = _standing_in(stand_in, named, name)
    draft.put("model.preset", stand_in, f"assumed: {said} (see the note)")
    draft.notes.append(Note(model.at, (
        f"{model.written} {name} is not a preset, a local config or in the Hugging Face "
        f"cache: {said}; {fix}")))
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
    if found is not None:
        draft.put("model.preset", found.presets[0],
                  "not in the source: your model (--preset, --hf-config)")
        return preset_config(found.presets[0])
    named = _named_by_layer(layers)
    stand_in = _stand_in_preset(named)
    fix = "pass --hf-config DIR (the model's config.json) or --preset NAME"
    if stand_in is None:
        _refuse_unresolved(layers, f"{layers.value[0]} (and no model)", named, fix)
    if layers is None or not layers.value:
        draft.put("model.preset", stand_in,
                  "not in the source: your model (--preset, --hf-config)")
        return preset_config(stand_in)
    said = _standing_in(stand_in, named, f"the model of {layers.value[0]}")
    draft.put("model.preset", stand_in, f"not in the source: {said}; your model "
              "(--preset, --hf-config)")
    draft.notes.append(Note(layers.at, f"{layers.written} {layers.value[0]} names no model "
                            f"fsdpspec has: {said}; {fix}"))
    return preset_config(stand_in)


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
