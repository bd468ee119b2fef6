"""The actor's view of the runtime: receive, send, request, reply, trace.

One `ActorContext` per running actor instance: a facade over the parts that do the work, all
used from the actor's tasks, the reply-reader tasks of its requests and one flusher task:
- `Inbox` (`inbox.py`): drains the input sockets and decodes into the buffer that `recv` reads;
- `Sender` (`sender.py`): encodes, packs small messages into outboxes, sends frames (`send`,
  `reply`, and the requests' frames);
- `RequestClient` (`request_client.py`): requests and their replies.
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
from rstar2.actors.inbox import Inbox
from rstar2.actors.outbox import Outbox
from rstar2.actors.request_client import RequestClient
from rstar2.actors.sender import Sender
from rstar2.actors.sockets import AsyncSocket
from rstar2.actors.trace import Tracer, now
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
        handled back to back on one port (sends that did not let another task run included:
        that time is this actor's work), recorded when the run ends: at a port change, before
        the actor waits for input, or when a send yielded. One clock read per message.
        """
        buffer = self._inbox.buffer
        tracer = self.tracer
        handle = actor.handle
        while True:
            if not buffer:
                await self._fill()
            run_start = end = now()
            run_port = ""
            count = depth = 0
            while buffer:
                incoming = buffer.popleft()
                port = incoming.port
                if port != run_port:
                    if count:  # a run on another port ends here
                        tracer.handled(run_start, end, run_port, depth, count)
                        run_start, count, depth = end, 0, 0
                    run_port = port
                try:
                    outputs = handle(port, incoming.msg)
                except BaseException:  # the run so far is recorded; the failure is reported
                    if count:
                        tracer.handled(run_start, end, run_port, depth, count)
                    if incoming.reply_to is not None:
                        self.reply_failure(incoming)
                    raise
                count += 1
                if len(buffer) > depth:
                    depth = len(buffer)
                end = now()
                if outputs:
                    if not isinstance(outputs, list):
                        raise TypeError(
                            f"{self.name}.handle must return a list, got {type(outputs).__name__}"
                        )
                    tracer.stats.queue_depth = len(buffer)  # stats are read only while we await
                    yields = self._sender.yields
                    await self._send_outputs(incoming, outputs)
                    if self._sender.yields != yields:  # other tasks ran: the run ends before it
                        tracer.handled(run_start, end, run_port, depth, count)
                        count = depth = 0
                        run_start = end = now()
                    else:
                        end = now()
            if count:
                tracer.handled(run_start, end, run_port, depth, count)
            tracer.stats.queue_depth = 0

    async def dispatch(self, actor: Actor, incoming: Incoming) -> None:
        """Run `actor.handle` on one message and send what it returns (replies too)."""
        outputs = self._handle(actor, incoming)
        if outputs:
            await self._send_outputs(incoming, outputs)

    def _handle(self, actor: Actor, incoming: Incoming) -> Outputs:
        start = now()
        try:
            outputs = actor.handle(incoming.port, incoming.msg)
        except BaseException:
            if incoming.reply_to is not None:
                self.reply_failure(incoming)
            raise
        self.tracer.handled(start, now(), incoming.port, len(self._inbox.buffer))
        if not isinstance(outputs, list):
            raise TypeError(f"{self.name}.handle must return a list, got {type(outputs).__name__}")
        return outputs

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
