"""`fsdpspec export slurm|kubernetes|accelerate job.yaml [-o FILE]` and
`fsdpspec export hf RUN_DIR [--step N] -o DIR`."""

from __future__ import annotations

import os
from pathlib import Path

import click

from fsdpspec.atomicio import check_target, describe_error
from fsdpspec.catalog.config_source import layer_classes
from fsdpspec.cli.options import exit_on_errors, load_spec, set_option, spec_inputs
from fsdpspec.cli.output import deliver, force_option, output_option
from fsdpspec.job.rundir import ADAPTER, ADAPTER_CONFIG
from fsdpspec.jsonfile import JsonFileError
from fsdpspec.plan.checkpoint import stop_grace_seconds
from fsdpspec.runfiles.resolved import absolute_inputs
from fsdpspec.spec.v1 import JobSpec
from fsdpspec.spec.yamltext import dump_yaml
from fsdpspec.validate import FileReport
from fsdpspec_runners.kubernetes import APIS
from fsdpspec_runners.launch_error import LaunchError


def _scheduled(report: FileReport) -> tuple[JobSpec, int]:
    """The spec with absolute input paths, and the seconds a stop signal must precede
    the kill (the planned checkpoint time)."""
    assert report.spec is not None
    assert report.job is not None
    grace_s = stop_grace_seconds(report.job)
    return absolute_inputs(report.spec, report.base_dir), grace_s


def _slurm(report: FileReport, api: str) -> str:
    from fsdpspec_runners.slurm import sbatch_script

    return sbatch_script(*_scheduled(report))


def _kubernetes(report: FileReport, api: str) -> str:
    from fsdpspec_runners.kubernetes import manifest, manifest_warnings

    spec, grace_s = _scheduled(report)
    for warning in manifest_warnings(spec, api):
        click.echo(f"{report.file}: warning: {warning}", err=True)
    return manifest(spec, grace_s, api)


def _accelerate(report: FileReport, api: str) -> str:
    from fsdpspec.convert.accelerate import export_config

    spec = report.spec
    assert spec is not None
    layers = layer_classes(spec.fsdp.transformer_layer_cls, report.model_config)
    config, notes = export_config(spec, layers)
    for note in notes:
        click.echo(f"{report.file}: note: {note}", err=True)
    return dump_yaml(config)


# The code of an export refused because the checkpoint does not match its manifest.
CHECKPOINT_UNVERIFIED = "FS042"
_TARGETS = {"slurm": _slurm, "kubernetes": _kubernetes, "accelerate": _accelerate}


def _is_export(directory: Path) -> bool:
    """Whether ``directory`` is what `export hf` leaves: a model (config.json), or a
    LoRA's adapter alone (adapter/adapter_config.json)."""
    return (directory / "config.json").is_file() or \
        (directory / ADAPTER / ADAPTER_CONFIG).is_file()


def _hf_target(run_dir: Path, output: str, force: bool) -> Path:
    """The model directory to write, checked before torch is imported: never the run,
    a directory holding it, or its checkpoints; an existing one only with --force, and
    only if it is a model directory (what an export leaves), never a user's folder."""
    target, run = Path(os.path.abspath(output)), Path(os.path.abspath(run_dir))
    if run.is_relative_to(target) or target.is_relative_to(run / "checkpoints"):
        raise click.ClickException(f"{output}: it is or holds the run directory or its "
                                   "checkpoints; write the model elsewhere")
    try:
        exists = check_target(target, replace=force, directory=True)
    except OSError as exc:
        raise click.ClickException(f"{output}: {describe_error(exc)}") from None
    if exists and not _is_export(target):
        raise click.ClickException(f"{output}: it is not a model directory (no config.json "
                                   f"or {ADAPTER}/{ADAPTER_CONFIG}); refusing to replace it")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise click.ClickException(f"{output}: {describe_error(exc)}") from None
    return target


def _hf(run_dir: str, step: int | None, output: str | None, force: bool) -> None:
    """A run's DCP checkpoint as a Hugging Face model directory (imports torch, once
    the run directory and the target are known to be usable)."""
    if output is None:
        raise click.UsageError("export hf needs -o DIR, the model directory to write")
    from fsdpspec.runfiles.resolved import FILENAME, read_resolved_spec

    run = Path(run_dir)
    if not os.path.lexists(run / FILENAME):
        raise click.ClickException(f"{run_dir}: not a run directory (no {FILENAME})")
    try:
        read_resolved_spec(run / FILENAME)
    except JsonFileError as exc:
        raise click.ClickException(f"{run_dir}: not a run directory: {exc.coded()}") from None
    target = _hf_target(run, output, force)
    try:
        from fsdpspec_runners.engine.errors import EngineError
        from fsdpspec_runners.engine.export import CheckpointUnverified, export_run
    except ImportError as exc:
        raise click.ClickException(f"export hf needs the training extra: {exc}") from None
    try:
        export_run(run, step, target, replace=force)
    except CheckpointUnverified as exc:
        raise click.ClickException(f"{CHECKPOINT_UNVERIFIED} {exc}") from None
    except EngineError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"wrote {output}")


@click.command("export")
@click.argument("target", type=click.Choice([*_TARGETS, "hf"]))
@click.argument("file", metavar="FILE")
@click.option("--step", type=click.IntRange(min=0, max=2**31 - 1), default=None,
              help="hf: the checkpoint of this step (default: the newest complete one).")
@click.option("--api", type=click.Choice(APIS), default=None,
              help="kubernetes: a training-operator PyTorchJob (the default) or a Kubeflow "
                   "Trainer 2 TrainJob on the torch-distributed runtime.")
@set_option
@output_option
@force_option
def command(target, file, step, api, overrides, output, force) -> None:
    """Write FILE as an sbatch script, a Kubeflow PyTorchJob (or, --api trainjob,
    TrainJob) manifest or an accelerate config. The spec is validated first; errors stop
    the export. An existing -o FILE is replaced only with --force, and never when it is
    the spec itself.

    `export hf RUN_DIR -o DIR` converts a run's checkpoint (mid-run too), verified
    against its manifest, into a Hugging Face model directory, streaming one unit at a
    time; an existing DIR is replaced only with --force."""
    if api is not None and target != "kubernetes":
        raise click.UsageError("--api applies to export kubernetes only")
    if target == "hf":
        _hf(file, step, output, force)
        return
    report = load_spec(file, overrides)
    exit_on_errors(report)
    try:
        text = _TARGETS[target](report, api or APIS[0])
    except LaunchError as exc:
        raise click.ClickException(str(exc)) from None
    deliver(text, output, executable=target == "slurm", replace=force,
            inputs=spec_inputs(report))
