"""`fsdpspec export slurm|kubernetes|accelerate job.yaml [-o FILE]`."""

from __future__ import annotations

import click

from fsdpspec.catalog.modelconfig import layer_classes
from fsdpspec.cli.options import exit_on_errors, load_spec, set_option
from fsdpspec.cli.output import deliver, output_option
from fsdpspec.plan.checkpoint import stop_grace_seconds
from fsdpspec.spec.v1 import JobSpec
from fsdpspec.spec.yamltext import dump_yaml
from fsdpspec.validate import FileReport
from fsdpspec_runners.errors import LaunchError
from fsdpspec_runners.local.resolved import absolute_inputs


def _scheduled(report: FileReport) -> tuple[JobSpec, int]:
    """The spec with absolute input paths, and the seconds a stop signal must precede
    the kill (the planned checkpoint time)."""
    assert report.spec is not None
    grace_s = stop_grace_seconds(report.spec, report.model_config)
    return absolute_inputs(report.spec, report.base_dir), grace_s


def _slurm(report: FileReport) -> str:
    from fsdpspec_runners.slurm import sbatch_script

    return sbatch_script(*_scheduled(report))


def _kubernetes(report: FileReport) -> str:
    from fsdpspec_runners.kubernetes import manifest, manifest_warnings

    spec, grace_s = _scheduled(report)
    for warning in manifest_warnings(spec):
        click.echo(f"{report.file}: warning: {warning}", err=True)
    return manifest(spec, grace_s)


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
