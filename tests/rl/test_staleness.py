"""Staleness of trajectories against the learner, the bound on a step's batch, its figures."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from rstar2.rl.rl_config import RLConfig
from rstar2.rl.staleness import fresh_groups, staleness, staleness_metrics


@dataclass
class R:
    name: str
    policy_versions: list[int] = field(default_factory=list)


@pytest.mark.parametrize(
    ("versions", "learner", "expected"),
    [
        ([4], 4, 0),
        ([3, 4, 5], 5, 2),  # began under 3, finished under 5: its oldest token counts
        ([5, 3], 5, 2),
        ([], 7, 0),  # no generated turn
        ([-1], 0, 1),  # unknown version: older than any push
        ([6], 5, 0),  # never negative
    ],
)
def test_staleness_is_the_lag_of_the_oldest_turn(
    versions: list[int], learner: int, expected: int
) -> None:
    assert staleness(versions, learner) == expected


def test_a_group_with_one_rollout_over_the_bound_is_dropped_whole() -> None:
    groups = [
        [R("a0", [3]), R("a1", [4])],  # 1 and 0 stale at learner version 4
        [R("b0", [2, 4]), R("b1", [4])],  # b0 is 2 stale
        [R("c0", [4]), R("c1", [])],
    ]

    def versions(r: R) -> list[int]:
        return r.policy_versions

    kept, dropped = fresh_groups(groups, 4, 1, versions)
    assert [[r.name for r in g] for g in kept] == [["a0", "a1"], ["c0", "c1"]]
    assert dropped == 2
    kept, dropped = fresh_groups(groups, 4, 2, versions)
    assert len(kept) == 3 and dropped == 0
    kept, dropped = fresh_groups(groups, 4, 0, versions)
    assert [[r.name for r in g] for g in kept] == [["c0", "c1"]] and dropped == 4


def test_staleness_metrics_count_each_lag() -> None:
    assert staleness_metrics([0, 2, 2, 1, 0, 0]) == {
        "staleness_mean": 5 / 6,
        "staleness_max": 2,
        "staleness_hist": [3, 1, 2],
    }
    assert staleness_metrics([])["staleness_hist"] == []


def test_max_staleness_defaults_to_synchronous_and_switches_the_decoupled_loss_on() -> None:
    assert RLConfig().max_staleness == 0 and not RLConfig().decoupled
    assert RLConfig(max_staleness=2).decoupled
    assert RLConfig(tis_cap=2.0).decoupled


@pytest.mark.parametrize("bad", [-1, 1.5])
def test_a_bad_max_staleness_is_refused_by_name(bad: object) -> None:
    from rstar2.config import ConfigError

    with pytest.raises(ConfigError, match="rl.max_staleness"):
        RLConfig(max_staleness=bad).validate()  # type: ignore[arg-type]
