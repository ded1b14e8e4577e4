"""`fsdpspec report RUN_DIR`: the run's curves against step with its resumes marked, a
header with the spec's key facts and the status, and planned against measured memory."""

from __future__ import annotations

from html import escape
from typing import Any

from fsdpspec.catalog.config_source import ModelConfigError
from fsdpspec.charts import page
from fsdpspec.charts.figures import PALETTE, figure, mark_data, svg_text
from fsdpspec.charts.rundata import RunData
from fsdpspec.charts.specfacts import parameter_count, spec_facts
from fsdpspec.job.job import resolve
from fsdpspec.plan.memory import GIB
from fsdpspec.plan.planner import Plan, plan_job

# (chart name, title, y label, [(metrics key, legend label)], scale applied to the value)
CURVES = (
    ("loss", "Loss", "loss", [("loss", "train loss"), ("eval_loss", "eval loss")], 1.0),
    ("lr", "Learning rate", "lr", [("lr", "learning rate")], 1.0),
    ("grad_norm", "Gradient norm", "norm", [("grad_norm", "gradient norm")], 1.0),
    ("tokens_per_s", "Throughput", "tokens/s", [("tokens_per_s", "tokens/s")], 1.0),
    ("mfu", "Model FLOPs utilisation", "MFU %", [("mfu", "MFU")], 100.0),
    ("memory", "Peak memory per rank", "GiB",
     [("peak_mem_allocated_gib", "allocated"), ("peak_mem_reserved_gib", "reserved"),
      ("peak_rss_gib", "resident set (CPU process)")], 1.0),
)
# The metrics a report reads (read_run keeps a thinned curve of each).
DRAWN_KEYS = tuple(key for *_, pairs, _ in CURVES for key, _ in pairs)


def _series(run: RunData, key: str, scale: float) -> tuple[list, list]:
    steps, values = run.metrics.curves[key].points()
    return steps, [value * scale for value in values]


def curve_figure(run: RunData, name: str, ylabel: str, keys: list[tuple[str, str]],
                 scale: float) -> Any | None:
    """One metric (or a few of one kind) against step; None when none was logged."""
    drawn = [(label, *_series(run, key, scale)) for key, label in keys]
    drawn = [(label, xs, ys) for label, xs, ys in drawn if xs]
    if not drawn:
        return None
    fig, ax = figure(6.0, 2.8)
    for index, (label, xs, ys) in enumerate(drawn):
        lines = ax.plot(xs, ys, color=PALETTE[index], marker="o" if len(xs) < 30 else None,
                        markersize=3, label=label)
        mark_data(lines, f"{name}-{index}")
    for index, step in enumerate(run.history.resumes):
        mark_data([ax.axvline(step, color="#757575", linestyle=":",
                              label="resumed" if index == 0 else None)], f"{name}-resume")
    ax.set_xlabel("step")
    ax.set_ylabel(ylabel)
    ax.set_xlim(0, max(run.spec.train.max_steps, max(max(xs) for _, xs, _ in drawn)))
    if len(drawn) > 1 or run.history.resumes:
        ax.legend(fontsize=7, frameon=False)
    return fig


def _plan(run: RunData) -> Plan | None:
    """The planner's view of the run's spec; None when the model cannot be counted."""
    try:
        job = resolve(run.spec, run.run_dir)
    except (ModelConfigError, OSError):
        return None
    return plan_job(job) if job.geometry is not None else None


def memory_pairs(run: RunData, plan: Plan | None) -> list[tuple[str, float | None, float | None]]:
    """(quantity, planned GiB, measured GiB) per rank: allocated and reserved on a GPU,
    the process's total on a CPU (its resident set, which also holds Python and torch)."""
    if run.spec.device().is_gpu:
        return [
            ("peak allocated", plan and plan.device.peak_allocated / GIB,
             run.metrics.peak("peak_mem_allocated_gib")),
            ("peak reserved", plan and plan.device.peak_reserved / GIB,
             run.metrics.peak("peak_mem_reserved_gib")),
        ]
    return [("per process\n(measured: whole\nresident set)", plan and plan.device.total / GIB,
             run.metrics.peak("peak_rss_gib"))]


def memory_figure(pairs: list[tuple[str, float | None, float | None]],
                  capacity_gib: float | None) -> Any | None:
    """Planned beside measured bars; None when neither is known."""
    if all(p is None and m is None for _, p, m in pairs):
        return None
    fig, ax = figure(6.0, 1.2 + 0.8 * len(pairs))
    height = 0.38
    for row, (_, planned, measured) in enumerate(pairs):
        for offset, value, label, colour in ((-height / 2, planned, "planned", PALETTE[0]),
                                             (height / 2, measured, "measured", PALETTE[1])):
            if value is None:
                continue
            bars = ax.barh([row + offset], [value], height=height, color=colour,
                           label=label if row == 0 else None)
            mark_data(bars, f"memory-{label}-{row}")
            ax.annotate(f"{value:.2f}", (value, row + offset), xytext=(3, 0),
                        textcoords="offset points", va="center", fontsize=7)
    if capacity_gib:
        ax.axvline(capacity_gib, color="#c62828", label=f"capacity {capacity_gib:.1f}")
    ax.set_yticks(range(len(pairs)), [q for q, _, _ in pairs])
    ax.set_xlabel("GiB per rank")
    ax.legend(fontsize=7, frameon=False, loc="lower right")
    return fig


_BADGE = {"finished": "ok", "running": "running", "failed": "bad", "stopped": "other",
          "interrupted": "bad", "not started": "other"}


def _header(run: RunData, plan: Plan | None) -> str:
    status = run.status
    checkpoint, history = run.history.last_checkpoint, run.history
    resumed = ", ".join(map(str, history.resumes)) or "never"
    if history.resume_count > len(history.resumes):
        resumed = f"{history.resume_count} times, lately at {resumed}"
    pairs = [
        *spec_facts(run.spec),
        ("parameters", parameter_count(plan.parameters) if plan else "not counted"),
        ("steps", f"{run.last_step} of {run.spec.train.max_steps}"),
        ("resumed at", resumed),
        ("last checkpoint", f"step {checkpoint['step']}" if checkpoint else "none"),
        ("run directory", str(run.run_dir.resolve())),
    ]
    badge = f'<span class="status {_BADGE[status.state]}">{escape(status.state)}</span>'
    return (f"<h1>Run: {escape(run.spec.metadata.name)}</h1>"
            f"<p>{badge} {escape(status.detail)}</p>" + page.facts(pairs))


def run_html(run: RunData) -> str:
    """The whole report as one self-contained page."""
    plan = _plan(run)
    charts = []
    for name, title, ylabel, keys, scale in CURVES:
        fig = curve_figure(run, name, ylabel, keys, scale)
        if fig is not None:
            charts.append(page.chart(name, title, svg_text(fig)))
    capacity = plan.capacity / GIB if plan else None
    fig = memory_figure(memory_pairs(run, plan), capacity)
    if fig is not None:
        charts.append(page.chart("planned-vs-measured", "Memory per rank: planned and measured",
                                 svg_text(fig)))
    note = "" if run.metrics.records else "<p class=note>No metrics logged yet.</p>"
    body = _header(run, plan) + note + f'<div class="charts">{"".join(charts)}</div>'
    return page.document(f"fsdpspec report — {run.spec.metadata.name}", body)
