"""`handling` records a custom serve()'s work as a handle span, even when the work raises."""

from __future__ import annotations

import pytest

from rstar2.actors.context import ActorContext, ContextSockets
from rstar2.actors.handling import BusyTrack, handling
from rstar2.actors.trace import Tracer


def _ctx() -> ActorContext:
    tracer = Tracer("learner.0", "main")
    return ActorContext("learner.0", {}, {}, ContextSockets(), tracer, max_message_bytes=1024)


def test_a_block_becomes_one_handle_span() -> None:
    ctx = _ctx()
    with handling(ctx, "update", queue_depth=3):
        pass
    [span] = ctx.tracer.spans()
    assert (span.actor, span.kind, span.port, span.queue_depth) == (
        "learner.0",
        "handle",
        "update",
        3,
    )
    assert span.end >= span.start
    assert ctx.tracer.stats.handled == 1
    assert ctx.tracer.stats.busy_s == pytest.approx(span.end - span.start)


def test_a_failing_block_is_still_recorded() -> None:
    ctx = _ctx()
    with pytest.raises(RuntimeError), handling(ctx, "update"):
        raise RuntimeError("update failed")
    assert [s.kind for s in ctx.tracer.spans()] == ["handle"]


def test_busy_track_tiles_overlapping_units_without_overlap() -> None:
    ctx = _ctx()
    track = BusyTrack(ctx, "exec", slots=1)
    with track.unit(), track.unit():
        with track.unit():
            pass
        with track.unit():
            pass
    spans = ctx.tracer.spans()
    # the third and fourth units end with two others in flight: one waits for the one slot
    assert [s.queue_depth for s in spans] == [1, 1, 0, 0]
    assert all(a.end <= b.start for a, b in zip(spans, spans[1:], strict=False))
    assert ctx.tracer.stats.handled == 4
    assert ctx.tracer.stats.busy_s == pytest.approx(spans[-1].end - spans[0].start)
    assert track.in_flight == 0


def test_busy_track_refuses_zero_slots() -> None:
    with pytest.raises(ValueError, match="slots"):
        BusyTrack(_ctx(), slots=0)
