"""What a profiling run collected: actor counters, spans, extra tracks and per-step stage times.

A `Recording` is the one input of the trace writer and of the report. It holds:
- `stats`: the runtime's `ActorStats` of every actor instance (cumulative counters);
- `spans`: the runtime's `Span`s ("handle" / "wait" / "blocked"), per instance;
- `extra_spans` and `counters`: tracks that actors do not record through the runtime, such as
  one per inference engine or per sandbox worker, and sampled values such as KV use. A graph
  hands these back in its stop result (`ctx.stop_graph(reason, {"profile": {...}})`, see
  `extras_from_result`); the trainer's metrics rows carry the per-step stage times;
- `steps`: per-step rows whose `time_<stage>_s` keys give the time split of each step;
- `start`/`end`: the wall-clock window the run covers (seconds, `time.time()`).

Instance names are "<actor>.<index>" (the runtime's naming); `role_of` maps one to its actor.

What it does not do: run anything (see `workload.py`) or interpret the numbers (`report.py`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from rstar2.wire import ActorStats, Span, StatsReply

STAGE_PREFIX = "time_"
STAGE_SUFFIX = "_s"


class Edge(NamedTuple):
    """A connection between two actors of the graph."""

    upstream: str
    """The sending actor (the client, for a request/reply port)."""
    downstream: str
    """The receiving actor (the service, for a request/reply port)."""
    request: bool = False
    """True when upstream calls downstream as a service and waits for replies."""


@dataclass(frozen=True)
class Counter:
    """One sampled value of a named counter on a track (e.g. track "engine.0", name "kv_used")."""

    track: str
    name: str
    time: float
    value: float


@dataclass
class Recording:
    start: float
    """Wall-clock start of the profiled window (seconds since the epoch)."""
    end: float
    """Wall-clock end of the window; must be after `start`."""
    stats: list[ActorStats] = field(default_factory=list)
    """Cumulative counters of every actor instance."""
    spans: list[Span] = field(default_factory=list)
    """Runtime spans of every instance (may miss the oldest ones: the ring buffer is bounded)."""
    extra_spans: list[Span] = field(default_factory=list)
    """Spans of tracks the runtime does not know (engines, sandbox workers); `actor` names the
    track, e.g. "rollout.0/engine"."""
    counters: list[Counter] = field(default_factory=list)
    """Sampled values (KV use, running requests, ...) on named tracks."""
    steps: list[dict[str, Any]] = field(default_factory=list)
    """Per-step rows with `time_<stage>_s` keys (the trainer's metrics rows)."""
    edges: list[Edge] = field(default_factory=list)
    """The graph's connections between actors (see `workload.graph_edges`)."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.start) and math.isfinite(self.end)):
            raise ValueError(f"recording window must be finite, got {self.start}..{self.end}")
        if self.end <= self.start:
            raise ValueError(f"recording window must end after it starts: {self.start}..{self.end}")

    @property
    def duration(self) -> float:
        return self.end - self.start


def role_of(instance: str) -> str:
    """ "sandbox.3" -> "sandbox"; a name without an index is its own role."""
    base, dot, index = instance.rpartition(".")
    return base if dot and index.isdigit() else instance


def from_replies(
    replies: Iterable[StatsReply], start: float, end: float, **extra: Any
) -> Recording:
    """A Recording from the runtime's StatsReply list (one per process)."""
    stats: list[ActorStats] = []
    spans: list[Span] = []
    for reply in replies:
        stats.extend(reply.actors)
        spans.extend(reply.spans)
    return Recording(start=start, end=end, stats=stats, spans=spans, **extra)


def extras_from_result(result: Any) -> tuple[list[Span], list[Counter], list[dict[str, Any]]]:
    """Extra spans, counters and step rows a graph handed back in its stop result.

    The convention: `result["profile"]` is a mapping with optional lists
    - "spans": `[track, kind, start, end]` (kind is free text, e.g. "generate", "exec"),
    - "counters": `[track, name, time, value]`,
    - "steps": rows with `time_<stage>_s` keys.
    A result without a "profile" mapping has no extras; a malformed entry raises ValueError.
    """
    if not isinstance(result, Mapping) or not isinstance(result.get("profile"), Mapping):
        return [], [], []
    profile = result["profile"]
    spans = [_span(row) for row in profile.get("spans", [])]
    counters = [_counter(row) for row in profile.get("counters", [])]
    steps = [dict(row) for row in profile.get("steps", []) if isinstance(row, Mapping)]
    return spans, counters, steps


def _span(row: Any) -> Span:
    if not (isinstance(row, list | tuple) and len(row) == 4):
        raise ValueError(f"profile span must be [track, kind, start, end], got {row!r}")
    track, kind, start, end = row
    if float(end) < float(start):
        raise ValueError(f"profile span ends before it starts: {row!r}")
    return Span(str(track), str(kind), float(start), float(end))


def _counter(row: Any) -> Counter:
    if not (isinstance(row, list | tuple) and len(row) == 4):
        raise ValueError(f"profile counter must be [track, name, time, value], got {row!r}")
    track, name, time, value = row
    return Counter(str(track), str(name), float(time), float(value))


def stage_times(row: Mapping[str, Any]) -> dict[str, float]:
    """ "time_gen_s": 1.5 -> {"gen": 1.5}; other keys and non-numbers are ignored."""
    out: dict[str, float] = {}
    for key, value in row.items():
        if key.startswith(STAGE_PREFIX) and key.endswith(STAGE_SUFFIX):
            if isinstance(value, int | float) and not isinstance(value, bool):
                out[key[len(STAGE_PREFIX) : -len(STAGE_SUFFIX)]] = float(value)
    return out
