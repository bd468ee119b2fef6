"""The learner's rollout reader (`RolloutReader`): it reads scored trajectories all the time, a
rollout submitted ahead is collected from what was read, and the run's errors come out
unwrapped (not in an exception group)."""

from __future__ import annotations

import anyio
import msgspec
import pytest

from rstar2.actors import Incoming
from rstar2.train.rollout_reader import RolloutReader
from rstar2.train.run_commands import RollOut
from rstar2.wire import EngineLoad, Message, RolloutBatch
from tests.train.test_rollout_inbox import result, tasks

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return request.param


class FakeContext:
    """Delivers the given messages one by one, then waits for ever; keeps what is sent."""

    def __init__(self, messages: list[object]) -> None:
        self.messages = list(messages)
        self.sent: list[tuple[str, Message]] = []

    async def recv(self) -> Incoming:
        if not self.messages:
            await anyio.sleep_forever()
        await anyio.sleep(0)
        return Incoming(port="scored", msg=self.messages.pop(0))  # type: ignore[arg-type]

    async def send(self, port: str, msg: Message) -> None:
        self.sent.append((port, msg))


def reader(messages: list[object], profile: bool = False) -> RolloutReader:
    return RolloutReader(FakeContext(messages), block_size=16, profile=profile)


async def test_trajectories_read_while_the_run_waits_elsewhere_are_filed() -> None:
    ahead = tasks("train", 2, 3)
    r = reader([result(t) for t in ahead])
    r.inbox.expect(("train", 2), ahead)

    async def run() -> str:
        # the run is busy (an update, a push) and reads nothing itself
        with anyio.fail_after(5):
            while not r.inbox.complete(("train", 2)):
                await anyio.sleep(0.01)
        return "done"

    assert await r.reading(run()) == "done"
    assert len(r.inbox.take(("train", 2))) == 3


async def test_a_rollout_submitted_ahead_is_collected_from_the_inbox() -> None:
    ahead = tasks("train", 4, 2)
    r = reader([result(t) for t in ahead])
    await r.submit(RollOut(4, ahead))
    with anyio.fail_after(5):
        got = await r.reading(r.collect(RollOut(4, ahead)))
    assert sorted(x.traj_id for x in got) == sorted(t.traj_id for t in ahead)
    assert r.bus.sent == [("tasks", RolloutBatch(step=4, tasks=ahead))]  # sent once


async def test_the_runs_own_error_comes_out_as_it_is() -> None:
    async def run() -> None:
        raise KeyError("boom")

    with pytest.raises(KeyError, match="boom"):
        await reader([]).reading(run())


async def test_with_profile_each_trajectory_read_adds_its_engines_kv_samples() -> None:
    now = tasks("train", 1, 2)
    load = EngineLoad(kv_capacity_tokens=64, kv_free_tokens=32, running=1, waiting=2)
    scored = [msgspec.structs.replace(result(t), engine=1, load=load) for t in now]
    r = reader([*scored, result(tasks("train", 9, 1)[0])], profile=True)  # and a stray
    with anyio.fail_after(5):
        await r.reading(r.collect(RollOut(1, now)))
    assert [row[:2] for row in r.kv_samples] == [
        ["rollout.1/engine", name] for name in ("kv_used", "kv_room", "waiting") * 2
    ]
