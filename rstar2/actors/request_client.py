"""The client side of request/reply ports: send a request, await its reply (`ActorContext.request`).

One `RequestClient` per actor context. A request goes out on the DEALER of the chosen service
instance as [request id (8 bytes), body, *arrays]; one reader task per DEALER (started on first
use, in the context's task group) matches each reply to its waiting request by id. While any
request of the actor awaits its reply, one "reply" span is open in its trace. A reply that
names the service's failure (`ActorFailed`) raises `RemoteError`; a late reply (the request
timed out) is dropped; a malformed one is counted as bad input (`inbox.count_bad`).

What it does not do: encode messages or send frames (the actor's `Sender` does, with its
"blocked" spans), or retry.
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass

import anyio
import anyio.abc

from rstar2.actors.inbox import count_bad
from rstar2.actors.sender import Sender
from rstar2.actors.sockets import AsyncSocket
from rstar2.actors.trace import Tracer
from rstar2.frames import from_frames
from rstar2.wire import ActorFailed, Message, WireError

log = logging.getLogger(__name__)


class RemoteError(RuntimeError):
    """The service raised while handling our request; carries its traceback text."""

    def __init__(self, failure: ActorFailed) -> None:
        super().__init__(f"actor {failure.actor} failed on this request:\n{failure.traceback}")
        self.failure = failure


@dataclass
class _Pending:
    event: anyio.Event
    reply: Message | None = None


class RequestClient:
    """Requests of one actor instance and the reader tasks that collect their replies."""

    def __init__(
        self,
        name: str,
        tracer: Tracer,
        sockets: dict[str, list[AsyncSocket]],
        sender: Sender,
        *,
        batch: int,
        max_message_bytes: int,
    ) -> None:
        self.name = name
        self.tracer = tracer
        self.sockets = sockets
        self.sender = sender
        self.batch = batch
        self.max_message_bytes = max_message_bytes
        self._pending: dict[int, _Pending] = {}
        self._request_ids = itertools.count(1)
        self._round_robin: dict[str, int] = {}
        self._readers: set[int] = set()
        self._reply_span: int | None = None
        self._task_group: anyio.abc.TaskGroup | None = None

    def attach(self, task_group: anyio.abc.TaskGroup | None) -> None:
        """The task group that runs the reply readers (a restarted actor starts them again)."""
        self._task_group = task_group
        self._readers.clear()

    def peers(self, port: str) -> int:
        """How many service instances a request port reaches."""
        return len(self.sockets.get(port, ()))

    async def request(
        self, port: str, msg: Message, peer: int | None, timeout: float | None
    ) -> Message:
        """Send a request and wait for its reply (see `ActorContext.request`)."""
        frames = self.sender.encode(port, msg)
        socks = self.sockets.get(port)
        if not socks:
            raise ValueError(f"{self.name}: port {port!r} is not a connected request port")
        if peer is None:
            peer = self._round_robin.get(port, 0) % len(socks)
            self._round_robin[port] = peer + 1
        elif not 0 <= peer < len(socks):
            raise ValueError(f"{self.name}: peer {peer} out of range for port {port!r}")
        self._ensure_reader(socks[peer])
        request_id = next(self._request_ids)
        pending = _Pending(anyio.Event())
        if not self._pending:
            self._reply_span = self.tracer.begin("reply", port)
        self._pending[request_id] = pending
        try:
            request = [request_id.to_bytes(8, "little"), *frames]
            await self.sender.send_frames(socks[peer], request, port)
            with anyio.fail_after(timeout):
                await pending.event.wait()
        finally:
            self._pending.pop(request_id, None)
            if not self._pending and self._reply_span is not None:
                self.tracer.end(self._reply_span)
                self._reply_span = None
        assert pending.reply is not None
        if isinstance(pending.reply, ActorFailed):
            raise RemoteError(pending.reply)
        return pending.reply

    def _ensure_reader(self, sock: AsyncSocket) -> None:
        if id(sock) in self._readers:
            return
        if self._task_group is None:
            raise RuntimeError(f"{self.name}: request() needs a running context")
        self._readers.add(id(sock))
        self._task_group.start_soon(self._read_replies, sock)

    async def _read_replies(self, sock: AsyncSocket) -> None:
        while True:
            for frames in await sock.recv_batch(self.batch):
                if len(frames) < 2:
                    self._count_bad(WireError("reply without request id"), sock)
                    continue
                try:
                    msg = from_frames(frames[1:], self.max_message_bytes)
                except WireError as e:
                    self._count_bad(e, sock)
                    continue
                pending = self._pending.get(int.from_bytes(frames[0], "little"))
                if pending is None:
                    log.debug("%s: late reply dropped (request gone)", self.name)
                    continue
                pending.reply = msg
                pending.event.set()

    def _count_bad(self, error: WireError, sock: AsyncSocket) -> None:
        count_bad(self.name, self.tracer.stats, error, sock.endpoint)
