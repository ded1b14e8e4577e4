"""Which candidates `tune --measure` measures: the fastest, then each one predicted far
enough from the last to be told apart."""

from __future__ import annotations

from fsdpspec.tune.measure import distinct


def test_candidates_within_the_share_of_a_faster_one_are_skipped() -> None:
    seconds = [1.00, 1.01, 1.02, 1.05, 1.06, 1.20, 1.21, 1.30]
    assert distinct(seconds, 6, 0.03) == [0, 3, 5, 7]
    assert distinct(seconds, 2, 0.03) == [0, 3]
    assert distinct(seconds, 8, 0.0) == list(range(8))
