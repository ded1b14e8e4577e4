"""`fsdpspec tune FILE` — the fastest configurations of a job that fit, by the step-time
model, each validated; `--measure K` trains the top K a few steps each and prints what
they measured beside what was predicted; `-o` writes the winner as a spec."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Any

import click

from fsdpspec.catalog.accelerators import accelerator_names
from fsdpspec.cli.options import TOKENS, exit_on_errors, set_option
from fsdpspec.job.job import Job
from fsdpspec.plan.budget import SCALING_LOSS, spec_tokens
from fsdpspec.plan.memory import GIB
from fsdpspec.spec.overrides import OverrideError
from fsdpspec.tune.pipeline import MEMORY_VERDICTS, Ranking, tune_file
from fsdpspec.tune.search import Candidate, gpu_counts
from fsdpspec.tune.search_space import LEVER_KEYS
from fsdpspec.validate import FileReport, check_file

# `--measure K` validates up to this many times K candidates to find K that differ.
MEASURE_DEPTH = 4


def _load(file: str, overrides: list[str]) -> FileReport:
    try:
        report = check_file(Path(file), overrides, ignore=MEMORY_VERDICTS)
    except OverrideError as exc:
        raise click.UsageError(str(exc)) from None
    exit_on_errors(report)
    if report.model_config is None:
        raise click.ClickException("a factory model needs `model.geometry` to be tuned")
    job = report.job
    assert job is not None
    if job.geometry is None:  # a model that could not be introspected (no torch)
        raise click.ClickException(str(job.geometry_error))
    return report


def _what_if(file: str, overrides: list[str], gpus: int | None, nodes: int | None,
             accelerator: str | None) -> list[str]:
    """--gpus / --nodes / --accelerator as `--set` lines, so that validation, the table
    and the written winner all see them."""
    extra = []
    if accelerator is not None:
        extra.append(f"resources.accelerator={accelerator}")
    if nodes is not None:
        extra.append(f"resources.nodes={nodes}")
    if gpus is not None:
        per_node = _load(file, overrides).spec.resources.gpus_per_node
        if gpus <= per_node:
            extra += ["resources.nodes=1", f"resources.gpus_per_node={gpus}"]
        elif gpus % per_node == 0 and nodes is None:
            extra.append(f"resources.nodes={gpus // per_node}")
        else:
            raise click.UsageError(f"--gpus {gpus} is not a whole number of nodes of "
                                   f"{per_node} (resources.gpus_per_node)")
    return extra


def _row(rank: int, c: Candidate, tokens: float | None) -> str:
    s = c.step
    memory = f"{c.device_bytes / GIB:.1f} of {c.capacity / GIB:.1f}"
    sets = " ".join(f"--set {o}" for o in c.overrides) or "(the spec as written)"
    budget = ""
    if tokens is not None:
        hours = c.hours(tokens)
        budget = f"{c.gpus:>5}  {hours:>10,.1f}  {hours * c.gpus:>11,.0f}  "
    return (f"{rank:>4}  {budget}{s.tokens_per_s:>12,.1f}  {s.seconds:>8.3f}  "
            f"{100 * s.mfu:>5.1f}%  {s.bound:<14}  {memory:>16}  {sets}")


def _table(ranking: Ranking, seconds: float, top: int, tokens: float | None = None,
           tokens_from: str = "", max_gpus: int | None = None) -> str:
    spec = ranking.base.spec
    assert spec is not None
    device = spec.device()
    unit = "GPU" if device.is_gpu else "process"
    units = "GPUs" if device.is_gpu else "processes"
    levers = ", ".join(ranking.open_keys) or "none (every lever is set: use --vary)"
    lines = [f"tune {spec.metadata.name}: {spec.world_size} × {device.name}; varying {levers}"]
    if device.name == "cpu" and not device.is_gpu:
        lines.append("placeholder CPU rates: the times are relative; --measure calibrates "
                     "this machine")
    if tokens is not None:
        within = f" on at most {max_gpus} {units}" if max_gpus else ""
        lines.append(f"ranked by the time to train {tokens:,.0f} tokens ({tokens_from})"
                     f"{within}; hours at the step-time model's prediction (docs/tune.md)")
    if ranking.past_scaling:
        lines.append(f"{ranking.past_scaling} candidate(s) left out past where scaling pays: "
                     f"tokens/s per {unit} more than {100 * SCALING_LOSS:.0f}% below the "
                     f"same levers' at the fewest {units} that fit")
    budget = f"{units:>5}  {'hours':>10}  {unit + '-hours':>11}  " if tokens else ""
    lines += [
             f"{ranking.tried} candidates, {ranking.fitting} fit with "
             f"{100 * spec.resources.memory_headroom:.0f}% headroom; searched in "
             f"{seconds:.2f} s; the {len(ranking.ranked[:top])} fastest that validate:",
             f"rank  {budget}tokens/s/{unit:<4}  step (s)    MFU  bound           memory GiB"
             "        --set"]
    lines += [_row(i, c, tokens) for i, c in enumerate(ranking.ranked[:top], 1)]
    for candidate, problem in ranking.rejected:
        sets = " ".join(f"--set {o}" for o in candidate.overrides)
        lines.append(f"  not shown, does not validate: {sets}: {problem.code} {problem.message}")
    if not ranking.ranked:
        lines.append("no candidate fits and validates")
    return "\n".join(lines) + "\n"


def _candidate_json(rank: int, c: Candidate, tokens: float | None) -> dict[str, Any]:
    s = c.step
    data = {"rank": rank, "overrides": c.overrides, "tokens_per_s_per_device": s.tokens_per_s,
            "step_seconds": s.seconds, "mfu": s.mfu, "bound": s.bound,
            "device_bytes": c.device_bytes, "capacity_bytes": c.capacity,
            "host_bytes": c.host_bytes, "gpus": c.gpus}
    if tokens is not None:
        data |= {"hours": c.hours(tokens), "gpu_hours": c.hours(tokens) * c.gpus}
    return data


def _json(ranking: Ranking, measured: list[dict[str, Any]] | None, top: int,
          tokens: float | None = None) -> dict[str, Any]:
    data: dict[str, Any] = {
        "open_levers": list(ranking.open_keys), "tried": ranking.tried,
        "fitting": ranking.fitting, "past_scaling": ranking.past_scaling, "tokens": tokens,
        "candidates": [_candidate_json(i, c, tokens)
                       for i, c in enumerate(ranking.ranked[:top], 1)],
        "rejected": [{"overrides": c.overrides, "code": d.code, "message": d.message}
                     for c, d in ranking.rejected]}
    if measured is not None:
        data["measured"] = measured
    return data


def _calibrated(file: str, report: FileReport, calibration: str | None,
                resources: dict[str, Any] | None, echo) -> list[str]:
    """The calibration's `--set` lines: those of ``resources`` (read from the file
    ``calibration``), or measured now and written beside the measured runs."""
    from fsdpspec.tune import measure as m
    from fsdpspec.tune.rundirs import fresh_dir

    if resources is not None:
        echo(f"calibration: {calibration}")
        return m.calibration_overrides(resources)
    from fsdpspec.runfiles.resolved import absolute_inputs, write_resolved_spec
    from fsdpspec_runners.torchrun import launch_env

    job = report.job
    assert job is not None
    spec = job.spec
    folder = _tune_dir(job)
    # The calibration builds the job's own model, from the same file the engine reads.
    resolved = write_resolved_spec(absolute_inputs(spec, Path(file).parent),
                                   fresh_dir(folder, CALIBRATION_RUN))
    result = m.calibrate(job, resolved, folder / "calibration.json",
                         launch_env(spec, os.environ, os.cpu_count()))
    resources = m.calibrated_resources(spec, result)
    target = folder / "accelerator.yaml"
    m.write_calibration(target, resources, result)
    echo(f"calibration ({result['ranks']} process(es), {result['backend']}): "
         + ", ".join(f"{k} {v:.4g}" for k, v in result.items() if isinstance(v, float))
         + f"; written to {target}")
    return m.calibration_overrides(resources)


def _tune_dir(job: Job) -> Path:
    """Where tune calibrates and measures: beside the job's run directory."""
    return Path(f"{job.rundir.root}-tune")


CALIBRATION_RUN = "calibration-run"


def _candidate(index: int) -> str:
    """The directory the candidate ranked ``index + 1`` trains in."""
    return f"candidate-{index + 1}"


def _check_measure_dirs(report: FileReport, ranked: int) -> None:
    """Refuse before anything trains if a directory --measure may train in (the
    calibration's, one per candidate of the ``ranked`` fastest) exists and is not one
    tune made (a planted symlink, a user's directory)."""
    from fsdpspec.tune.rundirs import check_free

    assert report.job is not None
    folder = _tune_dir(report.job)
    # The names there, read from the folder: never counted up to K (a user's number).
    present = os.listdir(folder) if folder.is_dir() and not folder.is_symlink() else []
    ranks = {name: re.fullmatch(r"candidate-([1-9][0-9]{0,17})", name) for name in present}
    check_free(folder, [name for name, rank in ranks.items() if name == CALIBRATION_RUN
                        or (rank and int(rank.group(1)) <= ranked)])


def _measure(file: str, overrides: list[str], ranking: Ranking, k: int, steps: int,
             rounds: int, echo) -> tuple[list[dict[str, Any]], Candidate]:
    """Train the fastest ``k`` that a measurement can tell apart, ``rounds`` times each,
    every round visiting them in the order opposite to the last (so that a load
    drifting over the rounds weighs on all alike); their records and the measured winner."""
    from fsdpspec.tune import measure as m
    from fsdpspec.tune.rundirs import fresh_dir

    assert ranking.base.job is not None
    folder = _tune_dir(ranking.base.job)
    # On a CPU the machine may be shared: its processes' CPU time is what a step costs.
    by_cpu = not ranking.base.spec.device().is_gpu
    chosen = m.distinct([c.step.seconds for c in ranking.ranked], k)
    if len(chosen) < k:
        echo(f"measuring {len(chosen)} of {k}: the other candidates are predicted within "
             f"{100 * m.DISTINCT:.0f}% of a faster one's step, closer than a measurement "
             "tells apart")
    results: dict[int, m.Measured] = {}
    for round_ in range(rounds):
        for index in chosen if round_ % 2 == 0 else chosen[::-1]:
            candidate = ranking.ranked[index]
            result = m.measure(Path(file), [*overrides, *candidate.overrides],
                               fresh_dir(folder, _candidate(index)), steps)
            results[index] = results[index] + result if index in results else result
            echo(f"  round {round_ + 1}/{rounds}, rank {index + 1}: "
                 f"{result.cpu_seconds if by_cpu else result.seconds:.3f} s per step "
                 f"({'CPU' if by_cpu else 'wall'}; predicted {candidate.step.seconds:.3f})")
    rows, records = [], []
    for index in chosen:
        candidate, result = ranking.ranked[index], results[index]
        measured = result.cpu_seconds if by_cpu else result.seconds
        records.append((candidate, measured))
        rows.append({"rank": index + 1, "overrides": candidate.overrides,
                     "predicted_seconds": candidate.step.seconds,
                     "measured_seconds": measured, "wall_seconds": result.seconds,
                     "cpu_seconds": result.cpu_seconds, "measured_steps": len(result.cpu),
                     "round_spread": result.spread,
                     "measured_by": "cpu" if by_cpu else "wall"})
    winner = min(records, key=lambda r: r[1])[0]
    return rows, winner


def _measured_text(rows: list[dict[str, Any]], rho: float | None) -> str:
    by = "rank 0's median CPU time per step" if rows and rows[0]["measured_by"] == "cpu" \
        else "the fastest step"
    lines = [f"measured on this machine ({by}, after each run's first step):",
             "rank  predicted (s)  measured (s)  wall, fastest (s)  measured/predicted  "
             "rounds apart  --set"]
    for r in rows:
        ratio = r["measured_seconds"] / r["predicted_seconds"]
        sets = " ".join(f"--set {o}" for o in r["overrides"]) or "(the spec as written)"
        lines.append(f"{r['rank']:>4}  {r['predicted_seconds']:>13.3f}  "
                     f"{r['measured_seconds']:>12.3f}  {r['wall_seconds']:>17.3f}  "
                     f"{ratio:>18.2f}  {100 * r['round_spread']:>11.1f}%  {sets}")
    if rho is not None:
        lines.append(f"Spearman rank correlation, predicted vs measured step time: {rho:.2f}")
    return "\n".join(lines) + "\n"


@click.command("tune")
@click.argument("file", metavar="FILE")
@click.option("--vary", multiple=True, metavar="KEY",
              type=click.Choice(["all", *LEVER_KEYS]),
              help="A lever to search (repeatable; `all`: every one). Default: the levers "
                   "the spec leaves unset.")
@click.option("--gpus", type=click.IntRange(min=1), default=None,
              help="Tune for this many ranks (whole nodes of gpus_per_node, or one node).")
@click.option("--nodes", type=click.IntRange(min=1), default=None,
              help="Tune for this many nodes.")
@click.option("--accelerator", type=click.Choice(accelerator_names()), default=None,
              help="Tune for this catalogue device instead of resources.accelerator.")
@set_option
@click.option("--top", type=click.IntRange(min=1), default=8, show_default=True,
              help="How many validated candidates to show.")
@click.option("--format", "output_format", type=click.Choice(["text", "json"]),
              default="text", help="Output format.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
              help="Write the winner as a spec (comments kept, validated first).")
@click.option("--force", is_flag=True, help="Let -o replace an existing file.")
@click.option("--measure", "measure_k", type=click.IntRange(min=1), default=None,
              metavar="K", help="Train the top K a few steps each here and compare.")
@click.option("--steps", type=click.IntRange(min=2), default=4,
              show_default=True, help="Steps per measured run (the first is not timed).")
@click.option("--rounds", type=click.IntRange(min=1), default=2, show_default=True,
              help="Runs per measured candidate, in alternating order.")
@click.option("--calibration", type=click.Path(dir_okay=False, exists=True), default=None,
              help="With --measure: reuse this calibration (an accelerator.yaml it wrote).")
@click.option("--tokens", type=TOKENS, default=None, metavar="N",
              help="Rank by the time to train N tokens (default with --max-gpus: "
                   "train.max_steps × global batch × seq_len).")
@click.option("--max-gpus", type=click.IntRange(min=1, max=2**20), default=None, metavar="M",
              help="Also search the GPU count, up to M (whole nodes), ranked by time to train.")
def command(file, vary, gpus, nodes, accelerator, overrides, top, output_format, output,
            force, measure_k, steps, rounds, calibration, tokens, max_gpus) -> None:
    """Rank the configurations of a job spec that fit by predicted tokens/s.

    Searches sharding strategy and hybrid shard group, activation checkpointing,
    micro-batch (accumulation keeps the global batch) and CPU offload; keeps what fits
    with the spec's headroom and validates; prints the fastest with memory, step time,
    what bounds it and the --set lines that make it. --tokens N ranks by the time to
    train N tokens; --max-gpus M also searches the GPU count up to M, leaving out counts
    past where scaling pays (tokens/s per GPU down more than 10 %). Exit 0 when a
    candidate fits, 1 when none does (or the spec has errors), 2 on usage errors. See
    docs/tune.md.
    """
    from fsdpspec.cli.output import json_text, write_output
    from fsdpspec.tune.measure import MeasureError, read_calibration, spearman
    from fsdpspec.tune.rundirs import NotMadeByTune
    from fsdpspec.tune.write import WinnerNotWritten, validated_winner

    if calibration is not None and measure_k is None:
        raise click.UsageError("--calibration needs --measure")
    if max_gpus is not None and (gpus is not None or nodes is not None):
        raise click.UsageError("--max-gpus searches the GPU count: drop --gpus/--nodes")
    if max_gpus is not None and measure_k is not None:
        raise click.UsageError("--measure trains on this machine's processes: it cannot "
                               "measure other GPU counts (drop --max-gpus)")

    def echo(text: str) -> None:
        click.echo(text, err=True)

    chosen = [*overrides, *_what_if(file, list(overrides), gpus, nodes, accelerator)]
    base = _load(file, chosen)
    settings, measured, rho = chosen, None, None
    # Measuring ranks deeper: the candidates it measures must differ (m.distinct).
    ranked = max(top, MEASURE_DEPTH * (measure_k or 0))
    try:
        if measure_k is not None:
            # Both before anything trains: the calibration file, the directories.
            resources = read_calibration(Path(calibration)) if calibration else None
            _check_measure_dirs(base, ranked)
            settings = [*chosen, *_calibrated(file, base, calibration, resources, echo)]
            base = _load(file, settings)
        spec = base.spec
        assert spec is not None
        counts = gpu_counts(spec.resources.gpus_per_node, max_gpus) if max_gpus else []
        tokens_from = "--tokens" if tokens is not None else "train.max_steps × global batch"
        if tokens is None and max_gpus is not None:
            tokens = spec_tokens(spec)
        start = time.perf_counter()
        ranking = tune_file(Path(file), settings, base, vary, ranked, counts)
        seconds = time.perf_counter() - start
        winner = ranking.ranked[0] if ranking.ranked else None
        if measure_k is not None and winner is not None:
            measured, winner = _measure(file, settings, ranking, measure_k, steps, rounds,
                                        echo)
            if len(measured) > 1:
                rho = spearman([r["predicted_seconds"] for r in measured],
                               [r["measured_seconds"] for r in measured])
    except (MeasureError, NotMadeByTune) as exc:
        raise click.ClickException(str(exc)) from None
    if output_format == "json":
        data = _json(ranking, measured, top, tokens)
        if measured is not None:
            data["spearman"] = rho
        click.echo(json_text(data), nl=False)
    else:
        click.echo(_table(ranking, seconds, top, tokens, tokens_from, max_gpus), nl=False)
        if measured is not None:
            click.echo(_measured_text(measured, rho), nl=False)
    if winner is None:
        raise SystemExit(1)
    if output is not None:
        # The calibration describes this machine, not the job: it stays in its own file.
        try:
            text = validated_winner(base.text, [*chosen, *winner.overrides], Path(output))
        except WinnerNotWritten as exc:
            raise click.ClickException(str(exc)) from None
        write_output(output, text.encode("utf-8"), replace=force)
