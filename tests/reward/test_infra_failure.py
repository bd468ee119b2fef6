"""Which reward outcomes mark a trajectory as an infrastructure failure."""

from __future__ import annotations

import pytest

from rstar2.reward.infra_failure import infra_failure_of


@pytest.mark.parametrize(
    ("status", "mark"),
    [
        ("ok", ""),
        ("no_answer", ""),
        ("truncated", ""),
        ("timeout", "reward:timeout"),
        ("error", "reward:error"),
    ],
)
def test_only_unfinished_verifications_mark(status: str, mark: str) -> None:
    assert infra_failure_of(status) == mark


def test_the_rollouts_own_mark_wins() -> None:
    assert infra_failure_of("timeout", "tool:queue_full") == "tool:queue_full"
    assert infra_failure_of("ok", "tool:queue_full") == "tool:queue_full"
