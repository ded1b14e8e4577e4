"""`fsdpspec export slurm|kubernetes|accelerate job.yaml [-o FILE]`."""

from __future__ import annotations

import click

from fsdpspec.catalog.modelconfig import layer_classes
from fsdpspec.cli.options import exit_on_errors, load_spec, set_option
from fsdpspec.cli.output import deliver, output_option
from fsdpspec.spec.yamltext import dump_yaml
from fsdpspec.validate import FileReport
from fsdpspec_runners.errors import LaunchError
from fsdpspec_runners.local.resolved import absolute_inputs


def _slurm(report: FileReport) -> str:
    from fsdpspec_runners.local.rundir import run_dir_path
    from fsdpspec_runners.slurm import sbatch_script

    assert report.spec is not None
    spec = absolute_inputs(report.spec, report.base_dir)
    return sbatch_script(spec, run_dir_path(spec))


def _kubernetes(report: FileReport) -> str:
    from fsdpspec_runners.kubernetes import manifest

    assert report.spec is not None
    return manifest(absolute_inputs(report.spec, report.base_dir))


def _accelerate(report: FileReport) -> str:
    from fsdpspec.convert.accelerate import export_config

    spec = report.spec
    assert spec is not None
    layers = layer_classes(spec.fsdp.transformer_layer_cls, report.model_config)
    config, notes = export_config(spec, layers)
    for note in notes:
        click.echo(f"{report.file}: note: {note}", err=True)
    return dump_yaml(config)


_TARGETS = {"slurm": _slurm, "kubernetes": _kubernetes, "accelerate": _accelerate}


@click.command("export")
@click.argument("target", type=click.Choice(list(_TARGETS)))
@click.argument("file", metavar="FILE")
@set_option
@output_option
def command(target, file, overrides, output) -> None:
    """Write FILE as an sbatch script, a Kubeflow PyTorchJob manifest or an accelerate
    config. The spec is validated first; errors stop the export."""
    report = load_spec(file, overrides)
    exit_on_errors(report)
    try:
        text = _TARGETS[target](report)
    except LaunchError as exc:
        raise click.ClickException(str(exc)) from None
    deliver(text, output, executable=target == "slurm")
