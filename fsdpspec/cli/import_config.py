"""`fsdpspec import accelerate|trainer|axolotl|torchtitan FILE [-o job.yaml]` — another
tool's config as a commented v1 spec; every key not carried over is named with its
line, every assumption is marked, and a feature the spec lacks stops the import."""

from __future__ import annotations

from pathlib import Path

import click

from fsdpspec.catalog.accelerators import accelerator_names
from fsdpspec.catalog.presets import preset_names
from fsdpspec.cli.init import check_name
from fsdpspec.cli.output import deliver, force_option, output_option
from fsdpspec.convert.source_kinds import KINDS, importer
from fsdpspec.spec.names import kubernetes_name
from fsdpspec.spec.yamltext import one_line

# The longest line a note is printed as: a note quotes source values, which may be long.
MAX_NOTE_CHARS = 400


def _line(config: str, note, end: str = "") -> str:
    """A note as one printable line (a source value may hold newlines or escapes)."""
    where = f"{config}:{note.line}" if isinstance(note.line, int) else note.line or config
    return one_line(f"{where}: {note.message}", MAX_NOTE_CHARS) + end


@click.command("import")
@click.argument("kind", type=click.Choice(list(KINDS)))
@click.argument("config", metavar="FILE")
@output_option
@force_option
@click.option("--name", default=None, callback=check_name,
              help="metadata.name (default: from the file name).")
@click.option("--preset", type=click.Choice(preset_names()), default=None,
              help="Model preset (default: the model the file names, else the family of "
                   "the wrapped layer class).")
@click.option("--hf-config", default=None, metavar="PATH",
              help="A local Hugging Face config.json instead of a preset.")
@click.option("--accelerator", type=click.Choice(accelerator_names()), default="H100-80GB",
              show_default=True, help="The GPU (no source config says).")
@click.option("--gpus-per-node", type=click.IntRange(min=1, max=4096), default=8,
              show_default=True, help="Processes per node where the file does not say.")
def command(kind, config, output, force, name, preset, hf_config, accelerator,
            gpus_per_node) -> None:
    """Write an accelerate config, an HF Trainer command line or TrainingArguments
    file, an axolotl config or a torchtitan TOML as a v1 spec. Keys with no v1
    equivalent are listed on stderr with their lines; a feature the spec cannot say
    (tensor, context or pipeline parallelism, LoRA, float8 …) stops the import with
    exit 1 and one line per feature. An existing -o FILE is replaced only with --force,
    and never when it is the file imported."""
    from fsdpspec.convert.draft import Assumptions, ImportRefused
    from fsdpspec.convert.model_choice import ModelNeeded
    from fsdpspec.convert.sources import SourceError

    if preset and hf_config:
        raise click.UsageError("give --preset or --hf-config, not both")
    import_config = importer(kind).import_config()
    assumed = Assumptions(accelerator=accelerator, gpus_per_node=gpus_per_node,
                          preset=preset, hf_config=hf_config)
    try:
        imported = import_config(
            Path(config), name=name or kubernetes_name(Path(config).stem), assumed=assumed,
            base_dir=Path.cwd())
    except SourceError as exc:
        raise click.ClickException(one_line(str(exc), MAX_NOTE_CHARS) + "; nothing imported") \
            from None
    except ModelNeeded as exc:
        raise click.UsageError(str(exc)) from None
    except ImportRefused as refused:
        for note in refused.notes:
            click.echo(_line(config, note, "; nothing imported"), err=True)
        raise SystemExit(1) from None
    for note in imported.notes:
        click.echo(_line(config, note), err=True)
    deliver(imported.text, output, replace=force,
            inputs=[path for path in (config, hf_config) if path])
