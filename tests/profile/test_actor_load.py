"""Per-actor load figures from hand-made spans and counters (exact values)."""

from __future__ import annotations

import pytest
from profile_factories import T0, recording, span

from rstar2.profile.actor_load import actor_loads, instance_loads, percentile, union_length
from rstar2.profile.recording import Recording
from rstar2.wire import ActorStats


def test_union_length_merges_overlaps_and_clips_to_the_window() -> None:
    spans = [
        span("a", "handle", 0.1, 0.3),
        span("a", "handle", 0.2, 0.4),
        span("a", "handle", 0.6, 0.7),
        span("a", "handle", -0.5, 0.05),
    ]
    assert union_length(spans, T0, T0 + 0.65) == pytest.approx(0.05 + 0.3 + 0.05)


def test_sequential_actor_shares_come_from_its_spans() -> None:
    spans = [
        span("s.0", "wait", 0.0, 0.2),
        span("s.0", "handle", 0.2, 0.7, depth=3),
        span("s.0", "blocked", 0.7, 0.8),
        span("s.0", "handle", 0.8, 0.9, depth=1),
    ]
    a = instance_loads(recording(spans))["s.0"]
    assert (a.busy, a.idle, a.blocked) == pytest.approx((0.6, 0.2, 0.1))
    assert a.other == pytest.approx(0.1)
    assert (a.queue_p50, a.queue_max) == (2.0, 3)


def test_a_service_waiting_while_requests_are_in_flight_counts_each_moment_once() -> None:
    # receives in one task (wait spans) while two requests are handled in others
    spans = [
        span("e.0", "wait", 0.0, 1.0),
        span("e.0", "handle", 0.1, 0.6),
        span("e.0", "handle", 0.3, 0.8),
    ]
    a = instance_loads(recording(spans))["e.0"]
    assert a.busy == pytest.approx(0.7)
    assert a.idle == pytest.approx(0.3)
    assert a.busy + a.idle + a.blocked + a.other == pytest.approx(1.0)


def test_a_client_waiting_on_replies_is_not_idle() -> None:
    # a custom serve(): waits for input in one task while its requests wait on a service
    spans = [
        span("c.0", "wait", 0.0, 1.0),
        span("c.0", "reply", 0.2, 0.7),
        span("c.0", "reply", 0.5, 0.8),
        span("c.0", "handle", 0.1, 0.2),
    ]
    a = instance_loads(recording(spans))["c.0"]
    assert (a.busy, a.idle, a.blocked) == pytest.approx((0.1, 0.3, 0.0), abs=1e-6)
    assert a.other == pytest.approx(0.6, abs=1e-6)  # waiting on replies, not idle


def test_counters_are_used_when_the_ring_buffer_lost_spans() -> None:
    spans = [span("s.0", "handle", 0.9, 1.0)]
    stats = [ActorStats("s.0", "main", received=50, busy_s=0.8, wait_s=0.5)]
    rec = Recording(T0, T0 + 1.0, stats=stats, spans=spans)
    a = instance_loads(rec)["s.0"]
    assert (a.busy, a.idle) == pytest.approx((0.8, 0.2))  # idle capped so shares sum to <= 1
    assert a.msgs_per_s == pytest.approx(50.0)


def test_an_actor_combines_its_instances() -> None:
    spans = [
        span("w.0", "handle", 0.0, 1.0),
        span("w.1", "handle", 0.0, 0.5, depth=4),
        span("w.1", "wait", 0.5, 1.0),
    ]
    rec = recording(spans, duration=1.0)
    rec.stats = [
        ActorStats(s.actor, s.process, received=10, busy_s=s.busy_s, wait_s=s.wait_s)
        for s in rec.stats
    ]
    w = actor_loads(rec)["w"]
    assert w.instances == 2
    assert (w.busy, w.idle) == pytest.approx((0.75, 0.25))
    assert w.msgs_per_s == pytest.approx(20.0)
    assert w.queue_max == 4


def test_percentile_interpolates_and_rejects_bad_input() -> None:
    assert percentile([1, 2, 3, 4], 0.5) == 2.5
    assert percentile([7], 0.9) == 7.0
    with pytest.raises(ValueError):
        percentile([], 0.5)
    with pytest.raises(ValueError):
        percentile([1], 1.5)
