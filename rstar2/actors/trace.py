"""Per-actor tracing: counters plus a ring buffer of spans, cheap enough to leave on.

Each actor instance owns one `Tracer`. The runtime records three kinds of span:
- "wait": the actor was idle, waiting for input;
- "handle": the actor's code ran on one message (`handle()`), or a custom `serve()` step;
- "blocked": a send waited because the downstream high-water mark was reached (backpressure).
A span is a tuple appended to a `collections.deque(maxlen=capacity)`, so memory is bounded and
the oldest spans fall off. Only spans that actually waited are recorded for "wait"/"blocked".

`queue_depth` is what the actor can see without asking ZeroMQ (which does not expose queue
lengths): the number of messages it drained in the same batch and has not handled yet.

What it does not do: export (issue "profile" turns `spans()` into a Chrome trace) or clocks
across hosts (timestamps are `time.time()` of the recording host).
"""

from __future__ import annotations

import time
from collections import deque

from rstar2.wire import ActorStats, Span

SpanKind = str  # "wait" | "handle" | "blocked"


class Tracer:
    """Counters and recent spans of one actor instance."""

    def __init__(self, actor: str, process: str, capacity: int = 4096, enabled: bool = True):
        if capacity < 1:
            raise ValueError(f"trace capacity must be >= 1, got {capacity}")
        self.actor = actor
        self.process = process
        self.enabled = enabled
        self._ring: deque[tuple[str, float, float, str, int]] = deque(maxlen=capacity)
        self.stats = ActorStats(actor=actor, process=process)

    def record(self, kind: SpanKind, start: float, end: float, port: str = "", depth: int = 0):
        """Add one span and its duration to the matching counter."""
        dt = end - start
        if kind == "handle":
            self.stats.busy_s += dt
        elif kind == "wait":
            self.stats.wait_s += dt
        elif kind == "blocked":
            self.stats.blocked_s += dt
        else:
            raise ValueError(f"unknown span kind {kind!r}")
        if self.enabled:
            self._ring.append((kind, start, end, port, depth))

    def spans(self) -> list[Span]:
        """The buffered spans, oldest first (a copy)."""
        return [Span(self.actor, k, s, e, p, d) for (k, s, e, p, d) in self._ring]

    def snapshot(self) -> ActorStats:
        """A copy of the counters, safe to send."""
        s = self.stats
        return ActorStats(
            actor=s.actor,
            process=s.process,
            received=s.received,
            sent=s.sent,
            handled=s.handled,
            malformed=s.malformed,
            oversized=s.oversized,
            restarts=s.restarts,
            busy_s=s.busy_s,
            wait_s=s.wait_s,
            blocked_s=s.blocked_s,
            queue_depth=s.queue_depth,
            alive=s.alive,
        )


def now() -> float:
    """The clock spans use (wall time, so spans of several processes line up)."""
    return time.time()
