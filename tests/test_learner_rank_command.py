"""`rstar2 learner-rank`: where a follower started by torchrun or srun sits in the group."""

from __future__ import annotations

import pytest

from rstar2.commands.learner_rank import placement
from rstar2.config import UsageError


def test_torchruns_ranks_are_shifted_past_rank_0() -> None:
    env = {"RANK": "2", "WORLD_SIZE": "7", "LOCAL_RANK": "2"}
    assert placement(env, None, None, None) == (3, 8, 2)


def test_a_second_hosts_launch_is_offset() -> None:
    env = {"RANK": "0", "WORLD_SIZE": "8", "LOCAL_RANK": "0"}
    assert placement(env, None, 16, None, rank_offset=7) == (8, 16, 0)


def test_slurms_ranks_when_there_is_no_torchrun() -> None:
    env = {"SLURM_PROCID": "0", "SLURM_NTASKS": "15", "SLURM_LOCALID": "0"}
    assert placement(env, None, None, None) == (1, 16, 0)


def test_flags_win_over_the_environment() -> None:
    env = {"RANK": "2", "WORLD_SIZE": "7"}
    assert placement(env, 5, 9, 1) == (5, 9, 1)
    assert placement({}, 1, 2, None) == (1, 2, 0)


@pytest.mark.parametrize(
    ("env", "rank", "world", "message"),
    [
        ({}, None, None, "--rank and --world are needed"),
        ({}, 0, 2, "a follower's rank is 1..1"),
        ({}, 2, 2, "a follower's rank is 1..1"),
    ],
)
def test_a_rank_that_cannot_be_placed_is_refused(
    env: dict[str, str], rank: int | None, world: int | None, message: str
) -> None:
    with pytest.raises(UsageError, match=message):
        placement(env, rank, world, None)
