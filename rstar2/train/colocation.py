"""Colocation (`cluster.colocate`): the rollout engines sleep through the learner's update.

vLLM engines that share their GPUs with the learner free them before each update (sleep mode:
weights copied to host memory, KV cache dropped) and take them back before the new weights
arrive. The learner sends `EngineSleep` / `EngineWake` to every rollout worker's "control" port
and waits for each `EngineSleepAck` saying the engine is now asleep / awake:

- `before_update()`: put every engine to sleep (only with `cluster.colocate`);
- `before_push()`: wake them if they sleep (the push loads into awake engines).

What it does not do: decide when the learner updates or pushes (the controller), or sleep an
engine (the rollout workers, `rstar2.rollout.engine_backend.sleep_or_wake`).
"""

from __future__ import annotations

import logging
import time

from rstar2.weights.learner_group import Request
from rstar2.weights.push import ask_every_engine
from rstar2.wire import EngineSleep, EngineSleepAck, EngineWake, Message

log = logging.getLogger(__name__)


class Colocation:
    """The engines' sleep state as the learner drives it (see the module docstring)."""

    def __init__(self, control: Request, engines: int, enabled: bool) -> None:
        self.control = control
        """Requests to each rollout worker's "control" port."""
        self.engines = engines
        self.enabled = enabled
        self.asleep = False
        """The engines were put to sleep for the update and not yet woken."""

    async def before_update(self) -> None:
        if self.enabled:
            await self._set_asleep(True)

    async def before_push(self) -> None:
        if self.asleep:
            await self._set_asleep(False)

    async def _set_asleep(self, asleep: bool) -> None:
        msg: Message = EngineSleep() if asleep else EngineWake()
        start = time.perf_counter()

        def acked(reply: Message) -> bool:
            return isinstance(reply, EngineSleepAck) and reply.sleeping == asleep

        wanted = f"an EngineSleepAck with sleeping={asleep}"
        await ask_every_engine(self.control, self.engines, msg, acked, wanted)
        self.asleep = asleep
        log.info(
            "engines %s in %.3fs", "asleep" if asleep else "awake", time.perf_counter() - start
        )
