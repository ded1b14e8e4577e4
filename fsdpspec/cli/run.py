"""`fsdpspec run job.yaml` — validate, plan, write the run directory, start torchrun."""

from __future__ import annotations

import json
import os
import shlex
import signal
import sys
from pathlib import Path

import click

from fsdpspec.atomicio import write_text
from fsdpspec.cli.options import emit, exit_on_errors, load_spec, resolve_format, set_option
from fsdpspec.cli.output import json_text
from fsdpspec.job.rundir import RunDir
from fsdpspec.runfiles.fault_settings import FaultSettingError, read_faults
from fsdpspec.runfiles.resolved import absolute_inputs, resolved_document
from fsdpspec.spec.v1 import JobSpec
from fsdpspec.validate import FileReport, check_by_hand
from fsdpspec_runners.local.preflight import PreflightError, check_before_start
from fsdpspec_runners.local.rundir_setup import (
    RunDirError,
    join_run_dir,
    layout_change,
    prepare_run_dir,
    resumes_a_checkpoint,
    run_dir_path,
)

# torchrun from this Python's torch (whatever `torchrun` on PATH is), minus the
# traceback it ends a failed run with (runners/local/quiet_torchrun.py).
LAUNCHER = (sys.executable, "-m", "fsdpspec_runners.local.quiet_torchrun")


def _node_overrides(nnodes: int | None, rdzv_endpoint: str | None) -> list[str]:
    """--nnodes / --rdzv-endpoint change the spec (the engine must see the same world);
    written as JSON strings so YAML reads them verbatim."""
    overrides = []
    if nnodes is not None:
        overrides.append(f"resources.nodes={nnodes}")
    if rdzv_endpoint is not None:
        overrides.append(f"launch.rdzv_endpoint={json.dumps(rdzv_endpoint)}")
    return overrides


def _fetch_hub_inputs(report: FileReport) -> bool:
    """Download the spec's Hub ids that are not cached (online only; `fsdpspec run` runs
    once per node, before torchrun, so each node fetches once); whether any was."""
    from fsdpspec.catalog.config_source import hub_input
    from fsdpspec.catalog.hub import HubError, cached_snapshot, fetch, offline
    from fsdpspec.spec.v1 import MODEL_HUB_INPUTS

    if report.spec is None or offline():
        return False
    fetched = False
    for field in MODEL_HUB_INPUTS:
        value = field.value(report.spec)
        hub = hub_input(value, report.base_dir) if value else None
        if hub is not None and cached_snapshot(hub) is None:
            click.echo(f"fetching {hub} from the Hugging Face Hub ({field.name})", err=True)
            try:
                fetch(hub, list(field.fetch))
            except HubError as exc:
                raise click.ClickException(f"{field.name}: {exc}") from None
            fetched = True
    return fetched


def _valid_spec(file: str, overrides: list[str]) -> tuple[FileReport, JobSpec]:
    report = load_spec(file, overrides)
    if _fetch_hub_inputs(report):
        report = load_spec(file, overrides)
    if report.spec is not None:
        check_by_hand(report)
    exit_on_errors(report)
    if report.diagnostics:  # warnings: shown, not fatal
        emit([report], resolve_format(None), err=True)
    assert report.spec is not None
    return report, absolute_inputs(report.spec, report.base_dir)


def _plan_line(report: FileReport) -> str:
    """One line from the planner: peak memory per device against its capacity."""
    from fsdpspec.plan.memory import GIB
    from fsdpspec.plan.planner import plan_job

    job = report.job
    assert job is not None
    if job.config is None:
        return "plan: a factory model without geometry: memory not estimated"
    if job.geometry is None:
        return f"plan: memory not estimated ({job.geometry_error})"
    plan = plan_job(job)
    unit = plan.accelerator.name if plan.accelerator.is_gpu else "process"
    verdict = "fits" if plan.fits else "DOES NOT FIT"
    return (f"plan: {verdict}: peak {plan.device.total / GIB:.2f} GiB per {unit} of "
            f"{plan.capacity / GIB:.2f} GiB; host {plan.host.peak / GIB:.1f} of "
            f"{plan.host_capacity / GIB:.1f} GiB per node")


def _dry_run(argv: list[str], env_added: dict[str, str], spec: JobSpec, run_dir: Path) -> None:
    assignments = [f"{k}={v}" for k, v in env_added.items()]
    click.echo(shlex.join([*assignments, *argv]) if not assignments
               else shlex.join(["env", *assignments, *argv]))
    click.echo(json_text(resolved_document(spec, run_dir)), nl=False)


def _start(spec: JobSpec, run_dir: Path, argv: list[str], env: dict[str, str],
           node_rank: int | None) -> int:
    from fsdpspec.runfiles.events import append_event
    from fsdpspec_runners.local.runlock import RunLockError, run_lock
    from fsdpspec_runners.local.supervise import run_supervised, stop_signals

    try:
        # Stops are caught from here on: one that comes before torchrun starts means it
        # never starts (`fsdpspec_runners.local.supervise.Stops`).
        with stop_signals() as stops, run_lock(spec, run_dir, node_rank):
            if node_rank:  # node 0 prepares the shared directory; the others join it
                join_run_dir(spec, run_dir)
                click.echo(f"joining {spec.metadata.name} in {run_dir}", err=True)
            else:
                change = layout_change(spec, run_dir)  # before the new spec replaces the old
                if not prepare_run_dir(spec, run_dir):
                    click.echo(f"starting {spec.metadata.name} in {run_dir}", err=True)
                elif resumes_a_checkpoint(spec, run_dir):
                    click.echo(f"resuming {spec.metadata.name} in {run_dir}", err=True)
                else:
                    click.echo(f"restarting {spec.metadata.name} in {run_dir}: it holds no "
                               "checkpoint, so training starts again at step 1", err=True)
                if change:
                    click.echo(change, err=True)
            title = spec.metadata.name if sys.stdout.isatty() else None
            code, stopped_by = run_supervised(argv, env, stops, progress_title=title)
            if not node_rank:
                append_event(run_dir, "exit", code=code,
                             signal=stopped_by.name if stopped_by else None)
    except (RunDirError, RunLockError) as exc:
        raise click.ClickException(str(exc)) from None
    except OSError as exc:  # events.jsonl replaced by something not a file meanwhile
        raise click.ClickException(f"{run_dir}: {exc.strerror or exc}") from None
    except KeyboardInterrupt:  # Ctrl-C before the supervisor took over the signals
        code, stopped_by = 128 + signal.SIGINT, signal.SIGINT
    if stopped_by is None:
        return code
    click.echo(f"stopped by {stopped_by.name}; {_after_stop(run_dir)}", err=True)
    # An interrupted run is not a finished one, even when the engine stopped cleanly.
    return code or 128 + stopped_by.value


def _after_stop(run_dir: Path) -> str:
    """What running again does: resume, or start over when no checkpoint was published
    (`latest` names the newest complete one, and is written only after it is)."""
    latest = RunDir(run_dir).latest
    if latest.is_file():
        name = latest.read_text(encoding="utf-8").strip()
        return f"`fsdpspec run` again resumes from checkpoint {name}"
    return "no checkpoint was written: `fsdpspec run` again starts from step 0"


@click.command("run")
@click.argument("file", metavar="FILE")
@set_option
@click.option("--dry-run", is_flag=True,
              help="Print the torchrun command and the resolved spec; start nothing.")
@click.option("--nnodes", type=click.IntRange(min=1, max=2**31 - 1), default=None,
              help="Number of nodes (overrides resources.nodes).")
@click.option("--node-rank", type=click.IntRange(min=0, max=2**31 - 1), default=None,
              help="This node's rank, when launching by hand on each node.")
@click.option("--rdzv-endpoint", default=None, metavar="HOST:PORT",
              help="Rendezvous endpoint (overrides launch.rdzv_endpoint).")
@click.option("--rdzv-id", default=None, metavar="ID",
              help="Rendezvous id shared by the nodes (default: metadata.name); a "
                   "scheduler's job id keeps two runs of one job apart.")
@click.option("--exit-record", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write this node's exit status to FILE (the exported sbatch script "
                   "reads it: a node that failed is not requeued when srun stopped the "
                   "others).")
def command(file, overrides, dry_run, nnodes, node_rank, rdzv_endpoint, rdzv_id,
            exit_record) -> None:
    """Validate FILE, then train it with torchrun on this machine.

    Errors are printed and nothing starts. The run directory (checkpoint.dir) gets
    resolved-spec.json, metrics.jsonl, events.jsonl (starts, resumes, checkpoints, how
    each launch ended), checkpoints/ and final/. On a terminal a live progress bar shows
    the training; otherwise plain log lines. Ctrl-C checkpoints and stops; running again
    resumes. `fsdpspec report RUN_DIR` draws the run.
    """
    try:
        _run(file, overrides, dry_run, nnodes, node_rank, rdzv_endpoint, rdzv_id)
    except click.ClickException as exc:
        _record_exit(exit_record, exc.exit_code)
        raise
    except SystemExit as exc:
        _record_exit(exit_record, exc.code if isinstance(exc.code, int) else 1)
        raise
    _record_exit(exit_record, 0)  # a dry run: the status this command exits with too


def _record_exit(record: Path | None, status: int) -> None:
    if record is None:
        return
    try:
        write_text(record, f"{status}\n", replace=False)  # never a file it did not write
    except FileExistsError:
        click.echo(f"fsdpspec: --exit-record {record} exists: not replaced", err=True)
    except OSError as exc:
        click.echo(f"fsdpspec: --exit-record {record}: {exc.strerror}", err=True)


def _run(file, overrides, dry_run, nnodes, node_rank, rdzv_endpoint, rdzv_id) -> None:
    from fsdpspec_runners.torchrun import build_torchrun_argv, launch_env

    report, spec = _valid_spec(file, [*overrides, *_node_overrides(nnodes, rdzv_endpoint)])
    if node_rank is not None and node_rank >= spec.resources.nodes:
        raise click.UsageError(f"--node-rank {node_rank} is not below the node count "
                               f"{spec.resources.nodes}")
    click.echo(_plan_line(report), err=True)
    run_dir = run_dir_path(spec)
    argv = build_torchrun_argv(spec, run_dir, node_rank=node_rank, rdzv_id=rdzv_id,
                               launcher=LAUNCHER)
    env = launch_env(spec, os.environ, os.cpu_count())
    try:
        read_faults(env)  # the engine reads them at its start: refuse a bad one here
    except FaultSettingError as exc:
        raise click.ClickException(str(exc)) from None
    if dry_run:
        added = {k: v for k, v in env.items() if os.environ.get(k) != v}
        _dry_run(argv, added, spec, run_dir)
        return
    try:
        check_before_start(report, spec, run_dir)
    except PreflightError as exc:
        raise click.ClickException(str(exc)) from None
    raise SystemExit(_start(spec, run_dir, argv, env, node_rank))
