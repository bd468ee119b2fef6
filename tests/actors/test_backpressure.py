"""A slow consumer slows its producer: the number of messages in flight stays bounded."""

from __future__ import annotations

import anyio
import pytest
from actor_graphs import DEMO

from rstar2.actors import graph_config, open_graph

pytestmark = pytest.mark.anyio

HWM = 20
BATCH = 8


async def test_slow_consumer_bounds_messages_in_flight() -> None:
    n = 400
    cfg = graph_config(
        {
            "name": "test-backpressure",
            "hwm": HWM,
            "batch": BATCH,
            "edges": ["source.out -> sink.in"],
            "actors": [
                {"name": "source", "cls": f"{DEMO}:Source", "params": {"n": n, "size": 1024}},
                {"name": "sink", "cls": f"{DEMO}:SlowSink", "params": {"n": n, "delay_s": 0.002}},
            ],
        }
    )
    in_flight = []
    async with open_graph(cfg) as graph:
        tracers = graph.supervisor.tracers
        with anyio.fail_after(30):
            while not graph.stopping:
                in_flight.append(tracers["source.0"].stats.sent - tracers["sink.0"].stats.handled)
                await anyio.sleep(0.01)
        result = await graph.wait()
    assert result.result["count"] == n
    # Without backpressure the source would have sent all 400 at once. With it, what is
    # queued is bounded by the send and receive high-water marks plus one drained batch
    # (inproc pipes may hold one more hwm: allow 4 x hwm).
    assert max(in_flight) <= 4 * HWM + BATCH, max(in_flight)
    assert tracers["source.0"].stats.blocked_s > 0
    assert any(s.kind == "blocked" for s in tracers["source.0"].spans())
