from __future__ import annotations

import math
import random

import pytest

from rstar2.config import ConfigError
from rstar2.rl.resampling import (
    TrainingBatch,
    build_training_batch,
    roc_lowest_penalty,
    roc_sample,
    sample_without_replacement,
    select_rollouts,
    split_counts,
)
from rstar2.rl.rl_config import RLConfig

from .records import Rec, ScriptedRandom

REWARDS = [1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0, 0.0]
PENALTIES = [0.0, 0.49, 0.99, 1.5, 0.5, 1.0, 0.24, 1.5]


@pytest.mark.parametrize(
    ("n_pos", "n_neg", "size", "min_each", "expected"),
    [
        (16, 16, 16, 2, (8, 8)),
        (8, 24, 16, 2, (4, 12)),
        (1, 31, 16, 2, (1, 15)),  # the lone positive survives
        (31, 1, 16, 2, (15, 1)),
        (3, 5, 4, 0, (1, 3)),  # paper halves, rounded half up for negatives
        (3, 5, 4, 2, (2, 2)),  # at least 2 of each when available
        (5, 3, 2, 2, (1, 1)),  # the minimum is capped at size // 2
        (0, 8, 4, 2, (0, 4)),
        (2, 1, 4, 2, (2, 1)),  # fewer than size: keep everything
    ],
)
def test_split_counts(
    n_pos: int, n_neg: int, size: int, min_each: int, expected: tuple[int, int]
) -> None:
    assert split_counts(n_pos, n_neg, size, min_each) == expected


def test_sample_without_replacement_follows_the_draws() -> None:
    # weights [1, 2, 1]: 0.5 * 4 = 2.0 falls in item 1's slice [1, 3); then 0.0 picks item 0
    assert sample_without_replacement([1.0, 2.0, 1.0], 2, ScriptedRandom([0.5, 0.0])) == [1, 0]
    with pytest.raises(ValueError, match="draw 4"):
        sample_without_replacement([1.0, 1.0], 4, ScriptedRandom([]))
    with pytest.raises(ValueError, match="positive"):
        sample_without_replacement([1.0, 0.0], 1, ScriptedRandom([0.1]))


def test_roc_sample_exact_draws() -> None:
    # negatives [3, 4, 5, 7] uniform: 0.6 * 4 = 2.4 -> 5; then 0.1 * 3 = 0.3 -> 3.
    # positives [0, 1, 2, 6] weigh 1/(p + 0.01) = [100, 2, 1, 4]: 0.95 * 107 = 101.65 -> 1;
    # then [100, 1, 4]: 0.99 * 105 = 103.95 -> 6.
    rng = ScriptedRandom([0.6, 0.1, 0.95, 0.99])
    assert roc_sample(REWARDS, PENALTIES, 4, rng, min_each=0, eps=0.01) == [1, 3, 5, 6]


def test_roc_sample_prefers_low_penalty_positives() -> None:
    rng = random.Random(1234)
    picks = [roc_sample(REWARDS, PENALTIES, 2, rng, min_each=1) for _ in range(2000)]
    clean = sum(0 in p for p in picks) / len(picks)
    assert abs(clean - 100 / 107) < 0.03  # P(first draw is the flawless positive)
    assert all(sum(REWARDS[i] > 0 for i in p) == 1 for p in picks)


def test_roc_sample_is_reproducible_from_the_seed() -> None:
    a = [roc_sample(REWARDS, PENALTIES, 4, random.Random(s)) for s in range(20)]
    b = [roc_sample(REWARDS, PENALTIES, 4, random.Random(s)) for s in range(20)]
    assert a == b and len({tuple(x) for x in a}) > 1


def test_roc_lowest_penalty_exact() -> None:
    # positives by penalty: 0 (0.0), 6 (0.24), 1, 2; negatives: 4 (0.5), 5 (1.0), 3, 7
    assert roc_lowest_penalty(REWARDS, PENALTIES, 4) == [0, 4, 5, 6]
    # ties broken by position: 3 and 7 both have 1.5
    assert roc_lowest_penalty(REWARDS, PENALTIES, 6, min_each=0) == [0, 1, 3, 4, 5, 6]


def test_roc_rejects_mismatched_or_bad_penalties() -> None:
    with pytest.raises(ValueError, match="penalties"):
        roc_lowest_penalty([1.0, 0.0], [0.0], 1)
    with pytest.raises(ValueError, match="penalties"):
        roc_sample([1.0, 0.0], [-1.0, 0.0], 1, ScriptedRandom([]))


def group_of_eight() -> list[Rec]:
    return [
        Rec(1.0, tool_calls=2, tool_errors=1, name="sloppy"),  # p = 0.5 + 0
        Rec(1.0, tool_calls=2, name="clean"),  # p = 0
        Rec(1.0, tool_calls=0, name="no-tool"),  # p = 0.5
        Rec(1.0, tool_calls=1, answer_tags=3, turns=2, name="tags"),  # p = 1.0
        Rec(0.0, name="w0"),
        Rec(0.0, name="w1"),
        Rec(0.0, name="w2"),
        Rec(0.0, name="w3"),
    ]


def test_select_rollouts_by_algorithm() -> None:
    group = group_of_eight()
    rng = ScriptedRandom([])
    assert select_rollouts(group, RLConfig(algo="grpo", grpo_keep="all"), rng) == list(range(8))
    assert select_rollouts(group, RLConfig(algo="grpo", grpo_keep="first", group_size=3), rng) == [
        0,
        1,
        2,
    ]
    cfg = RLConfig(roc_variant="lowest_penalty", group_size=4)
    # positives kept: clean (0.0) then sloppy (0.5, before no-tool by position)
    assert select_rollouts(group, cfg, rng) == [0, 1, 4, 5]
    no_errors = RLConfig(roc_variant="lowest_penalty", group_size=4, error_penalty=False)
    # format only: sloppy, clean, no-tool all 0.0 -> the first two by position
    assert select_rollouts(group, no_errors, rng) == [0, 1, 4, 5]
    sampled = RLConfig(group_size=4)
    picks = select_rollouts(group, sampled, random.Random(0))
    assert len(picks) == 4 and sum(group[i].reward > 0 for i in picks) == 2


def test_build_training_batch_drops_uniform_groups_and_attaches_advantages() -> None:
    mixed = [Rec(1.0, name="a"), Rec(0.0, name="b"), Rec(0.0, name="c"), Rec(0.0, name="d")]
    all_right = [Rec(1.0), Rec(1.0)]
    all_wrong = [Rec(0.0), Rec(0.0), Rec(0.0)]
    cfg = RLConfig(algo="grpo")
    batch = build_training_batch([mixed, all_right, all_wrong], cfg, ScriptedRandom([]))
    assert [r.name for r in batch.rollouts] == ["a", "b", "c", "d"]
    s = 1 / (0.5 + 1e-6)  # mean 0.25, sample std 0.5
    assert batch.advantages == pytest.approx([0.75 * s, -0.25 * s, -0.25 * s, -0.25 * s])
    assert (batch.groups_kept, batch.groups_dropped) == (1, 2)
    assert (batch.groups_all_correct, batch.groups_all_wrong) == (1, 1)


def test_build_training_batch_with_roc() -> None:
    cfg = RLConfig(roc_variant="lowest_penalty", group_size=4)
    batch = build_training_batch([group_of_eight()], cfg, ScriptedRandom([]))
    assert [r.name for r in batch.rollouts] == ["sloppy", "clean", "w0", "w1"]
    assert batch.advantages[0] > 0 > batch.advantages[2]


INFRA = "tool:queue_full"


def test_infra_failures_are_masked_and_advantages_taken_over_the_rest() -> None:
    group = [Rec(1.0, name="a"), Rec(0.0, name="b"), Rec(0.0, name="x", infra_failure=INFRA)]
    group.append(Rec(0.0, name="d"))
    batch = build_training_batch([group], RLConfig(algo="grpo"), ScriptedRandom([]))
    assert [r.name for r in batch.rollouts] == ["a", "b", "d"]
    s = math.sqrt(1 / 3) + 1e-6  # rewards [1, 0, 0]: mean 1/3, sample std sqrt(1/3)
    assert batch.advantages == pytest.approx([(2 / 3) / s, (-1 / 3) / s, (-1 / 3) / s])
    assert (batch.infra_masked, batch.groups_infra_dropped, batch.groups_kept) == (1, 0, 1)


def test_a_fake_zero_does_not_make_a_signal() -> None:
    # without the mask, the infra-failed 0 would make this all-correct group train
    group = [Rec(1.0), Rec(1.0), Rec(0.0, infra_failure="reward:timeout")]
    batch = build_training_batch([group], RLConfig(algo="grpo"), ScriptedRandom([]))
    assert batch.rollouts == [] and batch.infra_masked == 1
    assert (batch.groups_dropped, batch.groups_all_correct, batch.groups_all_wrong) == (1, 1, 0)


def test_a_group_mostly_lost_to_infra_failures_is_dropped_whole() -> None:
    def group(lost: int) -> list[Rec]:
        recs = [Rec(1.0), Rec(0.0), Rec(1.0), Rec(0.0)]
        for r in recs[-lost:] if lost else []:
            r.infra_failure = INFRA
        return recs

    cfg = RLConfig(algo="grpo")
    batch = build_training_batch([group(3), group(2)], cfg, ScriptedRandom([]))
    # 3 of 4 lost (> half): dropped whole; 2 of 4 (= half): the rest trains
    assert (batch.groups_infra_dropped, batch.groups_kept, batch.infra_masked) == (1, 1, 5)
    assert len(batch.rollouts) == 2 and not any(r.infra_failure for r in batch.rollouts)
    assert (batch.groups_all_correct, batch.groups_all_wrong) == (0, 0)

    def built(lost: int, share: float) -> TrainingBatch[Rec]:
        cfg = RLConfig(algo="grpo", infra_max_share=share)
        return build_training_batch([group(lost)], cfg, ScriptedRandom([]))

    # share 1: never dropped for failures (the lone survivor then has no signal)
    assert (built(3, 1.0).groups_infra_dropped, built(3, 1.0).groups_dropped) == (0, 1)
    # share 0: any failure drops the group; none keeps it
    assert built(1, 0.0).groups_infra_dropped == 1 and built(0, 0.0).groups_kept == 1


def test_roc_selects_among_the_rollouts_not_hit() -> None:
    group = group_of_eight()
    group[1].infra_failure = INFRA  # "clean", the best positive, met a dead sandbox
    cfg = RLConfig(roc_variant="lowest_penalty", group_size=4)
    batch = build_training_batch([group], cfg, ScriptedRandom([]))
    # 3 positives, 4 negatives left: k_neg = round(4 * 4 / 7) = 2, k_pos = 2
    assert [r.name for r in batch.rollouts] == ["sloppy", "no-tool", "w0", "w1"]
    assert batch.counts() == {
        "groups_kept": 1,
        "groups_dropped": 0,
        "groups_all_correct": 0,
        "groups_infra_dropped": 0,
        "infra_masked": 1,
        "trained_rollouts": 4,
    }


def test_rl_config_validation() -> None:
    RLConfig().validate()
    with pytest.raises(ConfigError, match="rl.eps_low"):
        RLConfig(eps_low=1.5).validate()
    with pytest.raises(ConfigError, match="rl.group_size"):
        RLConfig(group_size=1).validate()
    with pytest.raises(ConfigError, match="rl.infra_max_share"):
        RLConfig(infra_max_share=1.5).validate()
