"""`handling` records a custom serve()'s work as a handle span, even when the work raises."""

from __future__ import annotations

import pytest

from rstar2.actors.context import ActorContext, ContextSockets
from rstar2.actors.trace import Tracer
from rstar2.profile.handling import handling


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
