"""`fsdpspec init` — a commented starter spec from a few flags, checked before it is
written: what init writes validates."""

from __future__ import annotations

import tempfile
from pathlib import Path

import click
from pydantic_core import ValidationError

from fsdpspec.atomicio import write_text
from fsdpspec.catalog.accelerators import CATALOG, accelerator_names
from fsdpspec.catalog.presets import preset_config, preset_names
from fsdpspec.cli.output import deliver, force_option, output_option
from fsdpspec.convert.importer import HOST_GIB_PER_GPU
from fsdpspec.diagnostic_formats import render as render_reports
from fsdpspec.semantics import DEFAULT_RDZV_PORT
from fsdpspec.spec.names import kubernetes_name
from fsdpspec.spec.v1 import Metadata, Resources
from fsdpspec.spec.yamltext import COMMENT_COLUMN
from fsdpspec.validate import check_file

# A CPU job's host memory: the spec's own default.
_DEFAULT_HOST_GIB = Resources().host_memory_gib

_TEMPLATE = """\
# Starter spec written by `fsdpspec init`. Check it with `fsdpspec validate`, see the
# memory plan with `fsdpspec plan`, and train with `fsdpspec run`.
apiVersion: fsdpspec/v1
kind: TrainingJob
metadata:
  name: {name}
resources:
  nodes: {nodes}
  gpus_per_node: {gpus}            # processes per node ({process_word})
  accelerator: {accelerator}
  host_memory_gib: {host_gib}              # RAM per node (set yours)
model:
  preset: {preset}                 # or hf_config: path/to/config.json (a local file)
  weights: null                    # a local safetensors directory; null = random init
fsdp:
  version: 2                       # FSDP2 fully_shard; 1 = FullyShardedDataParallel
  sharding_strategy: FULL_SHARD
  mixed_precision: {precision}
  activation_checkpointing: {checkpointing}
data:
  source: corpus                   # the text shipped with fsdpspec; or text / jsonl + path
  seq_len: {seq_len}
  micro_batch_size: 1
  global_batch_size: {global_batch}
optimizer:
  name: adamw
  lr: 2.0e-5
  scheduler: {{name: cosine, warmup_steps: 10}}
train:
  max_steps: 1000
checkpoint:
  dir: runs/{{name}}                 # relative to where `fsdpspec run` starts
  interval_steps: 500
{launch}"""

_MULTINODE_LAUNCH = f"""\
launch:
  rdzv_endpoint: node-0:{DEFAULT_RDZV_PORT}      # host:port of the first node (set yours)
"""


def _align_comments(text: str) -> str:
    """Line up the end-of-line comments (the values' widths vary with the flags)."""
    lines = []
    for line in text.splitlines():
        if " # " in line and not line.lstrip().startswith("#"):
            code, comment = line.split(" # ", 1)
            line = f"{code.rstrip():<{COMMENT_COLUMN}}# {comment}"
        lines.append(line)
    return "\n".join(lines) + "\n"


def render(*, name: str, preset: str, gpus: int, nodes: int, accelerator: str) -> str:
    """The starter spec text. Tiny presets get a short sequence; real models on a GPU
    compute in bf16 and recompute activations."""
    device = CATALOG[accelerator]
    tiny = preset.startswith("tiny-")
    bf16 = device.is_gpu and device.supports_bf16
    context = preset_config(preset).get("max_position_embeddings", 2048)
    return _align_comments(_TEMPLATE.format(
        name=name, nodes=nodes, gpus=gpus, accelerator=accelerator, preset=preset,
        process_word="one per GPU" if device.is_gpu else "CPU processes",
        precision="bf16" if bf16 else "fp32",
        checkpointing="none" if tiny else "full",
        seq_len=128 if tiny else min(2048, context),
        global_batch=gpus * nodes,
        host_gib=HOST_GIB_PER_GPU * gpus if device.is_gpu else _DEFAULT_HOST_GIB,
        launch=_MULTINODE_LAUNCH if nodes > 1 else "",
    ))


def _problems(text: str) -> str:
    """What `validate` would say about the text (concise lines; empty when clean)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "job.yaml"
        write_text(path, text)
        report = check_file(path)
    if not report.diagnostics:
        return ""
    return render_reports("concise", [report]).replace(str(path), "starter spec")


def check_name(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    """--name must be a valid metadata.name (the spec's own rule)."""
    if value is not None:
        try:
            Metadata(name=value)
        except ValidationError:
            raise click.BadParameter("letters, digits, '.', '_' and '-' (at most 63), "
                                     "starting with a letter or digit") from None
    return value


@click.command("init")
@click.option("--preset", type=click.Choice(preset_names()), default="tiny-llama",
              show_default=True, help="Model architecture.")
@click.option("--gpus", type=click.IntRange(min=1, max=2**31 - 1), default=None,
              help="Processes per node (default: 8 on a GPU, 2 on CPU).")
@click.option("--nodes", type=click.IntRange(min=1, max=2**31 - 1), default=1, show_default=True)
@click.option("--accelerator", type=click.Choice(accelerator_names()), default="cpu",
              show_default=True)
@click.option("--name", default=None, callback=check_name,
              help="metadata.name (default: the preset).")
@output_option
@force_option
def command(preset, gpus, nodes, accelerator, name, output, force) -> None:
    """Write a commented starter spec. It is validated first: a combination that
    would not validate (a model too big for the GPUs) is reported and not written. An
    existing -o FILE is replaced only with --force."""
    gpus = gpus or (8 if CATALOG[accelerator].is_gpu else 2)
    text = render(name=name or kubernetes_name(preset), preset=preset, gpus=gpus,
                  nodes=nodes, accelerator=accelerator)
    problems = _problems(text)
    if problems:
        click.echo(problems, err=True, nl=False)
        raise click.ClickException("this starter spec would not validate clean "
                                   "(see above): change --gpus, --nodes or --preset")
    deliver(text, output, replace=force)
