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
    """A readers-writer gate with writer preference: turns are readers, updates writers.

    The state is two plain fields, changed only between awaits (one event loop runs every
    task that uses a gate), so a turn that finds no update pending enters and leaves without
    a lock or a checkpoint: that is every turn of synchronous RL, a few microseconds instead
    of the ~60 us two `anyio.Condition` rounds and a shielded cancel scope cost the training
    process's event loop per turn. Waiters (turns held back by an update, an update waiting
    for the turns in flight or for the update before it) sleep on `_change`, an event set and
    replaced whenever the last turn ends or an update finishes; each re-checks its condition
    when woken."""

    def __init__(self, version: int = UNKNOWN_VERSION) -> None:
        self.version = version
        """The policy version of the weights the engine holds now."""
        self._turns = 0
        self._updating = False
        self._change = anyio.Event()

    def _wake_waiters(self) -> None:
        """Wake every waiter (they re-check their conditions)."""
        event, self._change = self._change, anyio.Event()
        event.set()

    @asynccontextmanager
    async def turn(self) -> AsyncIterator[int]:
        """Generate one turn under the gate; yields the version generating it. Waits while an
        update is loading or waiting to load (writer preference: updates are not starved)."""
        while self._updating:
            await self._change.wait()
        self._turns += 1
        try:
            yield self.version
        finally:
            self._turns -= 1
            if not self._turns and self._updating:
                self._wake_waiters()

    async def update(self, version: int, load: Callable[[], Awaitable[object]]) -> None:
        """Load version `version` with `load()` once no turn is in flight; new turns wait until
        it is done. `version` becomes the gate's only if `load` returns."""
        while self._updating:  # one update at a time
            await self._change.wait()
        self._updating = True
        try:
            while self._turns:
                await self._change.wait()
            await load()
            self.version = version
        finally:
            self._updating = False
            self._wake_waiters()
