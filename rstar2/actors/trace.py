"""Per-actor tracing: counters plus a ring buffer of spans, cheap enough to leave on.

Each actor instance owns one `Tracer`. The runtime records three kinds of span:
- "wait": the actor was idle, waiting for input;
- "handle": the actor's code ran on one message (`handle()`), or a custom `serve()` step;
- "blocked": a send waited because the downstream high-water mark was reached (backpressure);
- "reply": one or more of the actor's requests were waiting for a service's reply (from the
  first request sent to the last reply received; overlapping requests make one span).
A span is a tuple appended to a `collections.deque(maxlen=capacity)`, so memory is bounded and
the oldest spans fall off. Only spans that actually waited are recorded for "wait"/"blocked".

A span can also be left open (`begin()` ... `end()`) while it lasts: `snapshot()` then adds its
elapsed part to the counter of its kind and `spans()` shows it ending now, so an actor that has
been waiting for input for a minute reads as idle (in `rstar2 top`, and at the end of a run)
rather than as unaccounted time. Closing it records the whole span once.

`queue_depth` is what the actor can see without asking ZeroMQ (which does not expose queue
lengths): the number of messages it drained and has not handled yet.

What it does not do: export (issue "profile" turns `spans()` into a Chrome trace) or clocks
across hosts (timestamps are `time.time()` of the recording host).
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from collections.abc import Callable

from rstar2.wire import ActorStats, Span

SpanKind = str  # "wait" | "handle" | "blocked" | "reply"
_KINDS = ("wait", "handle", "blocked", "reply")
_OpenSpan = tuple[str, float, str, int]  # kind, start, port, queue depth

now = time.time
"""The clock spans use (wall time, so spans of several processes line up); an alias rather
than a wrapper because the runtime reads it once per message."""


class Tracer:
    """Counters, recent spans and the spans still open of one actor instance."""

    def __init__(
        self,
        actor: str,
        process: str,
        capacity: int = 4096,
        enabled: bool = True,
        clock: Callable[[], float] = now,
    ) -> None:
        """`clock` times the open spans (`begin`/`end`, and what `snapshot` adds): tests pass
        a fake one."""
        if capacity < 1:
            raise ValueError(f"trace capacity must be >= 1, got {capacity}")
        self.actor = actor
        self.process = process
        self.enabled = enabled
        self._ring: deque[tuple[str, float, float, str, int]] = deque(maxlen=capacity)
        self._open: dict[int, _OpenSpan] = {}
        self._tokens = itertools.count()
        self._clock = clock
        self.stats = ActorStats(actor=actor, process=process)

    def record(
        self, kind: SpanKind, start: float, end: float, port: str = "", depth: int = 0
    ) -> None:
        """Add one span and its duration to the matching counter."""
        dt = end - start
        if kind == "handle":
            self.stats.busy_s += dt
        elif kind == "wait":
            self.stats.wait_s += dt
        elif kind == "blocked":
            self.stats.blocked_s += dt
        elif kind == "reply":
            self.stats.reply_s += dt
        else:
            raise ValueError(f"unknown span kind {kind!r}")
        if self.enabled:
            self._ring.append((kind, start, end, port, depth))

    def handled(self, start: float, end: float, port: str, depth: int, count: int = 1) -> None:
        """`count` messages handled back to back on `port` from `start` to `end` (`depth`: the
        deepest queue seen meanwhile): one "handle" span, and `handled` + `count`."""
        stats = self.stats
        stats.busy_s += end - start
        stats.handled += count
        if self.enabled:
            self._ring.append(("handle", start, end, port, depth))

    def begin(self, kind: SpanKind, port: str = "", depth: int = 0) -> int:
        """Open a span that starts now; returns the token that `end()` closes it with."""
        if kind not in _KINDS:
            raise ValueError(f"unknown span kind {kind!r}")
        token = next(self._tokens)
        self._open[token] = (kind, self._clock(), port, depth)
        return token

    def end(self, token: int, depth: int | None = None) -> None:
        """Close an open span now (`depth` replaces the queue depth given to `begin`)."""
        kind, start, port, begun_depth = self._open.pop(token)
        self.record(kind, start, self._clock(), port, begun_depth if depth is None else depth)

    def spans(self) -> list[Span]:
        """The buffered spans, oldest first, then the open ones as if they ended now (a copy)."""
        spans = [Span(self.actor, k, s, e, p, d) for (k, s, e, p, d) in self._ring]
        if self.enabled and self._open:
            t = self._clock()
            spans += [Span(self.actor, k, s, t, p, d) for (k, s, p, d) in self._open.values()]
        return spans

    def snapshot(self) -> ActorStats:
        """A copy of the counters, open spans included up to now, safe to send."""
        s = self.stats
        elapsed = dict.fromkeys(_KINDS, 0.0)
        if self._open:
            t = self._clock()
            for kind, start, _, _ in self._open.values():
                elapsed[kind] += t - start
        return ActorStats(
            actor=s.actor,
            process=s.process,
            received=s.received,
            sent=s.sent,
            handled=s.handled,
            malformed=s.malformed,
            oversized=s.oversized,
            restarts=s.restarts,
            busy_s=s.busy_s + elapsed["handle"],
            wait_s=s.wait_s + elapsed["wait"],
            blocked_s=s.blocked_s + elapsed["blocked"],
            queue_depth=s.queue_depth,
            alive=s.alive,
            reply_s=s.reply_s + elapsed["reply"],
        )
