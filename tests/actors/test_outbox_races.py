"""Concurrent sends on one packed port: every message arrives, whatever the interleaving.

The pattern that lost a message in the live graph: the scheduler's rollout tasks all finished
at once (over-long prompts come back unrun) and each sent its result on ``done``, a body over
half an outbox's room. One task finds the outbox holding another's body, flushes it and yields;
meanwhile a third task queues its body; the first then has to make room again.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import pytest
import zmq

from rstar2.actors import port
from rstar2.actors.context import ActorContext, ContextSockets
from rstar2.actors.outbox import Outbox
from rstar2.actors.sockets import AsyncSocket, SocketFactory
from rstar2.actors.trace import Tracer
from rstar2.frames import from_frames, is_packed, unpack_frame
from rstar2.wire import Item, Message

pytestmark = pytest.mark.anyio

ROOM = 60_000


@pytest.fixture
async def packed_edge() -> AsyncIterator[tuple[ActorContext, AsyncSocket]]:
    """A context whose "out" port packs (an Outbox of `ROOM` bytes over PUSH), and its PULL."""
    factory = SocketFactory(zmq.Context())
    try:
        pull = factory.bind(zmq.PULL, "inproc://outbox-races")
        push = factory.connect(zmq.PUSH, ["inproc://outbox-races"])
        socks = ContextSockets(streams={"out": push}, outboxes={"out": Outbox(push, 64, ROOM)})
        ctx = ActorContext(
            "a.0", {}, {"out": port(Item)}, socks, Tracer("a.0", "main"), max_message_bytes=1 << 20
        )
        yield ctx, pull
    finally:
        factory.close()


def received(pull: AsyncSocket) -> list[int]:
    """The `seq` of every message queued on `pull` (packed frames unpacked), sorted."""
    out: list[Message] = []
    for frames in pull.recv_batch_nowait(1000):
        if is_packed(frames):
            messages, errors = unpack_frame(frames[0])
            assert errors == []
            out.extend(messages)
        else:
            out.append(from_frames(frames))
    assert all(isinstance(m, Item) for m in out)
    return sorted(m.seq for m in out if isinstance(m, Item))


async def burst(ctx: ActorContext, sizes: list[int]) -> None:
    """One task per message, all released at once (as the scheduler's finished rollouts are),
    each sending `Item(seq, seq, payload of size)` on "out"; then the runtime's last flush."""
    go = anyio.Event()

    async def send(seq: int, size: int) -> None:
        await go.wait()
        await ctx.send("out", Item(seq, seq, b"x" * size))

    async with anyio.create_task_group() as tg:
        ctx.attach(tg)
        async with anyio.create_task_group() as senders:
            for seq, size in enumerate(sizes):
                senders.start_soon(send, seq, size)
            await anyio.wait_all_tasks_blocked()
            go.set()
        await ctx.flush()
        tg.cancel_scope.cancel()


@pytest.mark.parametrize("count", [3, 4, 8])
async def test_a_burst_of_bodies_over_half_the_room_all_arrive(
    packed_edge: tuple[ActorContext, AsyncSocket], count: int
) -> None:
    ctx, pull = packed_edge
    with anyio.fail_after(5):
        await burst(ctx, [ROOM // 2 + 1000] * count)
    assert received(pull) == list(range(count))
    assert ctx.tracer.stats.sent == count


async def test_a_burst_of_mixed_sizes_all_arrive(
    packed_edge: tuple[ActorContext, AsyncSocket],
) -> None:
    # small (fast path), over half the room (refused beside another), too big to pack (alone)
    sizes = [10, ROOM // 2 + 1000, 20_000, ROOM + 100, 10, ROOM // 2 + 1000] * 6
    ctx, pull = packed_edge
    with anyio.fail_after(5):
        await burst(ctx, sizes)
    assert received(pull) == list(range(len(sizes)))
    assert ctx.tracer.stats.sent == len(sizes)
