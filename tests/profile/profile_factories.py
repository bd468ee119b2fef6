"""Factories for hand-made recordings and loads used by the profile tests."""

from __future__ import annotations

from rstar2.profile.actor_load import ActorLoad
from rstar2.profile.recording import Recording
from rstar2.wire import ActorStats, Span

T0 = 1_700_000_000.0


def span(actor: str, kind: str, start: float, end: float, depth: int = 0) -> Span:
    """A span at T0 + start .. T0 + end."""
    return Span(actor, kind, T0 + start, T0 + end, "in", depth)


def stats_for(actor: str, spans: list[Span], process: str = "main", **counts: int) -> ActorStats:
    """Counters that agree with `spans` (as the runtime keeps them)."""
    totals = {"handle": 0.0, "wait": 0.0, "blocked": 0.0, "reply": 0.0}
    for s in spans:
        if s.actor == actor:
            totals[s.kind] += s.end - s.start
    return ActorStats(
        actor,
        process,
        busy_s=totals["handle"],
        wait_s=totals["wait"],
        blocked_s=totals["blocked"],
        reply_s=totals["reply"],
        **counts,
    )


def recording(spans: list[Span], duration: float = 1.0, **extra: object) -> Recording:
    actors = sorted({s.actor for s in spans})
    stats = [stats_for(a, spans) for a in actors]
    return Recording(T0, T0 + duration, stats=stats, spans=spans, **extra)  # type: ignore[arg-type]


def load(
    name: str,
    busy: float,
    idle: float = 0.0,
    blocked: float = 0.0,
    *,
    queue_p50: float = 0.0,
    queue_max: int = 0,
    instances: int = 1,
) -> ActorLoad:
    return ActorLoad(
        name=name,
        instances=instances,
        busy=busy,
        idle=idle,
        blocked=blocked,
        other=max(0.0, 1.0 - busy - idle - blocked),
        msgs_per_s=10.0,
        queue_p50=queue_p50,
        queue_max=queue_max,
        received=10,
        sent=10,
    )
