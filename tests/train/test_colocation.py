"""Colocation as the learner drives it: every engine asleep for the update, awake for the push."""

from __future__ import annotations

import pytest

from rstar2.train.colocation import Colocation
from rstar2.wire import EngineSleep, EngineSleepAck, Message, WeightAck

pytestmark = pytest.mark.anyio


class Engines:
    """Rollout workers' "control" ports: each answers with its new state (or `wrong`)."""

    def __init__(self, wrong: bool = False) -> None:
        self.calls: list[tuple[int, str]] = []
        self.wrong = wrong

    async def __call__(self, peer: int, msg: Message, timeout: float | None) -> Message:
        self.calls.append((peer, type(msg).__name__))
        if self.wrong:
            return WeightAck(0, peer)
        return EngineSleepAck(peer, sleeping=isinstance(msg, EngineSleep))


async def test_engines_sleep_through_the_update_and_wake_before_the_push() -> None:
    engines = Engines()
    c = Colocation(engines, 2, enabled=True)
    await c.before_push()  # awake already: nothing to send
    await c.before_update()
    assert c.asleep and sorted(engines.calls) == [(0, "EngineSleep"), (1, "EngineSleep")]
    engines.calls.clear()
    await c.before_push()
    assert not c.asleep and sorted(engines.calls) == [(0, "EngineWake"), (1, "EngineWake")]


async def test_without_colocation_nothing_is_sent() -> None:
    engines = Engines()
    c = Colocation(engines, 2, enabled=False)
    await c.before_update()
    await c.before_push()
    assert engines.calls == [] and not c.asleep


async def test_a_wrong_answer_fails_naming_the_engine() -> None:
    c = Colocation(Engines(wrong=True), 1, enabled=True)
    with pytest.raises(ExceptionGroup) as e:
        await c.before_update()
    assert "engine 0 answered" in str(e.value.exceptions[0])
    assert "an EngineSleepAck with sleeping=True" in str(e.value.exceptions[0])
    assert not c.asleep
