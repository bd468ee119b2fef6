"""The learner actor reads scored trajectories all the time, and its run's errors come out
unwrapped (not in an exception group)."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from rstar2.actors import Incoming
from rstar2.train.config import TrainConfig
from rstar2.train.learner_actor import LearnerActor, LearnerParams
from rstar2.train.run_commands import RollOut
from tests.train.test_rollout_inbox import result, tasks

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return request.param


class FakeContext:
    """Delivers the given messages one by one, then waits for ever."""

    def __init__(self, messages: list[object]) -> None:
        self.messages = list(messages)

    async def recv(self) -> Incoming:
        if not self.messages:
            await anyio.sleep_forever()
        await anyio.sleep(0)
        return Incoming(port="scored", msg=self.messages.pop(0))  # type: ignore[arg-type]


def actor(tmp_path: Path) -> LearnerActor:
    a = LearnerActor(LearnerParams(TrainConfig(), str(tmp_path), str(tmp_path)))
    a._arrival = anyio.Event()
    return a


async def test_trajectories_read_while_the_run_waits_elsewhere_are_filed(tmp_path: Path) -> None:
    a = actor(tmp_path)
    ahead = tasks("train", 2, 3)
    a.inbox.expect(("train", 2), ahead)
    ctx = FakeContext([result(t) for t in ahead])

    async def run() -> str:
        # the run is busy (an update, a push) and reads nothing itself
        with anyio.fail_after(5):
            while not a.inbox.complete(("train", 2)):
                await anyio.sleep(0.01)
        return "done"

    assert await a._receiving(ctx, run()) == "done"  # type: ignore[arg-type]
    assert len(a.inbox.take(("train", 2))) == 3


async def test_a_rollout_submitted_ahead_is_collected_from_the_inbox(tmp_path: Path) -> None:
    a = actor(tmp_path)
    ahead = tasks("train", 4, 2)
    a.inbox.expect(("train", 4), ahead)
    ctx = FakeContext([result(t) for t in ahead])
    with anyio.fail_after(5):
        got = await a._receiving(ctx, a._roll_out(ctx, RollOut(4, ahead)))  # type: ignore[arg-type]
    assert sorted(r.traj_id for r in got) == sorted(t.traj_id for t in ahead)


async def test_the_runs_own_error_comes_out_as_it_is(tmp_path: Path) -> None:
    a = actor(tmp_path)

    async def run() -> None:
        raise KeyError("boom")

    with pytest.raises(KeyError, match="boom"):
        await a._receiving(FakeContext([]), run())  # type: ignore[arg-type]
