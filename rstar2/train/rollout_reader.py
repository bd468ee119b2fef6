"""The learner's rollouts on the bus: their tasks sent, their scored trajectories read.

The learner actor hands each `RollOut` command here:

- `submit(rollout)`: the inbox expects its tasks (`RolloutInbox`), sent as one `RolloutBatch`
  on ``tasks``;
- `collect(rollout)`: its scored trajectories, submitted now unless submitted ahead
  (`rl.max_staleness`); trajectories of other rollouts read meanwhile are kept for them;
- `reading(run)`: await `run` while a task reads every scored trajectory on ``scored`` into
  the inbox as it comes. The learner must keep reading while it updates and pushes: with
  rollouts submitted ahead, trajectories arrive meanwhile, and unread they would fill the bus
  up to the rollout workers, whose weight acks would then wait behind them. `run`'s own
  exception comes out as it is (not in an exception group).

With `profile`, each trajectory read adds its engine's KV samples to `kv_samples`
(`rstar2.train.kv_samples`).

What it does not do: decide what to roll out (the controller) or where (the scheduler).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable
from typing import Any, Protocol, TypeVar

import anyio

from rstar2.actors import Incoming
from rstar2.train.kv_samples import engine_kv_samples
from rstar2.train.rollout_inbox import RolloutInbox
from rstar2.train.run_commands import RollOut
from rstar2.wire import Message, RolloutBatch, TrajectoryResult

log = logging.getLogger(__name__)

_T = TypeVar("_T")


class Bus(Protocol):
    """The learner's side of the bus that the reader uses (`ActorContext`)."""

    async def recv(self) -> Incoming: ...

    async def send(self, port: str, msg: Message) -> None: ...


class RolloutReader:
    """Rollouts in flight and their trajectories (see the module docstring)."""

    def __init__(self, bus: Bus, block_size: int, profile: bool = False) -> None:
        self.bus = bus
        self.block_size = block_size
        """The engines' KV block size (the KV samples count whole blocks)."""
        self.profile = profile
        self.inbox = RolloutInbox()
        """Rollouts submitted and their trajectories received so far."""
        self.kv_samples: list[list[Any]] = []
        """[track, name, time, value] rows for the profiler (kept only when `profile`)."""
        self._arrival = anyio.Event()
        """Set when a trajectory has been filed (then replaced)."""

    async def submit(self, rollout: RollOut) -> None:
        """Send a rollout's tasks; its trajectories are collected as they are read."""
        self.inbox.expect((rollout.kind, rollout.step), rollout.tasks)
        await self.bus.send("tasks", RolloutBatch(step=rollout.step, tasks=rollout.tasks))

    async def collect(self, rollout: RollOut) -> list[TrajectoryResult]:
        """A rollout's scored trajectories (submitted now unless it was submitted ahead)."""
        key = (rollout.kind, rollout.step)
        if not self.inbox.expects(key):
            await self.submit(rollout)
        while not self.inbox.complete(key):
            await self._arrival.wait()  # `_read` files them
        return self.inbox.take(key)

    async def reading(self, run: Awaitable[_T]) -> _T:
        """Await `run` while a task reads every scored trajectory into the inbox."""
        outcome: list[_T] = []
        error: list[BaseException] = []

        async def main(scope: anyio.CancelScope) -> None:
            try:
                outcome.append(await run)
            except BaseException as e:  # re-raised below, outside the task group
                error.append(e)
            finally:
                scope.cancel()

        async with anyio.create_task_group() as tg:
            tg.start_soon(self._read)
            tg.start_soon(main, tg.cancel_scope)
        if error:
            raise error[0]
        return outcome[0]

    async def _read(self) -> None:
        """File every scored trajectory with its rollout, for good."""
        while True:
            msg = (await self.bus.recv()).msg
            if not isinstance(msg, TrajectoryResult) or not self.inbox.deliver(msg):
                log.warning("ignoring a stray message %r", getattr(msg, "traj_id", msg))
                continue
            if self.profile:
                now = time.time()
                self.kv_samples.extend(engine_kv_samples(msg, self.block_size, now))
            self._arrival.set()
            self._arrival = anyio.Event()
