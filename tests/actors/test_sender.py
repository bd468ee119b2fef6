"""`Sender` on an unpacked stream port: what it refuses, and the frames it sends (the packing
ports are in test_packing.py and test_outbox_races.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import zmq

from rstar2.actors import port
from rstar2.actors.sender import Sender
from rstar2.actors.sockets import AsyncSocket, SocketFactory
from rstar2.actors.trace import Tracer
from rstar2.frames import MessageTooLarge, from_frames
from rstar2.wire import EngineReport, EngineReportRequest, Item, Shutdown

pytestmark = pytest.mark.anyio


@pytest.fixture
def stream() -> Iterator[tuple[Sender, AsyncSocket]]:
    """A sender whose "out" stream port reaches a PULL; "ask" is a request port."""
    factory = SocketFactory(zmq.Context())
    try:
        pull = factory.bind(zmq.PULL, "inproc://sender-test")
        push = factory.connect(zmq.PUSH, ["inproc://sender-test"])
        ports = {"out": port(Item), "ask": port(EngineReportRequest, reply=EngineReport)}
        sender = Sender(
            "a.0", ports, {"out": push}, {}, {"ask"}, Tracer("a.0", "main"), [],
            max_message_bytes=1000,
        )  # fmt: skip
        yield sender, pull
    finally:
        factory.close()


async def test_a_message_goes_out_as_its_frames(stream: tuple[Sender, AsyncSocket]) -> None:
    sender, pull = stream
    await sender.send("out", Item(1, 2))
    frames = pull.recv_nowait()
    assert frames is not None and from_frames(frames) == Item(1, 2)
    assert sender.tracer.stats.sent == 1


async def test_what_cannot_go_raises_in_the_sender(stream: tuple[Sender, AsyncSocket]) -> None:
    sender, pull = stream
    with pytest.raises(TypeError, match=r"port 'out' takes \['Item'\], got Shutdown"):
        await sender.send("out", Shutdown())
    with pytest.raises(MessageTooLarge, match="over the limit of 1000"):
        await sender.send("out", Item(0, 0, b"x" * 1000))
    with pytest.raises(ValueError, match="request/reply: use request"):
        await sender.send("ask", EngineReportRequest())
    with pytest.raises(ValueError, match="not connected"):
        await sender.send("elsewhere", Item(0, 0))
    with pytest.raises(ValueError, match="no output port 'elsewhere'"):
        sender.encode("elsewhere", Item(0, 0))
    assert pull.recv_nowait() is None and sender.tracer.stats.sent == 0


def test_a_reply_is_checked_against_the_reply_type(stream: tuple[Sender, AsyncSocket]) -> None:
    sender, _ = stream
    with pytest.raises(TypeError, match="takes"):
        sender.encode("ask", EngineReportRequest(), port(EngineReport))
