"""Staleness: how many policy versions a trajectory lags the learner that trains on it.

Policy version v is the number of learner updates applied (0: the policy RL started from).
Step t's update moves the learner from version t-1 to t, so the learner that trains on step
t's batch is at version t-1. A trajectory's turns each carry the version that generated them
(`Trajectory.policy_versions`, one per turn: updates reach an engine between turns); its
staleness is the learner's version minus its *oldest* turn's, the usual definition (AReaL's
"off-policyness", verl's and SkyRL's staleness): a trajectory that began under version 3 and
finished under 5 is 2 stale for a learner at 5.

With `rl.max_staleness = k` a step's batch holds only trajectories at most k stale. GRPO's
advantages and RoC's down-sampling compare a prompt's rollouts with each other, so a prompt's
group is kept or dropped whole: one too-stale rollout drops its group.

A trajectory with no generated turn (its prompt did not fit) is 0 stale; a turn of unknown
version (-1: generated before the first push reached its engine) is as stale as the whole run
plus one, so it never passes a bound it cannot be shown to meet.

What it does not do: compute a loss (`rstar2.rl.policy_loss` takes the behaviour logprobs
the stale engines recorded).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")


def staleness(versions: Sequence[int], learner_version: int) -> int:
    """Versions the oldest turn lags `learner_version` (0 for no turns)."""
    if not versions:
        return 0
    return max(0, learner_version - min(versions))


def fresh_groups(
    groups: Sequence[Sequence[T]],
    learner_version: int,
    max_staleness: int,
    versions: Callable[[T], Sequence[int]],
) -> tuple[list[list[T]], int]:
    """The groups whose every rollout is at most `max_staleness` stale, and how many rollouts
    the dropped groups held. `versions`: a rollout's policy versions by turn."""
    kept: list[list[T]] = []
    dropped = 0
    for group in groups:
        if all(staleness(versions(r), learner_version) <= max_staleness for r in group):
            kept.append(list(group))
        else:
            dropped += len(group)
    return kept, dropped


def staleness_metrics(values: Sequence[int]) -> dict[str, object]:
    """A step's staleness figures: mean, max and the histogram (`staleness_hist[i]`: how many
    trajectories were i versions stale)."""
    if not values:
        return {"staleness_mean": 0.0, "staleness_max": 0, "staleness_hist": []}
    hist = [0] * (max(values) + 1)
    for v in values:
        hist[v] += 1
    return {
        "staleness_mean": sum(values) / len(values),
        "staleness_max": max(values),
        "staleness_hist": hist,
    }
