"""`fsdpspec plan FILE` — per-rank device memory term by term, host memory per node,
the verdict, the fewest GPUs that fit, and the cheapest fixes. `--trace` measures the
same job on fake tensors (the one plan path that imports torch)."""

from __future__ import annotations

from pathlib import Path

import click

from fsdpspec.catalog.accelerators import accelerator_names
from fsdpspec.cli.options import (
    PRICE,
    TOKENS,
    emit,
    exit_on_errors,
    resolve_format,
    set_option,
    spec_inputs,
)
from fsdpspec.cli.output import check_output, force_option, json_text, write_output
from fsdpspec.plan.budget import budget, scaling, spec_tokens
from fsdpspec.plan.planner import Plan, plan_job
from fsdpspec.plan.view import budget_json, plan_json, plan_text
from fsdpspec.spec.overrides import OverrideError
from fsdpspec.validate import FileReport, check_file


def _load(file: str, overrides: tuple[str, ...]):
    # The memory verdicts (FS201-FS203) are what the plan itself reports, so they are not
    # repeated as errors. Other errors (FS410 sdpa on Gemma 2, the QLoRA specs the engine
    # does not train…) block the run, not the plan: a job the planner can count is
    # planned, and its errors follow (`_blocked`). A spec that resolves no job, or a
    # model that cannot be counted (FS204), stops here.
    try:
        report = check_file(Path(file), overrides, ignore=("FS201", "FS202", "FS203"))
    except OverrideError as exc:
        raise click.UsageError(str(exc)) from None
    if report.job is None or report.job.geometry is None:
        exit_on_errors(report)
    if report.model_config is None:
        raise click.ClickException("a factory model needs `model.geometry` to be planned")
    return report


def _trace(plan: Plan) -> dict:
    from fsdpspec_runners.engine.trace import TraceError, trace_job

    try:
        result = trace_job(plan.job)
    except TraceError as exc:
        raise click.ClickException(str(exc)) from None
    except ImportError as exc:  # torch and transformers come with the [train] extra
        raise click.ClickException(f"--trace needs fsdpspec[train] installed: {exc}") from None
    analytic = plan.device.peak_allocated
    return {"peak_allocated_bytes": result.peak_bytes, "analytic_peak_allocated_bytes": analytic,
            "error": round((analytic - result.peak_bytes) / result.peak_bytes, 4),
            "shard_size": result.shard_size, "tensor_parallel": result.tensor_parallel,
            "micro_batches": result.micro_batches,
            "categories": result.categories}


def _trace_text(trace: dict) -> str:
    mib = 1 << 20
    group = trace["shard_size"] * trace["tensor_parallel"]
    mesh = (f" (dp_shard {trace['shard_size']} × tp {trace['tensor_parallel']})"
            if trace["tensor_parallel"] > 1 else "")
    lines = [f"trace (FakeTensorMode, fake process group of {group}{mesh}, "
             f"{trace['micro_batches']} micro-batch(es) per step): peak allocated "
             f"{trace['peak_allocated_bytes'] / mib:.1f} MiB, analytic "
             f"{trace['analytic_peak_allocated_bytes'] / mib:.1f} MiB "
             f"({100 * trace['error']:+.1f}%)",
             "  traced at its peak, by FSDPMemTracker category (MiB):"]
    lines += [f"  {name:<28}{value / mib:10.1f}" for name, value in trace["categories"].items()
              if value]
    return "\n".join(lines) + "\n"


PICTURES = ("html", "svg", "png")


def _picture_targets(kinds: list[str], output: str | None) -> dict[str, Path]:
    """Where each picture asked for goes: ``-o`` itself for one picture; for several,
    ``-o`` with each picture's suffix (``-o mem`` or ``-o mem.svg`` → mem.html,
    mem.svg …); plan.<kind> without ``-o``."""
    if output is None:
        return {kind: Path(f"plan.{kind}") for kind in kinds}
    if len(kinds) == 1:
        return {kinds[0]: Path(output)}
    path = Path(output)
    stem = path.with_suffix("") if path.suffix.lstrip(".") in PICTURES else path
    return {kind: stem.with_name(f"{stem.name}.{kind}") for kind in kinds}


def _write_pictures(plan: Plan, targets: dict[str, Path], *, force: bool,
                    inputs: list[Path]) -> None:
    """Draw the plan (matplotlib, imported only here) and write each picture
    atomically, once every target is known to be writable (none or all are written,
    but for a disk that fills between them)."""
    from fsdpspec.charts.figures import ChartsUnavailable

    for target in targets.values():
        check_output(target, replace=force, inputs=inputs)
    try:
        from fsdpspec.charts.plan_charts import device_memory_image, plan_html

        drawn = {kind: plan_html(plan).encode() if kind == "html"
                 else device_memory_image(plan, kind) for kind in targets}
    except ChartsUnavailable as exc:
        raise click.ClickException(str(exc)) from None
    for kind, target in targets.items():
        write_output(target, drawn[kind], replace=force, inputs=inputs)


def _forecast(plan: Plan, tokens: float | None, price: float | None):
    """The token budget on the plan's GPUs and where scaling stops paying (None, None
    when the device's peak is unknown)."""
    if plan.step is None:
        return None, None
    world = plan.job.layout.world_size
    source = "--tokens" if tokens is not None else "train.max_steps × global batch"
    found = budget(plan.step, world, tokens or spec_tokens(plan.spec), source, price)
    limit = scaling(plan.job, plan.accelerator, plan.min_gpus or world)
    return found, limit


@click.command("plan")
@click.argument("file", metavar="FILE")
@click.option("--gpus", type=click.IntRange(min=1, max=2**31 - 1), default=None,
              help="Plan for this many ranks instead of nodes × gpus_per_node.")
@click.option("--accelerator", type=click.Choice(accelerator_names()), default=None,
              help="Plan for this catalogue device instead of resources.accelerator.")
@set_option
@click.option("--format", "output_format", type=click.Choice(["text", "json"]),
              default="text", help="Output format.")
@click.option("--trace", is_flag=True,
              help="Also run the model on fake tensors (needs torch) and compare.")
@click.option("--html", is_flag=True,
              help="Also write the charts and suggestions as one self-contained HTML page.")
@click.option("--svg", is_flag=True, help="Also write the device memory chart as SVG.")
@click.option("--png", is_flag=True, help="Also write the device memory chart as PNG.")
@click.option("-o", "--output", metavar="PATH", default=None,
              help="Where --html/--svg/--png write (default plan.html/.svg/.png); with "
                   "several of them, -o is the name each one's suffix is given.")
@click.option("--tokens", type=TOKENS, default=None,
              metavar="N", help="Tokens to train (e.g. 1e12) for the budget line; default "
                                "train.max_steps × global batch × seq_len.")
@click.option("--price-per-gpu-hour", "price", type=PRICE,
              default=None, metavar="PRICE", help="Also price the budget.")
@force_option
def command(file, gpus, accelerator, overrides, output_format, trace, html, svg, png,
            output, tokens, price, force) -> None:
    """Predict per-GPU and host memory of a job spec, term by term.

    Exit 0 when the job fits, 1 when it does not (or the spec has errors), 2 on usage
    errors. JSON keys are stable: see docs/memory.md. The pictures need matplotlib
    (pip install 'fsdpspec[report]').
    """
    kinds = [kind for kind, asked in zip(PICTURES, (html, svg, png), strict=True) if asked]
    if output is not None and not kinds:
        raise click.UsageError("-o/--output needs --html, --svg or --png")
    report = _load(file, overrides)
    job = report.job
    if job.geometry is None:  # a model that could not be introspected (no torch)
        click.echo(f"info: {job.geometry_error}", err=True)
        raise SystemExit(1)
    plan = plan_job(job, world_size=gpus, accelerator=accelerator)
    if kinds:
        _write_pictures(plan, _picture_targets(kinds, output), force=force,
                        inputs=spec_inputs(report))
    traced = _trace(plan) if trace else None
    forecast, limit = _forecast(plan, tokens, price)
    if output_format == "json":
        data = plan_json(plan) | budget_json(forecast, limit) | (
            {"trace": traced} if traced else {})
        click.echo(json_text(data), nl=False)
    else:
        click.echo(plan_text(plan, forecast, limit) + (_trace_text(traced) if traced else ""),
                   nl=False)
    _blocked(report)
    raise SystemExit(0 if plan.fits else 1)


def _blocked(report: FileReport) -> None:
    """After the plan: the spec's errors, which block the run (exit 1)."""
    errors = [d for d in report.diagnostics if d.is_error]
    if not errors:
        return
    click.echo(f"the run is blocked by {len(errors)} error(s) (planned all the same):",
               err=True)
    emit([report], resolve_format(None), err=True)
    raise SystemExit(1)
