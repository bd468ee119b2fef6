"""`AsyncSocket`'s wake-ups: one task waits on the socket's edge-triggered FD while another
uses the same socket (a service's replies on the ROUTER its inbox reads, a request client's
sends on the DEALER its reader waits on). An operation that takes the FD's edge from the waiter
must wake it when what it waits for is set, and an empty socket reads as None."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sized

import anyio
import pytest
import zmq

from rstar2.actors.sockets import AsyncSocket, SocketFactory

pytestmark = pytest.mark.anyio


@pytest.fixture
def pair() -> Iterator[tuple[zmq.Socket, AsyncSocket, bytes]]:
    """A plain ROUTER, and an AsyncSocket DEALER connected to it; the ROUTER's name for it."""
    ctx = zmq.Context()
    factory = SocketFactory(ctx)
    router = ctx.socket(zmq.ROUTER)
    router.bind("inproc://wakeups")
    dealer = factory.connect(zmq.DEALER, ["inproc://wakeups"])
    try:
        assert dealer.send_nowait([b"hello"])
        identity, _ = router.recv_multipart()
        yield router, dealer, identity
    finally:
        router.close(linger=0)
        factory.close()
        ctx.term()


async def _until_filled(items: Sized) -> None:
    """Wait (2 s at most) until a task has put something in `items`."""
    with anyio.fail_after(2):
        while not items:
            await anyio.sleep(0.01)


async def _recv_into(dealer: AsyncSocket, got: list[list[bytes]]) -> None:
    got.append(await dealer.recv())


async def test_a_send_that_takes_the_waiters_edge_wakes_it(
    pair: tuple[zmq.Socket, AsyncSocket, bytes],
) -> None:
    router, dealer, identity = pair
    got: list[list[bytes]] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(_recv_into, dealer, got)
        await anyio.sleep(0.05)  # the reader waits on the FD
        assert got == []
        router.send_multipart([identity, b"reply"])
        time.sleep(0.05)  # no await: the reply's signal is on the FD, the reader not yet run
        assert dealer.send_nowait([b"more"])  # takes the FD's edge: only the wake-up is left
        await _until_filled(got)
    assert got == [[b"reply"]]


async def test_a_send_leaves_a_waiter_alone_when_nothing_it_waits_for_came(
    pair: tuple[zmq.Socket, AsyncSocket, bytes],
) -> None:
    router, dealer, identity = pair
    got: list[list[bytes]] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(_recv_into, dealer, got)
        await anyio.sleep(0.05)
        scope = dealer._fd_scope
        assert scope is not None
        assert dealer.send_nowait([b"more"])  # no reply has come: the reader waits on
        assert dealer._fd_scope is scope and not scope.cancel_called
        router.send_multipart([identity, b"reply"])  # and the FD wakes it
        await _until_filled(got)
    assert got == [[b"reply"]]


async def test_an_empty_socket_reads_as_none(
    pair: tuple[zmq.Socket, AsyncSocket, bytes],
) -> None:
    router, dealer, identity = pair
    assert dealer.recv_nowait() is None and dealer.recv_batch_nowait(8) == []
    for i in range(3):
        router.send_multipart([identity, b"%d" % i])
    time.sleep(0.05)
    assert dealer.recv_batch_nowait(8) == [[b"0"], [b"1"], [b"2"]]
    assert dealer.recv_nowait() is None


async def test_closing_wakes_the_waiter_even_when_the_zmq_socket_is_gone(
    pair: tuple[zmq.Socket, AsyncSocket, bytes],
) -> None:
    _, dealer, _ = pair
    failed: list[BaseException] = []

    async def reader() -> None:
        try:
            await dealer.recv()
        except zmq.ZMQError as e:  # the closed socket, read again after the wake-up
            failed.append(e)

    async with anyio.create_task_group() as tg:
        tg.start_soon(reader)
        await anyio.sleep(0.05)
        dealer.sock.close(linger=0)  # closed under it (a factory closing its sockets)
        dealer.close()  # no EVENTS to read now: it wakes the waiter anyway, and does not raise
        await _until_filled(failed)
    assert dealer.closed
