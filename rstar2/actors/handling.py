"""Record an actor's own work as "handle" spans, for actors with a custom `serve()`.

The runtime records "handle" spans only around `handle()` (through `ctx.dispatch`). An actor
that works inside its own `serve()` (a learner's update, an engine step, a sandbox run, a
reward verification) is invisible to the profile unless it says when it works.

- `handling(ctx, port)`: one block of sequential work is one span:

      with handling(ctx, "update"):
          await self.update_policy(batch)

- `BusyTrack(ctx, port, slots)`: many units of work in flight at once (a service with one
  task per request). Its spans never overlap: a span runs from the moment the actor became
  busy (or from the previous span's end) to the moment a unit finishes, so the instance's
  spans tile the time at least one unit was in flight and its `busy_s` counter can never pass
  the wall time. Each span's queue depth is the work waiting for a free worker: the units
  still in flight beyond `slots`, or what `waiting()` says when given (an engine's queue):

      track = BusyTrack(ctx, "exec", slots=cfg.concurrency)
      with track.unit():
          result = await executor.run(request)

Both add one `handled` message per block / unit and are recorded even if the block raises.

What they do not do: record "wait" or "blocked" spans (the runtime does, in recv and send), or
import anything beyond the runtime's context, so any actor can use them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rstar2.actors.context import ActorContext


@contextmanager
def handling(ctx: ActorContext, port: str = "", queue_depth: int = 0) -> Iterator[None]:
    """Time the block as a "handle" span of `ctx`'s actor (recorded even if the block raises)."""
    start = time.time()
    try:
        yield
    finally:
        ctx.tracer.record("handle", start, time.time(), port, queue_depth)
        ctx.tracer.stats.handled += 1


class BusyTrack:
    """Concurrent units of work of one actor instance as non-overlapping handle spans."""

    def __init__(
        self,
        ctx: ActorContext,
        port: str = "",
        slots: int = 1,
        waiting: Callable[[], int] | None = None,
    ) -> None:
        if slots < 1:
            raise ValueError(f"BusyTrack slots must be >= 1, got {slots}")
        self.ctx = ctx
        self.port = port
        self.slots = slots
        self.waiting = waiting
        self.in_flight = 0
        """Units started and not finished."""
        self._since = 0.0

    @contextmanager
    def unit(self) -> Iterator[None]:
        """One unit of work (a request, a generation); may run alongside others."""
        if self.in_flight == 0:
            self._since = time.time()
        self.in_flight += 1
        try:
            yield
        finally:
            self.in_flight -= 1
            end = time.time()
            depth = self.waiting() if self.waiting else max(0, self.in_flight - self.slots)
            self.ctx.tracer.record("handle", self._since, end, self.port, depth)
            self.ctx.tracer.stats.handled += 1
            self._since = end
