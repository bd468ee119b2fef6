"""Down-sampling each prompt's rollouts to the G that train: Resample-on-Correct, or plain GRPO.

Resample-on-Correct (RoC, rStar2-Agent section 3.2)
---------------------------------------------------
Outcome-only reward cannot tell a clean correct solution from one that reached the right
number after five failed tool calls and three <answer> tags; both get r = 1, and plain GRPO
reinforces the sloppy one as much as the clean one (the paper sees the tool-error share inside
correct trajectories plateau at 10-15%). RoC over-samples N = 2G rollouts per prompt and keeps
G, choosing *which* positives survive by quality, while keeping negatives diverse:

    N = n_pos + n_neg                         (positive: reward > 0)
    k_neg = round_half_up(n_neg * G / N)      (= half of the negatives when N = 2G)
    k_pos = G - k_neg
    then, when min_each > 0, each kind keeps at least m = min(min_each, its count, G // 2)
    (the released code's rule: a group keeps both signs whenever it has them)

    negatives: k_neg drawn uniformly without replacement
               (failures are kept diverse: they show many ways to go wrong)
    positives: k_pos drawn without replacement, each draw picking rollout i with probability
               w_i / sum(w_j over those not yet drawn),  w_i = 1 / (p_total_i + eps)
               p_total = p_err + p_format     (see `penalty`; eps = penalty_eps, default 0.01)

With eps = 0.01 a flawless positive (p_total = 0) weighs 100, one with 10% failed tool calls
about 9, one that never used a tool (p_err = 0.5) about 2: clean solutions dominate, but a
group of only sloppy positives still keeps some of them. The released code's variant replaces
both draws with "the k lowest-penalty rollouts of each kind" (ties by position); it is
deterministic and sharper. If N <= G nothing is dropped.

Plain GRPO (the ablation) keeps the first G rollouts, or all of them.

Infrastructure failures (`build_training_batch`)
------------------------------------------------
A rollout with `infra_failure` set (a tool call the sandbox could not serve, a verification
that did not finish) has a reward that says nothing about the policy: it never trains, and
never counts as a positive or a negative. Its group goes on without it when few were hit:

    clean = rollouts of the prompt without infra_failure;  lost = N - |clean|
    lost > infra_max_share * N  ->  the whole group is dropped (groups_infra_dropped)
    else                        ->  selection (RoC or GRPO), the signal check and
                                    A = (r - mean) / std all run over `clean` only

Why not always keep the rest: failures are not independent of the rollouts. A rollout with
more tool calls has more chances to meet a failing sandbox, and an outage hits every call of a
step, so when most of a group was lost the survivors are chosen by the failure (say, the few
rollouts that never called the tool) and their relative advantages would teach that choice.
Why not always drop the group: a few lost rollouts leave a near-random subsample whose mean
and std estimate the group's about as well (RoC over-samples 2G and keeps G, so it usually
still keeps G), and dropping it would throw its signal away for one flaky call. Half is the
line between the two (`RLConfig.infra_max_share`, default 0.5).

Randomness comes only from the `RandomSource` passed in (anything with `random() -> float` in
[0, 1), e.g. a seeded `random.Random`), so a run is reproducible from its seed and tests can
script the draws. Uniform draws use the same sequential scheme with equal weights.

What it does not do: compute advantages (the caller does, on the kept rewards: `advantages`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

import torch

from rstar2.rl.advantages import group_advantages, has_signal
from rstar2.rl.penalty import PenaltyRecord, total_penalty
from rstar2.rl.rl_config import RLConfig


class RandomSource(Protocol):
    def random(self) -> float: ...


class RolloutRecord(PenaltyRecord, Protocol):
    reward: float
    infra_failure: str


R = TypeVar("R", bound=RolloutRecord)


def split_counts(n_pos: int, n_neg: int, size: int, min_each: int = 2) -> tuple[int, int]:
    """(k_pos, k_neg): how many positives and negatives RoC keeps out of a group."""
    if min(n_pos, n_neg, size, min_each) < 0:
        raise ValueError(f"negative count: n_pos={n_pos} n_neg={n_neg} size={size}")
    total = n_pos + n_neg
    if total <= size:
        return n_pos, n_neg
    k_neg = math.floor(n_neg * size / total + 0.5)
    floor_neg = min(min_each, n_neg, size // 2)
    floor_pos = min(min_each, n_pos, size // 2)
    low = max(floor_neg, size - n_pos)
    high = min(n_neg, size - floor_pos)
    k_neg = min(max(k_neg, low), high)
    return size - k_neg, k_neg


def sample_without_replacement(weights: Sequence[float], k: int, rng: RandomSource) -> list[int]:
    """k distinct indices; each draw picks i with probability w_i / sum of remaining weights."""
    if k < 0 or k > len(weights):
        raise ValueError(f"cannot draw {k} of {len(weights)} items")
    if any(not (w > 0 and math.isfinite(w)) for w in weights):
        raise ValueError(f"weights must be positive and finite, got {list(weights)}")
    remaining = list(range(len(weights)))
    chosen: list[int] = []
    for _ in range(k):
        total = sum(weights[i] for i in remaining)
        target = rng.random() * total
        acc = 0.0
        pick = remaining[-1]  # guards against float round-off at the top end
        for i in remaining:
            acc += weights[i]
            if target < acc:
                pick = i
                break
        remaining.remove(pick)
        chosen.append(pick)
    return chosen


def roc_sample(
    rewards: Sequence[float],
    penalties: Sequence[float],
    size: int,
    rng: RandomSource,
    min_each: int = 2,
    eps: float = 0.01,
) -> list[int]:
    """The paper's RoC: kept indices (ascending) of one prompt's rollouts."""
    pos, neg = _split(rewards, penalties)
    k_pos, k_neg = split_counts(len(pos), len(neg), size, min_each)
    kept_neg = sample_without_replacement([1.0] * len(neg), k_neg, rng)
    kept_pos = sample_without_replacement([1.0 / (penalties[i] + eps) for i in pos], k_pos, rng)
    return sorted([neg[j] for j in kept_neg] + [pos[j] for j in kept_pos])


def roc_lowest_penalty(
    rewards: Sequence[float], penalties: Sequence[float], size: int, min_each: int = 2
) -> list[int]:
    """The released code's RoC: the lowest-penalty rollouts of each kind (ties by position)."""
    pos, neg = _split(rewards, penalties)
    k_pos, k_neg = split_counts(len(pos), len(neg), size, min_each)
    by_penalty = sorted(pos, key=lambda i: (penalties[i], i))[:k_pos]
    by_penalty += sorted(neg, key=lambda i: (penalties[i], i))[:k_neg]
    return sorted(by_penalty)


def _split(rewards: Sequence[float], penalties: Sequence[float]) -> tuple[list[int], list[int]]:
    if len(rewards) != len(penalties):
        raise ValueError(f"{len(rewards)} rewards but {len(penalties)} penalties")
    if any(p < 0 or not math.isfinite(p) for p in penalties):
        raise ValueError(f"penalties must be finite and >= 0, got {list(penalties)}")
    pos = [i for i, r in enumerate(rewards) if r > 0]
    neg = [i for i, r in enumerate(rewards) if not r > 0]
    return pos, neg


def select_rollouts(group: Sequence[RolloutRecord], cfg: RLConfig, rng: RandomSource) -> list[int]:
    """Indices (ascending) of the rollouts of one prompt that go into training."""
    if cfg.algo == "grpo":
        n = len(group) if cfg.grpo_keep == "all" else min(len(group), cfg.group_size)
        return list(range(n))
    rewards = [float(t.reward) for t in group]
    penalties = [total_penalty(t, cfg.error_penalty, cfg.format_penalty) for t in group]
    if cfg.roc_variant == "lowest_penalty":
        return roc_lowest_penalty(rewards, penalties, cfg.group_size, cfg.min_each)
    return roc_sample(rewards, penalties, cfg.group_size, rng, cfg.min_each, cfg.penalty_eps)


@dataclass
class TrainingBatch(Generic[R]):
    """The rollouts that train this step, each with its advantage, and group statistics."""

    rollouts: list[R] = field(default_factory=list)
    advantages: list[float] = field(default_factory=list)
    groups_kept: int = 0
    groups_dropped: int = 0
    """Kept groups whose rewards were all equal after selection (no signal)."""
    groups_all_correct: int = 0
    """Groups (before selection) where every rollout was correct: the stage-3 trigger."""
    groups_all_wrong: int = 0
    infra_masked: int = 0
    """Rollouts hit by an infrastructure failure: never in `rollouts` (no loss on them)."""
    groups_infra_dropped: int = 0
    """Groups dropped whole because more than `infra_max_share` of them was hit."""

    def counts(self) -> dict[str, float]:
        """The batch's counters as step metrics (metrics.jsonl)."""
        return {
            "groups_kept": self.groups_kept,
            "groups_dropped": self.groups_dropped,
            "groups_all_correct": self.groups_all_correct,
            "groups_infra_dropped": self.groups_infra_dropped,
            "infra_masked": self.infra_masked,
            "trained_rollouts": len(self.rollouts),
        }


def build_training_batch(
    groups: Sequence[Sequence[R]], cfg: RLConfig, rng: RandomSource
) -> TrainingBatch[R]:
    """Mask out infrastructure failures, select each prompt's rollouts, drop groups without
    signal (or too many failures: see the module docstring), attach advantages."""
    batch: TrainingBatch[R] = TrainingBatch()
    for whole in groups:
        group = [t for t in whole if not t.infra_failure]
        lost = len(whole) - len(group)
        batch.infra_masked += lost
        if lost > cfg.infra_max_share * len(whole):
            batch.groups_infra_dropped += 1
            continue
        correct = [t.reward > 0 for t in group]
        batch.groups_all_correct += bool(group) and all(correct)
        batch.groups_all_wrong += bool(group) and not any(correct)
        kept = [group[i] for i in select_rollouts(group, cfg, rng)]
        rewards = [float(t.reward) for t in kept]
        if not has_signal(rewards):
            batch.groups_dropped += 1
            continue
        batch.groups_kept += 1
        batch.rollouts.extend(kept)
        advantages: torch.Tensor = group_advantages(rewards, cfg.adv_eps)
        batch.advantages.extend(advantages.tolist())
    return batch
