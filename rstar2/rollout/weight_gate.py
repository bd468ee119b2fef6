"""The weight gate: which policy version generates each turn, and when new weights load.

Asynchronous RL (`rl.max_staleness > 0`) pushes new weights while trajectories are in flight
(partial rollouts). rstar2 applies an update at *turn boundaries*: a rollout worker's gate lets
many turns generate at once (continuous batching), and an update waits until the turns in
flight have ended, holds new turns back meanwhile, loads the weights, then lets the turns go on
under the new version. So every token of a turn comes from one known policy version, and a
trajectory's versions are one per turn (`Trajectory.policy_versions`), exact, whatever
the backend (the embedded engine could swap between decode steps, vLLM cannot without
pausing; the gate is the same for both). The price is the wait for the longest turn in flight
before an update loads, at most one turn's generation time.

An update that fails (the load raises, or the push is abandoned before its last bucket) leaves
`version` at the old number: the engine's weights are then that version's (the embedded
engine's load checks every name and shape before copying anything; bus pushes stage every
bucket and load them in one call; a vLLM load that fails half-way is not covered), so a
trajectory is never tagged with a version its tokens did not come from.

In synchronous mode no turn is in flight during a push, so the gate never waits.

What it does not do: decide when to push (the learner), or load weights (the engine).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import anyio

UNKNOWN_VERSION = -1
"""The version before the first push reached the engine (the model it was started with)."""


class WeightGate:
    """A readers-writer gate with writer preference: turns are readers, updates writers."""

    def __init__(self, version: int = UNKNOWN_VERSION) -> None:
        self.version = version
        """The policy version of the weights the engine holds now."""
        self._turns = 0
        self._updating = False
        self._changed = anyio.Condition()

    @asynccontextmanager
    async def turn(self) -> AsyncIterator[int]:
        """Generate one turn under the gate; yields the version generating it. Waits while an
        update is loading or waiting to load (writer preference: updates are not starved)."""
        async with self._changed:
            while self._updating:
                await self._changed.wait()
            self._turns += 1
        try:
            yield self.version
        finally:
            with anyio.CancelScope(shield=True):
                async with self._changed:
                    self._turns -= 1
                    self._changed.notify_all()

    async def update(self, version: int, load: Callable[[], Awaitable[object]]) -> None:
        """Load version `version` with `load()` once no turn is in flight; new turns wait until
        it is done. `version` becomes the gate's only if `load` returns."""
        async with self._changed:
            while self._updating:  # one update at a time
                await self._changed.wait()
            self._updating = True
            try:
                while self._turns:
                    await self._changed.wait()
            except BaseException:
                self._updating = False
                self._changed.notify_all()
                raise
        try:
            await load()
            self.version = version
        finally:
            with anyio.CancelScope(shield=True):
                async with self._changed:
                    self._updating = False
                    self._changed.notify_all()
