"""`fsdpspec plan --html/--svg/--png`: the device memory at the step's peak against the
device's capacity, the host memory per node, peak memory against GPU count, and the
ranked suggestions."""

from __future__ import annotations

from html import escape
from typing import Any

from fsdpspec.charts import page
from fsdpspec.charts.figures import PALETTE, figure, mark_data, png_bytes, svg_text
from fsdpspec.charts.specfacts import parameter_count, spec_facts
from fsdpspec.plan.memory import GIB
from fsdpspec.plan.planner import Plan
from fsdpspec.plan.scaling import curve_counts, peak_by_gpu_count


def _label(term: str) -> str:
    return term.replace("_", " ")


def _stacked_bar(terms: dict[str, int], capacity: int, usable: float | None,
                 name: str, unit: str) -> Any:
    """One horizontal bar of ``terms`` (GiB) with the capacity (and the usable share)."""
    fig, ax = figure(7.5, 2.6)
    left = 0.0
    bars = []
    for index, (term, size) in enumerate((t, s) for t, s in terms.items() if s > 0):
        bars += ax.barh([unit], [size / GIB], left=left, color=PALETTE[index % len(PALETTE)],
                        label=f"{_label(term)} {size / GIB:.2f}")
        left += size / GIB
    mark_data(bars, name)
    ax.axvline(capacity / GIB, color="#c62828", linewidth=2,
               label=f"capacity {capacity / GIB:.1f}")
    if usable is not None:
        ax.axvline(usable * capacity / GIB, color="#c62828", linestyle="--",
                   label=f"usable at the headroom target {usable * capacity / GIB:.1f}")
    ax.set_xlabel("GiB")
    ax.set_xlim(0, max(left, capacity / GIB) * 1.05)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7, frameon=False)
    return fig


def device_memory_figure(plan: Plan) -> Any:
    """Stacked device memory terms at the peak, against capacity and headroom."""
    device = plan.device
    terms = dict(device.peak.terms) | {"allocator_fragmentation": device.fragmentation,
                                       "cuda_context": device.cuda_context,
                                       "nccl_buffers": device.nccl}
    unit = "per GPU" if plan.accelerator.is_gpu else "per process"
    return _stacked_bar(terms, plan.capacity, 1.0 - plan.headroom_target, "device", unit)


def host_memory_figure(plan: Plan) -> Any:
    """Stacked host memory terms of the busiest node against its memory."""
    return _stacked_bar(plan.host.terms, plan.host_capacity, None, "host", "per node")


def gpu_count_figure(plan: Plan) -> Any:
    """Peak memory per device against GPU count, marking the spec's and the fewest."""
    spec = plan.spec
    counts = curve_counts(spec.world_size, plan.min_gpus)
    points = peak_by_gpu_count(plan.job, plan.accelerator, counts)
    fig, ax = figure(7.5, 3.2)
    xs, ys = [n for n, _ in points], [b / GIB for _, b in points]
    mark_data(ax.plot(xs, ys, marker="o", markersize=3, color=PALETTE[0],
                      label="peak per device"), "curve")
    ax.axhline(plan.capacity / GIB, color="#c62828", label="capacity")
    ax.axhline((1 - plan.headroom_target) * plan.capacity / GIB, color="#c62828",
               linestyle="--", label="usable at the headroom target")
    marks = [(spec.world_size, "this spec", "#1565c0")]
    if plan.min_gpus:
        marks.append((plan.min_gpus, "fewest that fit", "#2e7d32"))
    by_count = dict(points)
    for count, label, colour in marks:
        mark_data(ax.plot([count], [by_count[count] / GIB], marker="D", markersize=8,
                          linestyle="none", color=colour, label=f"{label}: {count}"),
                  f"mark-{label.split()[0]}")
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter("{x:g}")
    ax.set_yscale("log")
    ax.set_xlabel("GPUs")
    ax.set_ylabel("GiB per device")
    ax.legend(fontsize=7, frameon=False)
    return fig


def _suggestion_rows(plan: Plan) -> list[list[str]]:
    return [[str(rank), s.override, s.description, f"{s.saves_bytes / GIB:.2f}",
             "yes" if s.fits else "no"] for rank, s in enumerate(plan.suggestions, 1)]


def _header(plan: Plan) -> list[tuple[str, str]]:
    verdict = "fits" if plan.fits else "does not fit"
    return [
        *spec_facts(plan.spec),
        ("parameters", parameter_count(plan.parameters)),
        ("planned for", f"{plan.job.layout.world_size} × {plan.accelerator.name} "
                        f"(shard group {plan.job.layout.shard_size})"),
        ("peak per device", f"{plan.device.total / GIB:.2f} of {plan.capacity / GIB:.2f} GiB "
                            f"at {plan.device.peak.name}: {verdict}"),
        ("fewest GPUs that fit", str(plan.min_gpus) if plan.min_gpus else "none"),
    ]


def plan_html(plan: Plan) -> str:
    """The whole plan as one self-contained page."""
    spec = plan.spec
    charts = [
        page.chart("device", "Device memory at the step's peak",
                   svg_text(device_memory_figure(plan))),
        page.chart("host", "Host memory per node", svg_text(host_memory_figure(plan))),
        page.chart("gpus", "Peak memory per device against GPU count",
                   svg_text(gpu_count_figure(plan))),
    ]
    rows = _suggestion_rows(plan)
    suggestions = (page.table(["#", "override", "what it does", "saves GiB", "fits"], rows,
                              {0, 3}) if rows else "<p class=note>No suggestions.</p>")
    body = (f"<h1>Plan: {escape(spec.metadata.name)}</h1>"
            + page.facts(_header(plan))
            + f'<div class="charts">{"".join(charts)}</div>'
            + "<h2>Suggestions, best first</h2>" + suggestions)
    return page.document(f"fsdpspec plan — {spec.metadata.name}", body)


def device_memory_image(plan: Plan, fmt: str) -> bytes:
    """The device memory chart alone, as ``svg`` or ``png`` bytes."""
    fig = device_memory_figure(plan)
    return svg_text(fig).encode() if fmt == "svg" else png_bytes(fig)
