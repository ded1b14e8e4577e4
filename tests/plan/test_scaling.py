"""The GPU counts of the plan's memory-against-GPU-count curve, and its values."""

from __future__ import annotations

from pathlib import Path

from conftest import ROOT
from fsdpspec.plan.planner import plan_job
from fsdpspec.plan.scaling import curve_counts, peak_by_gpu_count
from fsdpspec.validate import check_file


def test_few_counts_are_all_drawn() -> None:
    assert curve_counts(8, 4) == [1, 2, 3, 4, 5, 6, 7, 8]
    assert curve_counts(16, 4) == list(range(1, 9)) + [16]  # the spec's count is kept


def test_many_counts_are_spread_on_a_log_scale_with_both_marks() -> None:
    counts = curve_counts(1000, 331)
    assert counts[0] == 1 and counts[-1] == 1000 and 331 in counts
    assert len(counts) <= 50 and counts == sorted(set(counts))


def test_none_fit_draws_up_to_twice_the_spec() -> None:
    assert curve_counts(3, None) == [1, 2, 3, 4, 5, 6]


def test_the_curve_agrees_with_the_plan_at_the_specs_count() -> None:
    report = check_file(Path(ROOT / "examples" / "llama3-70b-multinode.yaml"))
    plan = plan_job(report.job)
    points = dict(peak_by_gpu_count(plan.job, plan.accelerator, [8, report.spec.world_size]))
    assert points[report.spec.world_size] == plan.device.total
    assert points[8] > points[report.spec.world_size]  # fewer shards, more per rank
