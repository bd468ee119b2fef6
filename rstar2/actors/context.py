"""The actor's view of the runtime: receive, send, request, reply, trace.

One `ActorContext` per running actor instance. It owns no sockets (the supervisor does, so a
restarted actor keeps its queued messages) and it is used from the actor's tasks, plus the
reply-reader tasks of its requests (`request_client.py`) and one flusher task for its outboxes.

Framing on the sockets (bodies and array frames come from `frames.to_frames`):
- stream (PUSH -> PULL): [body, *arrays], or, on an edge to a single instance, one packed frame
  holding the bodies of several small array-free messages sent in one step (see `outbox.py`:
  the outputs of one drained input batch go out as one frame, decoded in one call);
- request (DEALER -> ROUTER): [request id (8 bytes), body, *arrays]; the ROUTER prepends the
  client identity, and the reply goes back as [identity, request id, body, *arrays].

Received frames are decoded when they are drained (`inbox.py`), so the buffer holds decoded
messages. A message over `max_message_bytes` or one that does not decode is logged, counted
(`malformed` / `oversized`) and skipped; the actor goes on. Sending an oversized message raises
`MessageTooLarge` in the sender (that is a bug in the sender, not bad input).

What it does not do: decide anything (actors do), or restart (the supervisor does).
"""

from __future__ import annotations

import logging
import traceback
from collections import deque
from dataclasses import dataclass, field

import anyio
import anyio.abc
import zmq

from rstar2.actors.actor import Actor, Incoming, Outputs, Port, StopCallback
from rstar2.actors.inbox import Inbox
from rstar2.actors.outbox import ALONE, QUEUED, REFUSED, Outbox
from rstar2.actors.request_client import RequestClient
from rstar2.actors.sockets import AsyncSocket
from rstar2.actors.trace import Tracer, now
from rstar2.frames import Buffer, MessageTooLarge, frames_size, to_frames
from rstar2.wire import ActorFailed, Message, encode_body

log = logging.getLogger(__name__)

_CHECKPOINT_EVERY = 64  # sends that never blocked before we yield to other tasks anyway


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
        self.max_message_bytes = max_message_bytes
        self.batch = batch
        self._ports_in = ports_in
        self._ports_out = ports_out
        self._sockets = sockets
        self._stop = stop
        self._buffer = sockets.received
        self._outboxes = sockets.outboxes
        self._inbox = Inbox(
            name,
            ports_in,
            sockets.inputs,
            sockets.received,
            tracer,
            batch=batch,
            max_message_bytes=max_message_bytes,
        )
        self._client = RequestClient(
            name,
            tracer,
            sockets.requests,
            self._send_frames,
            self._inbox.count_bad,
            batch=batch,
            max_message_bytes=max_message_bytes,
        )
        self._task_group: anyio.abc.TaskGroup | None = None
        self._flush_wanted: anyio.Event | None = None
        self._flush_scheduled = False
        self._unyielded_sends = 0
        self._yields = 0
        """Sends that awaited (let other tasks run): `serve_handle` ends its span run there."""
        self._packed_ports = {
            name: (box, ports_out[name].msg)
            for name, box in sockets.outboxes.items()
            if name in ports_out
        }
        """Packed stream ports: (outbox, accepted types), for `send`'s fast path."""

    def attach(self, task_group: anyio.abc.TaskGroup | None) -> None:
        """Give the context a task group for its reply readers and flusher (by the supervisor)."""
        self._task_group = task_group
        self._client.attach(task_group)
        self._flush_wanted = None
        self._flush_scheduled = False
        if task_group is not None and any(self._outboxes.values()):
            self._schedule_flush()  # what a failed incarnation left in its outboxes

    # --- receiving -------------------------------------------------------------------------

    async def recv(self) -> Incoming:
        """The next well-formed message on any input port (waits; bad ones are skipped)."""
        buffer = self._buffer
        if not buffer:
            await self._fill()
        incoming = buffer.popleft()
        self.tracer.stats.queue_depth = len(buffer)
        return incoming

    async def _fill(self) -> None:
        """Send what the last batch produced, then drain input, waiting if none is queued."""
        await self.flush()
        await self._inbox.fill()

    # --- handling and sending --------------------------------------------------------------

    async def serve_handle(self, actor: Actor) -> None:
        """The default `Actor.serve`: receive and dispatch to `actor.handle`, forever.

        The same as `dispatch(await recv())` in a loop, made cheaper per message: no await for
        a message whose `handle` sends nothing, and one "handle" span per run of messages
        handled back to back on one port (sends that did not let another task run included:
        that time is this actor's work), recorded when the run ends: at a port change, before
        the actor waits for input, or when a send yielded. One clock read per message.
        """
        buffer = self._buffer
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
                    yields = self._yields
                    await self._send_outputs(incoming, outputs)
                    if self._yields != yields:  # other tasks ran: the run ends before the send
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
        self.tracer.handled(start, now(), incoming.port, len(self._buffer))
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

    def _frames_for(self, port: str, msg: Message, spec: Port | None) -> list[Buffer]:
        if spec is None:
            raise ValueError(f"actor {self.name} has no output port {port!r}")
        if not isinstance(msg, spec.msg):
            raise TypeError(
                f"{self.name}: port {port!r} takes {sorted(spec.type_names())}, "
                f"got {type(msg).__name__}"
            )
        frames = to_frames(msg)
        if len(frames) > 1 or len(frames[0]) > self.max_message_bytes:
            size = frames_size(frames)
            if size > self.max_message_bytes:
                raise MessageTooLarge(
                    f"{self.name}: {type(msg).__name__} of {size} bytes on port {port!r} is "
                    f"over the limit of {self.max_message_bytes}"
                )
        return frames

    async def send(self, port: str, msg: Message) -> None:
        """Send on a stream output port; waits (and records a "blocked" span) when full.

        On an edge to a single instance a small message may leave packed with others, at the
        latest when this actor next waits for input or the event loop next turns.
        """
        packed = self._packed_ports.get(port)
        if packed is not None and self._task_group is not None and isinstance(msg, packed[1]):
            # Fast path, the common case of a packed edge: the body fits in the outbox beside
            # what is queued and does not fill it. Everything else takes the general path.
            outbox = packed[0]
            try:
                body = encode_body(msg)
            except TypeError:  # array fields: they travel as frames of their own
                body = None
            if body is not None:
                size = len(body)
                bodies = outbox.bodies
                if (
                    size <= self.max_message_bytes
                    and outbox.nbytes + size <= outbox.room
                    and len(bodies) + 1 < outbox.max_messages
                ):
                    bodies.append(body)
                    outbox.nbytes += size
                    if not self._flush_scheduled:
                        self._schedule_flush()
                    return
        await self._send_general(port, msg)

    async def _send_general(self, port: str, msg: Message) -> None:
        outbox = self._outboxes.get(port)
        if outbox is None:
            sock = self._sockets.streams.get(port)
            if sock is None:
                if port in self._sockets.requests:
                    raise ValueError(f"{self.name}: port {port!r} is request/reply: use request()")
                raise ValueError(f"{self.name}: output port {port!r} is not connected")
            frames = self._frames_for(port, msg, self._ports_out.get(port))
            await self._send_frames(sock, frames, port)
            return
        frames = self._frames_for(port, msg, self._ports_out.get(port))
        body = frames[0]
        while True:
            offer = outbox.offer(body) if len(frames) == 1 and isinstance(body, bytes) else ALONE
            if offer is not REFUSED:
                break
            # Make room and offer again: the flush yields, and the other tasks of this actor
            # (the scheduler's rollouts finishing together) may fill the outbox meanwhile.
            await self._flush_outbox(port, outbox)
        if offer is QUEUED and self._task_group is not None:
            if not self._flush_scheduled:
                self._schedule_flush()
        elif offer is ALONE:
            await self._flush_outbox(port, outbox)  # what was queued before it leaves first
            await self._send_frames(outbox.sock, frames, port)
        else:  # FULL, or no flusher task to send it later
            await self._flush_outbox(port, outbox)

    async def flush(self, *, trace: bool = True) -> None:
        """Send what the outboxes hold now (the runtime does this; actors need not)."""
        for port, outbox in self._outboxes.items():
            if outbox.bodies:
                await self._flush_outbox(port, outbox, trace=trace)

    async def _flush_outbox(self, port: str, outbox: Outbox, *, trace: bool = True) -> None:
        """Send the outbox as one frame; yields to other tasks once it is out."""
        if not outbox.bodies:
            return
        if not outbox.lock.locked() and outbox.sock.send_nowait([outbox.frame()]):
            self.tracer.stats.sent += outbox.clear()
            self._yields += 1
            await anyio.lowlevel.checkpoint()  # a producer that never blocks still lets others run
            return
        # Full downstream, or another task is sending this outbox's previous frame: wait in
        # line (the lock keeps frames in order) and count it as blocked on output.
        token = self.tracer.begin("blocked", port, len(self._buffer)) if trace else None
        self._yields += 1
        try:
            async with outbox.lock:
                while outbox.bodies:
                    frame = outbox.frame()
                    count = outbox.clear()
                    await outbox.sock.send([frame])
                    self.tracer.stats.sent += count
        finally:
            if token is not None:
                self.tracer.end(token)

    def _schedule_flush(self) -> None:
        """Have the flusher task send the outboxes on the event loop's next turn."""
        if self._task_group is None:
            return
        if self._flush_wanted is None:
            self._flush_wanted = anyio.Event()
            self._task_group.start_soon(self._serve_flushes)
        self._flush_wanted.set()
        self._flush_scheduled = True

    async def _serve_flushes(self) -> None:
        while True:
            assert self._flush_wanted is not None
            await self._flush_wanted.wait()
            self._flush_wanted = anyio.Event()
            self._flush_scheduled = False
            # Not traced: the actor itself is not blocked while this task waits for room.
            await self.flush(trace=False)

    async def _send_frames(self, sock: AsyncSocket, frames: list[Buffer], port: str) -> None:
        if sock.send_nowait(frames):
            self._unyielded_sends += 1
            if self._unyielded_sends >= _CHECKPOINT_EVERY:  # let other tasks run now and then
                self._unyielded_sends = 0
                self._yields += 1
                await anyio.lowlevel.checkpoint()
        else:
            token = self.tracer.begin("blocked", port, len(self._buffer))
            self._yields += 1
            try:
                await sock.send(frames)
            finally:
                self.tracer.end(token)
            self._unyielded_sends = 0
        self.tracer.stats.sent += 1

    async def reply(self, incoming: Incoming, msg: Message) -> None:
        """Answer a request received on a service port (may be called later, from serve())."""
        if incoming.reply_to is None:
            raise ValueError(f"{self.name}: message on port {incoming.port!r} is not a request")
        spec = self._ports_in[incoming.port]
        reply_spec = Port(spec.reply) if spec.reply is not None else None
        frames = self._frames_for(incoming.port, msg, reply_spec)
        identity, request_id = incoming.reply_to
        try:
            await self._send_frames(
                self._sockets.inputs[incoming.port], [identity, request_id, *frames], incoming.port
            )
        except zmq.ZMQError as e:  # EHOSTUNREACH: the client went away; nobody to tell
            log.info("%s: reply on %r not delivered: %s", self.name, incoming.port, e)

    def reply_failure(self, incoming: Incoming) -> None:
        """Answer a request with the exception being handled (the client raises RemoteError);
        call it from an `except` block."""
        failure = ActorFailed(actor=self.name, traceback=traceback.format_exc())
        assert incoming.reply_to is not None
        identity, request_id = incoming.reply_to
        sock = self._sockets.inputs[incoming.port]
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
        frames = self._frames_for(port, msg, self._ports_out.get(port))
        return await self._client.request(port, frames, peer, timeout)

    def stop_graph(self, reason: str = "", result: object = None) -> None:
        """Ask the whole graph to stop (from a custom serve())."""
        if self._stop is None:
            raise RuntimeError(f"actor {self.name} is not running in a graph")
        self._stop(reason, result)
