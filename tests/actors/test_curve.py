"""With CURVE keys, tcp traffic between processes works (encrypted) through the factory."""

from __future__ import annotations

import anyio
import pytest
import zmq

from rstar2.actors.sockets import CurveKeys, SocketFactory
from rstar2.frames import from_frames, to_frames
from rstar2.wire import Item

pytestmark = pytest.mark.anyio


async def test_curve_sockets_exchange_messages() -> None:
    (sp, ss), (cp, cs) = zmq.curve_keypair(), zmq.curve_keypair()
    keys = CurveKeys(sp.decode(), ss.decode(), cp.decode(), cs.decode())
    factory = SocketFactory(zmq.Context(), curve=keys)
    try:
        pull = factory.bind(zmq.PULL, "tcp://127.0.0.1:*")
        endpoint = pull.sock.getsockopt_string(zmq.LAST_ENDPOINT)
        push = factory.connect(zmq.PUSH, [endpoint])
        assert push.sock.getsockopt(zmq.MECHANISM) == zmq.CURVE
        assert pull.sock.getsockopt(zmq.MECHANISM) == zmq.CURVE
        await push.send(to_frames(Item(1, 2)))
        with anyio.fail_after(10):
            assert from_frames(await pull.recv()) == Item(1, 2)
    finally:
        factory.close()
        factory.context.term()
