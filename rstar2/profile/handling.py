"""Record an actor's own work as a "handle" span, for actors with a custom `serve()`.

The runtime records "handle" spans only around `handle()` (through `ctx.dispatch`). An actor
that works inside its own `serve()` (a learner's update, an engine step, a sandbox run, a
reward verification) is invisible to the profile unless it says when it works:

    with handling(ctx, "update"):
        await self.update_policy(batch)

Each block adds one span and one `handled` message to the instance's counters, so its busy
share, rate and the bottleneck analysis see it. Blocks may run concurrently (several requests
in flight); the report counts overlapping time once.

What it does not do: record "wait" or "blocked" spans (the runtime does, in recv and send).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
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
