"""`fsdpspec import accelerate CONFIG.yaml [-o job.yaml]` — an accelerate config as a
commented v1 spec; every key not carried over is named with its line."""

from __future__ import annotations

from pathlib import Path

import click

from fsdpspec.catalog.accelerators import accelerator_names
from fsdpspec.catalog.families import FAMILIES
from fsdpspec.catalog.presets import preset_names
from fsdpspec.cli.init import check_name
from fsdpspec.cli.output import deliver, output_option
from fsdpspec.spec.load import load_file
from fsdpspec.spec.names import kubernetes_name

# accelerate configs name a layer class, not a model: a family's first preset stands for it.
_DEFAULT_PRESET = "llama3.2-1b"


def _preset_for(loaded_data: object) -> str:
    """The preset of the family whose decoder layer the config wraps."""
    fsdp = loaded_data.get("fsdp_config") if isinstance(loaded_data, dict) else None
    layers = fsdp.get("fsdp_transformer_layer_cls_to_wrap") if isinstance(fsdp, dict) else None
    first = layers.split(",")[0].strip() if isinstance(layers, str) else None
    if isinstance(layers, list) and layers:
        first = str(layers[0])
    family = next((f for f in FAMILIES.values() if f.layer_class == first), None)
    if family is None:
        return _DEFAULT_PRESET
    if not family.presets:
        raise click.UsageError(f"no preset of the {family.model_type} family wraps {first}: "
                               "name the model with --preset or --hf-config")
    return family.presets[0]


@click.command("import")
@click.argument("kind", type=click.Choice(["accelerate"]))
@click.argument("config", metavar="CONFIG.yaml")
@output_option
@click.option("--name", default=None, callback=check_name,
              help="metadata.name (default: from the file name).")
@click.option("--preset", type=click.Choice(preset_names()), default=None,
              help="Model preset (default: the family of the wrapped layer class).")
@click.option("--hf-config", default=None, metavar="PATH",
              help="A local Hugging Face config.json instead of a preset.")
@click.option("--accelerator", type=click.Choice(accelerator_names()), default="H100-80GB",
              show_default=True, help="The GPU (accelerate configs do not say).")
def command(kind, config, output, name, preset, hf_config, accelerator) -> None:
    """Write an accelerate config as a v1 spec. Keys with no v1 equivalent, and keys
    accelerate itself ignores, are listed on stderr with their lines."""
    from fsdpspec.convert.accelerate import ImportRefused, import_config

    if preset and hf_config:
        raise click.UsageError("give --preset or --hf-config, not both")
    loaded = load_file(Path(config))
    if loaded.diagnostics:
        first = loaded.diagnostics[0]
        where = f"{first.file}:{first.position.line}" if first.position else config
        raise click.ClickException(f"{where}: {first.message}")
    if not isinstance(loaded.data, dict):
        raise click.ClickException(f"{config}: an accelerate config is a mapping")
    fsdp = loaded.data.get("fsdp_config")
    if fsdp is not None and not isinstance(fsdp, dict):
        line = loaded.source_map.values["/fsdp_config"].line
        raise click.ClickException(f"{config}:{line}: fsdp_config is not a mapping of "
                                   "fsdp_* keys; nothing imported")
    model = {"hf_config": hf_config} if hf_config else {
        "preset": preset or _preset_for(loaded.data)}
    try:
        imported = import_config(loaded, name=name or kubernetes_name(Path(config).stem),
                                 model=model, base_dir=Path.cwd(), accelerator=accelerator)
    except ImportRefused as refused:
        for note in refused.notes:
            click.echo(f"{config}:{note.line}: {note.message}; nothing imported", err=True)
        raise SystemExit(1) from None
    for note in imported.notes:
        line = f":{note.line}" if note.line else ""
        click.echo(f"{config}{line}: {note.message}", err=True)
    deliver(imported.text, output)
