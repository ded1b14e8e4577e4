"""DPO's per-pair losses by hand: sigmoid with label smoothing (conservative DPO) and IPO
(normalised by completion tokens, as TRL computes it); the sigmoid loss without
smoothing is checked against TRL itself in test_dpo_trl.py."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from fsdpspec.spec.v1 import Dpo  # noqa: E402
from fsdpspec_runners.engine.preference import dpo_losses  # noqa: E402

# [chosen, rejected] log-probs of one pair: the policy's, the reference's, token counts.
POLICY, REFERENCE, COUNTS = [-10.0, -14.0], [-12.0, -13.0], [4, 5]


def _loss(**settings: object) -> float:
    return float(dpo_losses(Dpo(**settings), torch.tensor(POLICY), torch.tensor(REFERENCE),
                            torch.tensor(COUNTS))[0])


def test_sigmoid_with_label_smoothing() -> None:
    margin = 0.5 * ((-10 + 12) - (-14 + 13))  # beta × Δ = 1.5
    logsig = lambda x: -math.log1p(math.exp(-x))  # noqa: E731
    expected = -(1 - 0.2) * logsig(margin) - 0.2 * logsig(-margin)
    assert _loss(beta=0.5, label_smoothing=0.2) == pytest.approx(expected, rel=1e-6)


def test_ipo_is_the_per_token_margins_distance_from_one_over_two_beta() -> None:
    delta = (-10 + 12) / 4 - (-14 + 13) / 5  # 0.5 + 0.2
    assert _loss(beta=0.25, loss="ipo") == pytest.approx((delta - 1 / 0.5) ** 2, rel=1e-6)
