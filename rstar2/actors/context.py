"""The actor's view of the runtime: receive, send, request, reply, trace.

One `ActorContext` per running actor instance: a facade over the parts that do the work, all
used from the actor's tasks, the reply-reader tasks of its requests and one flusher task:
- `Inbox` (`inbox.py`): drains the input sockets and decodes into the buffer that `recv` reads;
- `Sender` (`sender.py`): encodes, packs small messages into outboxes, sends frames (`send`,
  `reply`, and the requests' frames);
- `RequestClient` (`request_client.py`): requests and their replies;
- `HandleRuns` (`handle_runs.py`): calls `handle` and records the "handle" spans.
It owns no sockets (the supervisor does, so a restarted actor keeps its queued messages).

A received message that is too big or does not decode is logged, counted (`malformed` /
`oversized`) and skipped; the actor goes on. Sending an oversized message raises
`MessageTooLarge` in the sender (that is a bug in the sender, not bad input).

What it does not do: decide anything (actors do), or restart (the supervisor does).
"""

from __future__ import annotations

import logging
import traceback
from collections import deque
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

import anyio.abc
import zmq

from rstar2.actors.actor import Actor, Incoming, Outputs, Port, StopCallback
from rstar2.actors.handle_runs import HandleRuns
from rstar2.actors.inbox import Inbox
from rstar2.actors.outbox import Outbox
from rstar2.actors.request_client import RequestClient
from rstar2.actors.sender import Sender
from rstar2.actors.sockets import AsyncSocket
from rstar2.actors.trace import Tracer
from rstar2.frames import to_frames
from rstar2.wire import ActorFailed, Message

log = logging.getLogger(__name__)


@dataclass
class ContextSockets:
    """The sockets of one actor instance, by port name (owned by the supervisor)."""

    inputs: dict[str, AsyncSocket] = field(default_factory=dict)
    streams: dict[str, AsyncSocket] = field(default_factory=dict)
    requests: dict[str, list[AsyncSocket]] = field(default_factory=dict)
    outboxes: dict[str, Outbox] = field(default_factory=dict)
    """Stream ports to a single instance: bodies waiting to go out packed (survive a restart)."""
    received: deque[Incoming] = field(default_factory=deque)
    """Messages drained from the input sockets and not handled yet (survives a restart)."""


class ActorContext:
    """What an actor's `serve()` uses to talk to the rest of the graph."""

    def __init__(
        self,
        name: str,
        ports_in: dict[str, Port],
        ports_out: dict[str, Port],
        sockets: ContextSockets,
        tracer: Tracer,
        *,
        max_message_bytes: int,
        batch: int = 64,
        stop: StopCallback | None = None,
    ) -> None:
        self.name = name
        self.tracer = tracer
        self.batch = batch
        self._stop = stop
        limits = {"batch": batch, "max_message_bytes": max_message_bytes}
        self._inbox = Inbox(name, ports_in, sockets.inputs, sockets.received, tracer, **limits)
        self._sender = Sender(
            name,
            ports_out,
            sockets.streams,
            sockets.outboxes,
            sockets.requests,
            tracer,
            sockets.received,
            max_message_bytes=max_message_bytes,
        )
        self._client = RequestClient(name, tracer, sockets.requests, self._sender, **limits)
        self._runs = HandleRuns(name, tracer, sockets.received, self.reply_failure)
        self._dispatched = HandleRuns(name, tracer, sockets.received, self.reply_failure)
        """`dispatch`'s messages (a custom serve()'s), each a run of its own."""

    @property
    def max_message_bytes(self) -> int:
        """The largest message sent or received, in bytes (bigger ones are refused)."""
        return self._sender.max_message_bytes

    @max_message_bytes.setter
    def max_message_bytes(self, limit: int) -> None:
        self._sender.max_message_bytes = self._inbox.max_message_bytes = limit
        self._client.max_message_bytes = limit

    def attach(self, task_group: anyio.abc.TaskGroup | None) -> None:
        """Give the context a task group for its reply readers and flusher (by the supervisor)."""
        self._client.attach(task_group)
        self._sender.attach(task_group)

    # --- receiving and handling ------------------------------------------------------------

    async def recv(self) -> Incoming:
        """The next well-formed message on any input port (waits; bad ones are skipped)."""
        buffer = self._inbox.buffer
        if not buffer:
            await self._fill()
        incoming = buffer.popleft()
        self.tracer.stats.queue_depth = len(buffer)
        return incoming

    async def _fill(self) -> None:
        """Send what the last batch produced, then drain input, waiting if none is queued."""
        await self._sender.flush()
        await self._inbox.fill()

    async def serve_handle(self, actor: Actor) -> None:
        """The default `Actor.serve`: receive and dispatch to `actor.handle`, forever.

        The same as `dispatch(await recv())` in a loop, made cheaper per message: no await for
        a message whose `handle` sends nothing, and one "handle" span per run of messages
        handled back to back on one port (see `handle_runs.py`).
        """
        buffer, stats = self._inbox.buffer, self.tracer.stats
        sender, runs, handle = self._sender, self._runs, actor.handle
        while True:
            if not buffer:
                await self._fill()
            runs.begin()
            try:
                while (step := runs.handle_until_output(handle)) is not None:
                    incoming, outputs = step
                    stats.queue_depth = len(buffer)  # stats are read only while we await
                    yields = sender.yields
                    await self._send_outputs(incoming, outputs)
                    runs.sent(yielded=sender.yields != yields)
            finally:
                runs.close()
            stats.queue_depth = 0

    async def dispatch(self, actor: Actor, incoming: Incoming) -> None:
        """Run `actor.handle` on one message and send what it returns (replies too)."""
        outputs = self._dispatched.handle_one(actor.handle, incoming)
        if outputs:
            await self._send_outputs(incoming, outputs)

    async def _send_outputs(self, incoming: Incoming, outputs: Outputs) -> None:
        for item in outputs:
            if not (isinstance(item, tuple) and len(item) == 2):
                raise TypeError(f"{self.name}.handle returned {item!r}, not (port, message)")
            out_port, msg = item
            if out_port == incoming.port and incoming.reply_to is not None:
                await self.reply(incoming, msg)
            else:
                await self.send(out_port, msg)

    # --- sending ---------------------------------------------------------------------------

    def send(self, port: str, msg: Message) -> Coroutine[Any, Any, None]:
        """Send on a stream output port (await it); waits, with a "blocked" span, when full.

        On an edge to a single instance a small message may leave packed with others, at the
        latest when this actor next waits for input or the event loop next turns. (Not an
        `async def`: handing back the sender's coroutine saves one per message.)
        """
        return self._sender.send(port, msg)

    async def flush(self, *, trace: bool = True) -> None:
        """Send what the outboxes hold now (the runtime does this; actors need not)."""
        await self._sender.flush(trace=trace)

    async def reply(self, incoming: Incoming, msg: Message) -> None:
        """Answer a request received on a service port (may be called later, from serve())."""
        if incoming.reply_to is None:
            raise ValueError(f"{self.name}: message on port {incoming.port!r} is not a request")
        spec = self._inbox.port(incoming.port)
        reply_spec = Port(spec.reply) if spec.reply is not None else None
        frames = self._sender.encode(incoming.port, msg, reply_spec)
        identity, request_id = incoming.reply_to
        sock = self._inbox.socket(incoming.port)
        try:
            await self._sender.send_frames(sock, [identity, request_id, *frames], incoming.port)
        except zmq.ZMQError as e:  # EHOSTUNREACH: the client went away; nobody to tell
            log.info("%s: reply on %r not delivered: %s", self.name, incoming.port, e)

    def reply_failure(self, incoming: Incoming) -> None:
        """Answer a request with the exception being handled (the client raises RemoteError);
        call it from an `except` block."""
        failure = ActorFailed(actor=self.name, traceback=traceback.format_exc())
        assert incoming.reply_to is not None
        identity, request_id = incoming.reply_to
        sock = self._inbox.socket(incoming.port)
        sock.send_nowait([identity, request_id, *to_frames(failure)])

    # --- requests --------------------------------------------------------------------------

    def peers(self, port: str) -> int:
        """How many service instances a request port reaches."""
        return self._client.peers(port)

    async def request(
        self, port: str, msg: Message, *, peer: int | None = None, timeout: float | None = None
    ) -> Message:
        """Send a request and wait for its reply; `peer` picks the service instance.

        Without `peer`, instances are used round-robin. Raises `TimeoutError` after `timeout`
        seconds and `RemoteError` when the service raised while handling the request.
        """
        return await self._client.request(port, msg, peer, timeout)

    def stop_graph(self, reason: str = "", result: object = None) -> None:
        """Ask the whole graph to stop (from a custom serve())."""
        if self._stop is None:
            raise RuntimeError(f"actor {self.name} is not running in a graph")
        self._stop(reason, result)
