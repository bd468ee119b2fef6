"""Per-actor load figures from a Recording: busy / idle / blocked fractions, rates, queue depth.

For each instance, over the recording's window T:
- busy = time handling messages / T;
- idle = time waiting for input with nothing to handle / T;
- blocked = time a send waited because the downstream queue was full (and nothing was
  handled meanwhile) / T;
  when the instance's spans are all still in the ring buffer these are lengths of unions of
  spans, so an actor with several requests in flight counts a moment once (see `_partition`);
  otherwise they come from the `busy_s` / `blocked_s` / `wait_s` counters, capped at 1;
- other = what is left: waiting on replies to its own requests (a client waiting on a
  service: "reply" spans, which take precedence over a wait for input running at the same
  time), code the runtime does not see (a custom `serve()`'s own work), or time after it
  finished;
- msgs_per_s = messages received / T (messages sent for a pure source);
- queue depth p50 / max over the depths recorded with its handle spans (messages drained and
  waiting behind the one being handled), or the current depth when there are no spans.

An actor (role) with several instances gets the mean of their fractions, the sum of their
rates and the worst of their queue depths.

What it does not do: decide anything (see `bottleneck.py`).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from rstar2.profile.recording import Recording, role_of
from rstar2.wire import ActorStats, Span

_COVERAGE = 0.98  # spans hold at least this share of busy_s: the ring buffer lost none


@dataclass(frozen=True)
class ActorLoad:
    """Load figures of one actor instance, or of all instances of one actor."""

    name: str
    instances: int
    busy: float
    idle: float
    blocked: float
    other: float
    msgs_per_s: float
    queue_p50: float
    queue_max: int
    received: int
    sent: int


def instance_loads(rec: Recording) -> dict[str, ActorLoad]:
    """Instance name -> its load over the recording's window."""
    spans: dict[str, list[Span]] = defaultdict(list)
    for s in rec.spans:
        spans[s.actor].append(s)
    return {st.actor: _instance_load(st, spans[st.actor], rec) for st in rec.stats}


def actor_loads(rec: Recording) -> dict[str, ActorLoad]:
    """Actor (role) name -> the combined load of its instances, in first-seen order."""
    groups: dict[str, list[ActorLoad]] = defaultdict(list)
    for load in instance_loads(rec).values():
        groups[role_of(load.name)].append(load)
    return {role: combine(role, loads) for role, loads in groups.items()}


def combine(role: str, loads: list[ActorLoad]) -> ActorLoad:
    """The loads of several instances as one actor (mean fractions, summed rates)."""
    if not loads:
        raise ValueError(f"actor {role!r} has no instances to combine")
    n = len(loads)
    return ActorLoad(
        name=role,
        instances=sum(x.instances for x in loads),
        busy=sum(x.busy for x in loads) / n,
        idle=sum(x.idle for x in loads) / n,
        blocked=sum(x.blocked for x in loads) / n,
        other=sum(x.other for x in loads) / n,
        msgs_per_s=sum(x.msgs_per_s for x in loads),
        queue_p50=max(x.queue_p50 for x in loads),
        queue_max=max(x.queue_max for x in loads),
        received=sum(x.received for x in loads),
        sent=sum(x.sent for x in loads),
    )


def _instance_load(st: ActorStats, spans: list[Span], rec: Recording) -> ActorLoad:
    t = rec.duration
    handles = [s for s in spans if s.kind == "handle"]
    busy, idle, blocked = _partition(st, spans, rec)
    depths = sorted(s.queue_depth for s in handles) or [st.queue_depth]
    return ActorLoad(
        name=st.actor,
        instances=1,
        busy=busy,
        idle=idle,
        blocked=blocked,
        other=_clamp(1.0 - busy - idle - blocked),
        msgs_per_s=(st.received or st.sent) / t,
        queue_p50=percentile(depths, 0.5),
        queue_max=depths[-1],
        received=st.received,
        sent=st.sent,
    )


def _partition(st: ActorStats, spans: list[Span], rec: Recording) -> tuple[float, float, float]:
    """(busy, idle, blocked) shares of the window that never add up to more than 1.

    An actor that receives in one task while it handles in others (a service with requests in
    flight) waits for input and works at the same time; a moment counts once, with priority
    handle > blocked > reply > wait (a moment spent waiting on a reply is not idle, even with
    a wait for input open beside it: it goes to "other"). That needs every span of the
    instance; when the ring buffer lost some (spans hold less than the counters), the counters
    are used, capped at 1 in total.
    """
    kinds = ("handle", "blocked", "reply", "wait")
    by_kind = {k: [s for s in spans if s.kind == k] for k in kinds}
    counters = {
        "handle": st.busy_s,
        "blocked": st.blocked_s,
        "reply": st.reply_s,
        "wait": st.wait_s,
    }
    complete = all(
        sum(s.end - s.start for s in by_kind[k]) >= _COVERAGE * counters[k] for k in counters
    )
    t = rec.duration
    if not complete:
        busy = _clamp(st.busy_s / t)
        blocked = min(1.0 - busy, _clamp(st.blocked_s / t))
        return busy, min(1.0 - busy - blocked, _clamp(st.wait_s / t)), blocked
    h = union_length(by_kind["handle"], rec.start, rec.end)
    hb = union_length(by_kind["handle"] + by_kind["blocked"], rec.start, rec.end)
    hbr = union_length(
        by_kind["handle"] + by_kind["blocked"] + by_kind["reply"], rec.start, rec.end
    )
    everything = union_length(spans, rec.start, rec.end)
    return _clamp(h / t), _clamp((everything - hbr) / t), _clamp((hb - h) / t)


def union_length(spans: list[Span], lo: float, hi: float) -> float:
    """Total length of the union of the spans' intervals, clipped to [lo, hi]."""
    total = 0.0
    cur_start, cur_end = lo, lo
    for s in sorted(spans, key=lambda s: s.start):
        start, end = max(s.start, lo), min(s.end, hi)
        if end <= start:
            continue
        if start > cur_end:
            total += cur_end - cur_start
            cur_start, cur_end = start, end
        else:
            cur_end = max(cur_end, end)
    return total + (cur_end - cur_start)


def percentile(sorted_values: list[int] | list[float], q: float) -> float:
    """Linear-interpolated percentile (q in [0, 1]) of an already sorted, non-empty list."""
    if not sorted_values:
        raise ValueError("percentile of an empty list")
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"percentile q must be in [0, 1], got {q}")
    pos = q * (len(sorted_values) - 1)
    low = int(pos)
    high = min(low + 1, len(sorted_values) - 1)
    return float(sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (pos - low))


def _clamp(x: float) -> float:
    return min(1.0, max(0.0, x))
