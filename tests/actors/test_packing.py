"""Packed frames: several small messages per frame on edges to a single instance, and only there."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager

import anyio
import numpy as np
import pytest
import zmq
from actor_graphs import DEMO, expected_sum

from rstar2.actors import graph_config, open_graph, port, run_graph
from rstar2.actors.context import ActorContext, ContextSockets
from rstar2.actors.outbox import Outbox
from rstar2.actors.sockets import AsyncSocket, SocketFactory
from rstar2.actors.trace import Tracer
from rstar2.frames import MessageTooLarge, is_packed, pack_bodies, to_frames, unpack_frame
from rstar2.wire import Item, Shutdown, WeightUpdate

pytestmark = pytest.mark.anyio


def body(seq: int, size: int = 0) -> bytes:
    [frame] = to_frames(Item(seq, seq, b"x" * size))
    assert isinstance(frame, bytes)
    return frame


# --- wire: pack_bodies / unpack_frame -------------------------------------------------------


@pytest.mark.parametrize("n", [1, 15, 16, 300])  # fixarray, then the 16-bit array header
def test_packed_frame_round_trips_in_order(n: int) -> None:
    frame = pack_bodies([body(i) for i in range(n)])
    assert is_packed([frame]) and not is_packed([body(0)])
    messages, errors = unpack_frame(frame)
    assert errors == [] and messages == [Item(i, i) for i in range(n)]


def test_one_bad_body_costs_only_itself() -> None:
    frame = pack_bodies([body(0), b"\x92\x63\x01", body(2)])  # tag 99 is no message
    messages, errors = unpack_frame(frame)
    assert messages == [Item(0, 0), Item(2, 2)] and len(errors) == 1


def test_packed_body_cannot_point_at_array_frames() -> None:
    update = to_frames(WeightUpdate(1, ["w"], [[2]], np.zeros(2, dtype=np.float32)))
    messages, errors = unpack_frame(pack_bodies([bytes(update[0]), body(1)]))
    assert messages == [Item(1, 1)] and len(errors) == 1


def test_packed_frame_over_the_limit_or_not_an_array_is_one_error() -> None:
    frame = pack_bodies([body(i, 100) for i in range(10)])
    messages, errors = unpack_frame(frame, max_bytes=len(frame) - 1)
    assert messages == [] and len(errors) == 1 and isinstance(errors[0], MessageTooLarge)
    assert unpack_frame(b"\xc1\x81\x01\x02")[0] == []  # a map, not an array


# --- the context's send path ----------------------------------------------------------------


@contextmanager
def edge(
    max_messages: int = 64, max_bytes: int = 60_000
) -> Iterator[tuple[ActorContext, AsyncSocket]]:
    """A context whose "out" port packs (an Outbox over PUSH), and the PULL it reaches."""
    factory = SocketFactory(zmq.Context())
    try:
        pull = factory.bind(zmq.PULL, "inproc://packed-edge")
        push = factory.connect(zmq.PUSH, ["inproc://packed-edge"])
        outbox = Outbox(push, max_messages, max_bytes)
        socks = ContextSockets(streams={"out": push}, outboxes={"out": outbox})
        ports = {"out": port((Item, WeightUpdate))}
        ctx = ActorContext(
            "a.0", {}, ports, socks, Tracer("a.0", "main"), max_message_bytes=1 << 20
        )
        yield ctx, pull
    finally:
        factory.close()


@pytest.fixture
async def packed_edge() -> AsyncIterator[tuple[ActorContext, AsyncSocket]]:
    with edge() as (ctx, pull):
        yield ctx, pull


async def send_all(ctx: ActorContext, messages: list[Item]) -> None:
    """Send `messages` on "out" in one step, then the runtime's flush."""
    async with anyio.create_task_group() as tg:
        ctx.attach(tg)
        for msg in messages:
            await ctx.send("out", msg)
        await ctx.flush()
        tg.cancel_scope.cancel()


async def test_the_outbox_limits_by_count() -> None:
    with edge(max_messages=2) as (ctx, pull):
        await send_all(ctx, [Item(i, i) for i in range(3)])
        frames = pull.recv_batch_nowait(10)
    assert [f[0] for f in frames] == [pack_bodies([body(0), body(1)]), body(2)]


async def test_the_outbox_limits_by_bytes_and_what_cannot_pack_goes_alone() -> None:
    one = len(body(0, 100))
    with edge(max_bytes=2 * one + 6) as (ctx, pull):  # room for two such bodies
        await send_all(ctx, [Item(i, i, b"x" * 100) for i in range(3)] + [Item(3, 3, b"x" * 300)])
        frames = pull.recv_batch_nowait(10)
    packed = pack_bodies([body(0, 100), body(1, 100)])
    assert [f[0] for f in frames] == [packed, body(2, 100), body(3, 300)]


async def test_messages_sent_in_one_step_leave_as_one_frame(
    packed_edge: tuple[ActorContext, AsyncSocket],
) -> None:
    ctx, pull = packed_edge
    async with anyio.create_task_group() as tg:
        ctx.attach(tg)
        for seq in range(10):
            await ctx.send("out", Item(seq, seq))
        assert pull.recv_nowait() is None  # still in the outbox: nothing yielded yet
        await ctx.flush()
        tg.cancel_scope.cancel()
    [frame] = pull.recv_batch_nowait(10)
    assert is_packed(frame)
    assert unpack_frame(frame[0]) == ([Item(i, i) for i in range(10)], [])
    assert ctx.tracer.stats.sent == 10


async def test_a_message_with_arrays_goes_alone_and_in_order(
    packed_edge: tuple[ActorContext, AsyncSocket],
) -> None:
    ctx, pull = packed_edge
    update = WeightUpdate(1, ["w"], [[3]], np.arange(3, dtype=np.float32))
    async with anyio.create_task_group() as tg:
        ctx.attach(tg)
        for msg in (Item(0, 0), Item(1, 1), update, Item(2, 2)):
            await ctx.send("out", msg)
        await ctx.flush()
        tg.cancel_scope.cancel()
    packed, alone, last = pull.recv_batch_nowait(10)
    assert unpack_frame(packed[0])[0] == [Item(0, 0), Item(1, 1)]
    assert len(alone) == 2 and not is_packed(alone)  # body + array frame
    assert last == [body(2)]  # one message: its plain body, no pack header


# --- in graphs ------------------------------------------------------------------------------


@pytest.mark.parametrize("process", ["main", "workers"], ids=["inproc", "ipc"])
async def test_fan_out_edges_still_spread_every_message(process: str) -> None:
    # 32 messages in one burst, batch 64: packed they would all reach one square instance.
    n = 32
    result = await run_graph(
        graph_config(
            {
                "name": "test-fan-out",
                "batch": 64,
                "edges": ["source.out -> square.in", "square.out -> sink.in"],
                "actors": [
                    {"name": "source", "cls": f"{DEMO}:Source", "params": {"n": n}},
                    {"name": "square", "cls": f"{DEMO}:Square", "count": 2, "process": process},
                    {"name": "sink", "cls": f"{DEMO}:Sink", "params": {"n": n}},
                ],
            }
        )
    )
    assert result.result == {"count": n, "sum": expected_sum(n)}
    handled = [s.handled for s in result.stats if s.actor.startswith("square")]
    assert min(handled) >= n // 4, handled


async def test_an_actor_that_sends_then_idles_still_delivers() -> None:
    # The sender never receives again, so only the flusher can send its outbox.
    cfg = graph_config(
        {
            "name": "test-flusher",
            "edges": ["sender.out -> sink.in"],
            "actors": [
                {"name": "sender", "cls": "actor_graphs:SendThenIdle", "params": {"n": 3}},
                {"name": "sink", "cls": f"{DEMO}:Sink", "params": {"n": 3}},
            ],
        }
    )
    async with open_graph(cfg) as graph:
        with anyio.fail_after(10):
            result = await graph.wait()
    assert result.result == {"count": 3, "sum": 3}


async def test_the_packed_fast_path_still_refuses_wrong_types_and_oversized_messages(
    packed_edge: tuple[ActorContext, AsyncSocket],
) -> None:
    ctx, pull = packed_edge
    ctx.max_message_bytes = 2000
    async with anyio.create_task_group() as tg:
        ctx.attach(tg)
        await ctx.send("out", Item(0, 0))
        with pytest.raises(MessageTooLarge):
            await ctx.send("out", Item(1, 1, b"x" * 3000))
        with pytest.raises(TypeError, match="takes"):
            await ctx.send("out", Shutdown())
        await ctx.send("out", Item(2, 2))
        await ctx.flush()
        tg.cancel_scope.cancel()
    [frame] = pull.recv_batch_nowait(10)
    assert unpack_frame(frame[0]) == ([Item(0, 0), Item(2, 2)], [])
    assert ctx.tracer.stats.sent == 2


async def test_a_full_outbox_leaves_as_one_frame_and_the_next_starts_a_new_one(
    packed_edge: tuple[ActorContext, AsyncSocket],
) -> None:
    ctx, pull = packed_edge  # the outbox holds 64 messages
    async with anyio.create_task_group() as tg:
        ctx.attach(tg)
        for seq in range(70):
            await ctx.send("out", Item(seq, seq))
        await ctx.flush()
        tg.cancel_scope.cancel()
    frames = pull.recv_batch_nowait(10)
    decoded = [unpack_frame(f[0])[0] for f in frames]
    assert [len(d) for d in decoded] == [64, 6]
    assert [m.seq for d in decoded for m in d] == list(range(70))
