"""The rollout inbox: trajectories of several rollouts in flight, each filed with its own."""

from __future__ import annotations

import msgspec
import pytest

from rstar2.train.rollout_inbox import RolloutInbox
from rstar2.wire import RolloutTask, TrajectoryResult
from tests.trajectories import trajectory


def tasks(kind: str, step: int, n: int) -> list[RolloutTask]:
    return [
        RolloutTask(
            traj_id=f"{kind}/{step}/{i}/0", prompt_id=f"{kind}/{step}/{i}", sample=0, step=step,
            prompt_ids=[1], answer="1", seed=i, kind=kind,
        )
        for i in range(n)
    ]  # fmt: skip


def result(task: RolloutTask) -> TrajectoryResult:
    return TrajectoryResult(
        traj_id=task.traj_id,
        step=task.step,
        kind=task.kind,
        answer=task.answer,
        trajectory=trajectory(prompt_id=task.prompt_id, sample=task.sample),
    )


def test_interleaved_trajectories_land_with_their_rollouts() -> None:
    inbox = RolloutInbox()
    now, ahead, ev = tasks("train", 3, 2), tasks("train", 4, 3), tasks("eval", 3, 1)
    inbox.expect(("train", 3), now)
    inbox.expect(("train", 4), ahead)
    inbox.expect(("eval", 3), ev)
    for t in [ahead[0], now[1], ev[0], ahead[2], now[0]]:
        assert inbox.deliver(result(t))
    assert inbox.complete(("train", 3)) and inbox.complete(("eval", 3))
    assert not inbox.complete(("train", 4))
    assert [r.traj_id for r in inbox.take(("train", 3))] == [now[1].traj_id, now[0].traj_id]
    assert not inbox.expects(("train", 3))
    assert inbox.in_flight() == [("train", 4), ("eval", 3)]
    with pytest.raises(ValueError, match="1 missing"):
        inbox.take(("train", 4))
    assert inbox.deliver(result(ahead[1]))
    assert len(inbox.take(("train", 4))) == 3


def test_strays_and_duplicates_are_refused() -> None:
    inbox = RolloutInbox()
    mine = tasks("train", 1, 1)
    inbox.expect(("train", 1), mine)
    assert not inbox.deliver(result(tasks("train", 2, 1)[0]))  # nobody asked
    wrong_kind = msgspec.structs.replace(result(mine[0]), kind="eval")
    assert not inbox.deliver(wrong_kind)
    assert inbox.deliver(result(mine[0]))
    assert not inbox.deliver(result(mine[0]))  # a duplicate
    assert len(inbox.take(("train", 1))) == 1


def test_an_empty_rollout_is_complete_at_once_and_a_double_submission_is_a_bug() -> None:
    inbox = RolloutInbox()
    inbox.expect(("test", 0), [])
    assert inbox.complete(("test", 0)) and inbox.take(("test", 0)) == []
    inbox.expect(("train", 1), tasks("train", 1, 1))
    with pytest.raises(ValueError, match="submitted twice"):
        inbox.expect(("train", 1), tasks("train", 1, 1))
