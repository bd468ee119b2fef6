"""What `rstar2 top` shows: per-instance rates, busy share and queue depth between two polls.

`poll_stats(endpoint)` asks a running graph's stats endpoint (`rstar2.actors.stats_endpoints()`)
for its counters (`StatsRequest(spans=False)`: no spans, so the graph pays one counter snapshot
per actor per poll) and returns the `StatsReply` of every process. `live_rows(prev, cur, dt)`
turns two snapshots into rows (a pure function) and `format_rows` into a fixed-width table.

Shares are per actor instance, of the wall time between the two polls, and never add to more
than 100%: busy (a unit of work in flight), then blocked (a send waiting on backpressure) in
the time not busy, then idle (waiting for input) in the time neither busy nor blocked; what is
left is unaccounted (the actor's own code outside any recorded span). The raw counters overlap:
a service that receives in one task while it works in others waits for input *while* busy, so
summing them gave rows of 190%. "replies" (its own requests awaiting replies) is shown apart
and overlaps the others.

What it does not do: draw a full-screen UI (the command clears the screen and reprints) or
read spans (that is `rstar2 profile`).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import zmq

from rstar2.actors.graph_dirs import GraphDir, parse_graph_dir
from rstar2.frames import from_frames, to_frames
from rstar2.wire import ActorStats, StatsReply, StatsRequest, WireError

_SETTLE_S = 0.05  # after the first reply, how long the other processes' replies may take


@dataclass(frozen=True)
class LiveRow:
    actor: str
    process: str
    msgs_per_s: float
    sent_per_s: float
    busy: float
    """Share of the interval with work in flight."""
    idle: float
    """Share waiting for input, not busy and not blocked."""
    blocked: float
    """Share with a send waiting on a full downstream queue, not busy."""
    replies: float
    """Share of the interval with requests of its own awaiting replies (overlaps idle)."""
    queue_depth: int
    handled: int
    alive: bool


class StatsUnavailable(RuntimeError):
    """The endpoint did not answer in time (graph gone or busy)."""


def graph_dir(endpoint: str) -> GraphDir:
    """The graph directory of a local stats endpoint: its name, owner and run directory
    ("ipc:///tmp/rstar2-graph-demo-4242-abc123/stats.sock" -> the graph named "demo")."""
    return parse_graph_dir(os.path.dirname(endpoint.removeprefix("ipc://")))


def poll_stats(
    endpoint: str, timeout_s: float = 2.0, context: zmq.Context | None = None
) -> list[StatsReply]:
    """Counters of every process of the graph behind `endpoint` (one StatsReply each)."""
    ctx = context or zmq.Context.instance()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        sock.connect(endpoint)
        sock.send_multipart(to_frames(StatsRequest(spans=False)))
        replies: list[StatsReply] = []
        wait_ms = int(timeout_s * 1000)
        while sock.poll(wait_ms, zmq.POLLIN):
            try:
                msg = from_frames(sock.recv_multipart())
            except WireError:
                continue
            if isinstance(msg, StatsReply):
                replies.append(msg)
            wait_ms = int(_SETTLE_S * 1000)
    finally:
        sock.close()
    if not replies:
        raise StatsUnavailable(f"no stats from {endpoint} within {timeout_s} s")
    return replies


def flatten(replies: list[StatsReply]) -> list[ActorStats]:
    return [a for r in replies for a in r.actors]


def live_rows(prev: list[ActorStats], cur: list[ActorStats], dt: float) -> list[LiveRow]:
    """Rates over the `dt` seconds between two snapshots (an instance new in `cur` counts from 0)."""
    if dt <= 0:
        raise ValueError(f"time between snapshots must be > 0, got {dt}")
    before = {s.actor: s for s in prev}
    rows = []
    for s in cur:
        p = before.get(s.actor, ActorStats(s.actor, s.process))
        busy = _share(s.busy_s - p.busy_s, dt)
        blocked = min(1.0 - busy, _share(s.blocked_s - p.blocked_s, dt))
        idle = max(0.0, min(1.0 - busy - blocked, _share(s.wait_s - p.wait_s, dt)))
        rows.append(
            LiveRow(
                actor=s.actor,
                process=s.process,
                msgs_per_s=max(0, s.received - p.received) / dt,
                sent_per_s=max(0, s.sent - p.sent) / dt,
                busy=busy,
                idle=idle,
                blocked=blocked,
                replies=_share(s.reply_s - p.reply_s, dt),
                queue_depth=s.queue_depth,
                handled=s.handled,
                alive=s.alive,
            )
        )
    return sorted(rows, key=lambda r: r.actor)


def _share(seconds: float, dt: float) -> float:
    return min(1.0, max(0.0, seconds) / dt)


def format_rows(title: str, rows: list[LiveRow]) -> str:
    head = (
        f"{'actor':<20}{'process':<10}{'in/s':>9}{'out/s':>9}{'busy':>7}{'idle':>7}"
        f"{'blocked':>9}{'replies':>9}{'queue':>7}{'handled':>10}"
    )
    lines = [title, head]
    for r in rows:
        flag = "" if r.alive else "  (dead)"
        lines.append(
            f"{r.actor:<20}{r.process:<10}{r.msgs_per_s:>9.1f}{r.sent_per_s:>9.1f}"
            f"{r.busy:>7.0%}{r.idle:>7.0%}{r.blocked:>9.0%}{r.replies:>9.0%}{r.queue_depth:>7}"
            f"{r.handled:>10}{flag}"
        )
    return "\n".join(lines)


def timed_poll(endpoint: str, timeout_s: float = 2.0) -> tuple[float, list[ActorStats]]:
    """(monotonic time, counters) of one poll."""
    stats = flatten(poll_stats(endpoint, timeout_s))
    return time.monotonic(), stats
