"""Malformed and oversized messages are logged, counted and skipped; the actor goes on."""

from __future__ import annotations

import anyio
import pytest
import zmq
from actor_graphs import DEMO

from rstar2.actors import RunningGraph, graph_config, open_graph
from rstar2.actors.sockets import AsyncSocket
from rstar2.frames import to_frames
from rstar2.wire import Hello, Item

pytestmark = pytest.mark.anyio


def sink_only(max_bytes: int = 4096):
    return graph_config(
        {
            "name": "test-bad",
            "max_message_bytes": max_bytes,
            "actors": [{"name": "sink", "cls": f"{DEMO}:Sink", "params": {"n": 3}}],
        }
    )


def pusher_into_sink(graph: RunningGraph) -> AsyncSocket:
    """A PUSH socket connected to the sink's input (made by the graph's own socket factory)."""
    endpoint = graph.plan.instances[0].binds["in"]
    return graph.supervisor.factory.connect(zmq.PUSH, [endpoint])


async def test_garbage_and_oversized_messages_do_not_stop_the_actor() -> None:
    async with open_graph(sink_only(max_bytes=4096)) as graph:
        peer = pusher_into_sink(graph)
        assert peer.send_nowait([b"\xc1 not msgpack"])
        assert peer.send_nowait([b"\x92\x63\x01"])  # valid msgpack, unknown tag 99
        assert peer.send_nowait(to_frames(Item(0, 100, b"x" * 10_000)))  # over 4096 bytes
        for seq in range(3):
            assert peer.send_nowait(to_frames(Item(seq, 1)))
        with anyio.fail_after(10):
            result = await graph.wait()
    assert result.reason == "stopped" and result.result == {"count": 3, "sum": 3}
    (stats,) = result.stats
    assert (stats.malformed, stats.oversized, stats.handled) == (2, 1, 3)


async def test_message_of_a_type_the_port_does_not_take_is_skipped() -> None:
    async with open_graph(sink_only()) as graph:
        peer = pusher_into_sink(graph)
        assert peer.send_nowait(to_frames(Hello("x", [])))
        for seq in range(3):
            assert peer.send_nowait(to_frames(Item(seq, 2)))
        with anyio.fail_after(10):
            result = await graph.wait()
    assert result.result == {"count": 3, "sum": 6}
    assert result.stats[0].malformed == 1
