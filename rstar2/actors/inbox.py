"""The receive side of an actor instance: drain its input sockets, decode, buffer.

One `Inbox` per actor context. Messages are decoded when they are drained, so the buffer (kept
by the supervisor, so a restarted actor keeps what it had not handled) holds `Incoming`
messages: up to `batch` per port per drain, the start port rotating so that a busy port cannot
starve the others. While the actor waits for input a "wait" span is open in its trace.

Framing (bodies and array frames come from `frames.to_frames`):
- stream (PULL): [body, *arrays], or one packed frame holding the bodies of several small
  messages (`outbox.py`), decoded in one call;
- request (ROUTER): [client identity, request id (8 bytes), body, *arrays]; the identity and
  id become the message's `reply_to`.

A message over `max_message_bytes`, one that does not decode, or one of a type the port does
not take is logged, counted (`malformed` / `oversized`, by `count_bad`) and skipped.

What it does not do: handle messages (the actor does), send replies (the context does, on the
socket `socket()` names), or flush what the actor sent before it waits (the context does).
"""

from __future__ import annotations

import logging
from collections import deque

import anyio
import zmq

from rstar2.actors.actor import Incoming, Port
from rstar2.actors.sockets import AsyncSocket, Frames
from rstar2.actors.trace import Tracer
from rstar2.frames import MessageTooLarge, from_frames, is_packed, unpack_frame
from rstar2.wire import ActorStats, WireError

log = logging.getLogger(__name__)


def count_bad(actor: str, stats: ActorStats, error: WireError, port: str) -> None:
    """Count and log one message dropped on `port` (oversized or malformed)."""
    if isinstance(error, MessageTooLarge):
        what = "oversized"
        stats.oversized += 1
    else:
        what = "malformed"
        stats.malformed += 1
    log.warning("%s: dropped %s message on port %r: %s", actor, what, port, error)


class Inbox:
    """Received messages of one actor instance, decoded and not handled yet."""

    def __init__(
        self,
        name: str,
        ports: dict[str, Port],
        sockets: dict[str, AsyncSocket],
        buffer: deque[Incoming],
        tracer: Tracer,
        *,
        batch: int,
        max_message_bytes: int,
    ) -> None:
        self.name = name
        self.buffer = buffer
        """Drained and decoded, oldest first: `popleft()` takes the next message."""
        self.tracer = tracer
        self.batch = batch
        self.max_message_bytes = max_message_bytes
        self._ports = ports
        self._sockets = sockets
        self._order = list(sockets)

    def port(self, name: str) -> Port:
        """The spec of input port `name` (KeyError if the actor has none)."""
        return self._ports[name]

    def socket(self, port: str) -> AsyncSocket:
        """The socket of input port `port` (a request port's replies go back on it)."""
        return self._sockets[port]

    def count_bad(self, error: WireError, port: str) -> None:
        """Count and log one message dropped on `port`."""
        count_bad(self.name, self.tracer.stats, error, port)

    async def fill(self) -> None:
        """Drain input into the buffer, waiting (a "wait" span) if none is queued."""
        if not self._order:
            raise RuntimeError(f"actor {self.name} has no input ports to receive from")
        if self.drain():
            return
        token = self.tracer.begin("wait")
        try:
            while not self.drain():
                if len(self._order) == 1:
                    await self._sockets[self._order[0]].wait(zmq.POLLIN)
                else:
                    await self._wait_any()
        finally:
            self.tracer.end(token, depth=len(self.buffer))

    def drain(self) -> bool:
        """Decode up to `batch` queued messages per port into the buffer, without waiting;
        whether the buffer holds any."""
        # Rotate the start port so that a busy port cannot starve the others.
        self._order.append(self._order.pop(0))
        buffer = self.buffer
        for port in self._order:
            sock = self._sockets[port]
            limit = len(buffer) + self.batch
            while len(buffer) < limit:
                frames = sock.recv_nowait()
                if frames is None:
                    break
                self.decode(port, frames)
        return bool(buffer)

    def decode(self, port: str, frames: Frames) -> None:
        """Decode one received message (or packed frame) into the buffer; count bad ones."""
        spec = self._ports[port]
        stats = self.tracer.stats
        reply_to = None
        if spec.is_request_reply:
            if len(frames) < 3:
                stats.received += 1
                self.count_bad(WireError(f"request with {len(frames)} frames"), port)
                return
            reply_to = (frames[0], frames[1])
            frames = frames[2:]
        elif is_packed(frames):
            messages, errors = unpack_frame(frames[0], self.max_message_bytes)
            stats.received += len(messages) + len(errors)
            for error in errors:
                self.count_bad(error, port)
            append, types = self.buffer.append, spec.msg
            for msg in messages:
                if isinstance(msg, types):
                    append(Incoming(port, msg))
                else:
                    self.count_bad(WireError(f"unexpected {type(msg).__name__}"), port)
            return
        stats.received += 1
        try:
            msg = from_frames(frames, self.max_message_bytes)
        except WireError as e:
            self.count_bad(e, port)
            return
        if spec.accepts(msg):
            self.buffer.append(Incoming(port, msg, reply_to))
        else:
            self.count_bad(WireError(f"unexpected {type(msg).__name__}"), port)

    async def _wait_any(self) -> None:
        async def wait_one(sock: AsyncSocket, scope: anyio.CancelScope) -> None:
            await sock.wait(zmq.POLLIN)
            scope.cancel()

        async with anyio.create_task_group() as tg:
            for port in self._order:
                tg.start_soon(wait_one, self._sockets[port], tg.cancel_scope)
