"""The send side of an actor instance: encode, pack into outboxes, send frames.

One `Sender` per actor context, and one send path, `send`. On a stream port without an outbox
it encodes the message (`encode`: the port, its type and the size limit are checked) and sends
its frames. On a port that packs (an edge to a single instance, `outbox.py`), a message of the
port's type, without arrays and under the limit, goes into the outbox as its body:
- it is queued if it fits beside what is queued; a flusher task (started on first use, in the
  context's task group) sends the outbox on the event loop's next turn, and the context before
  the actor next waits; an outbox that holds `max_messages` bodies is sent at once;
- if it does not fit, the outbox is sent to make room, and it is looked at again;
- if it would not fit an empty outbox either, what is queued is sent, then the message alone.
Any other message on a packing port goes through `encode`, which refuses it or frames it
(arrays), and leaves alone, after what was queued. This is the hot path of the bus: it is
written out in one function, with no call per message beyond the encoder's.

A send that finds the socket full waits, with a "blocked" span open in the trace. A producer
whose sends never block still lets other tasks run: after each outbox sent, and every
`_CHECKPOINT_EVERY` frame sends. `yields` counts the sends that let other tasks run, so the
caller can tell whether its time was its own (`handle_runs.py`).

Sending an oversized message raises `MessageTooLarge` in the sender (that is a bug in the
sender, not bad input).

What it does not do: receive, choose the port (the actor does), or retry.
"""

from __future__ import annotations

from collections.abc import Container, Sized

import anyio
import anyio.abc

from rstar2.actors.actor import Port
from rstar2.actors.outbox import Outbox
from rstar2.actors.sockets import AsyncSocket
from rstar2.actors.trace import Tracer
from rstar2.frames import Buffer, MessageTooLarge, frames_size, to_frames
from rstar2.wire import Message, encode_body

_CHECKPOINT_EVERY = 64  # sends that never blocked before we yield to other tasks anyway


class Sender:
    """Encodes and sends the messages of one actor instance, packing where its edges allow."""

    def __init__(
        self,
        name: str,
        ports: dict[str, Port],
        streams: dict[str, AsyncSocket],
        outboxes: dict[str, Outbox],
        request_ports: Container[str],
        tracer: Tracer,
        queued: Sized,
        *,
        max_message_bytes: int,
    ) -> None:
        """`queued`: the actor's unhandled input, whose length "blocked" spans record."""
        self.name = name
        self.tracer = tracer
        self.max_message_bytes = max_message_bytes
        self._ports = ports
        self._streams = streams
        self._outboxes = outboxes
        self._packed = {p: (box, ports[p].msg) for p, box in outboxes.items() if p in ports}
        """The packing ports: (outbox, the message types the port takes)."""
        self._request_ports = request_ports
        self._queued = queued
        self._task_group: anyio.abc.TaskGroup | None = None
        self._flush_wanted: anyio.Event | None = None
        self._flush_scheduled = False
        self._unyielded_sends = 0
        self.yields = 0
        """Sends that awaited (let other tasks run) so far."""

    def attach(self, task_group: anyio.abc.TaskGroup | None) -> None:
        """The task group that runs the flusher (a restarted actor starts it again)."""
        self._task_group = task_group
        self._flush_wanted = None
        self._flush_scheduled = False
        if task_group is not None and any(self._outboxes.values()):
            self._schedule_flush()  # what a failed incarnation left in its outboxes

    def encode(self, port: str, msg: Message, spec: Port | None = None) -> list[Buffer]:
        """`msg` as frames for output port `port` (`spec`: the port, when not an output port:
        a reply); raises ValueError, TypeError or `MessageTooLarge` for what cannot go."""
        if spec is None:
            spec = self._ports.get(port)
            if spec is None:
                raise ValueError(f"actor {self.name} has no output port {port!r}")
        if not isinstance(msg, spec.msg):
            raise TypeError(
                f"{self.name}: port {port!r} takes {sorted(spec.type_names())}, "
                f"got {type(msg).__name__}"
            )
        try:  # most messages hold no arrays: one body, no array hook (as in `to_frames`)
            frames: list[Buffer] = [encode_body(msg)]
        except TypeError:
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
        """Send on a stream output port (see the module's docstring)."""
        packed = self._packed.get(port)
        if packed is None:
            await self.send_frames(self._stream(port), self.encode(port, msg), port)
            return
        outbox, types = packed
        try:  # a message of the port's type without arrays is packed as its body alone
            body = encode_body(msg) if isinstance(msg, types) else None
        except TypeError:  # array fields: they travel as frames of their own
            body = None
        if body is None or (size := len(body)) > self.max_message_bytes:
            # arrays, or what `encode` refuses (the wrong type, over the limit)
            await self._send_alone(port, outbox, self.encode(port, msg))
            return
        while outbox.nbytes + size > outbox.room:  # it does not fit beside what is queued
            if size > outbox.room:  # nor in an empty outbox
                await self._send_alone(port, outbox, [body])
                return
            # Make room and look again: the flush yields, and the other tasks of this actor
            # (the scheduler's rollouts finishing together) may fill the outbox meanwhile.
            await self._flush_outbox(port, outbox)
        outbox.bodies.append(body)
        outbox.nbytes += size
        if len(outbox.bodies) >= outbox.max_messages or self._task_group is None:
            await self._flush_outbox(port, outbox)  # full, or no flusher task to send it later
        elif not self._flush_scheduled:
            self._schedule_flush()

    async def _send_alone(self, port: str, outbox: Outbox, frames: list[Buffer]) -> None:
        """Send one message by itself on a packing port, after what its outbox holds."""
        await self._flush_outbox(port, outbox)
        await self.send_frames(outbox.sock, frames, port)

    def _stream(self, port: str) -> AsyncSocket:
        sock = self._streams.get(port)
        if sock is None:
            if port in self._request_ports:
                raise ValueError(f"{self.name}: port {port!r} is request/reply: use request()")
            raise ValueError(f"{self.name}: output port {port!r} is not connected")
        return sock

    async def flush(self, *, trace: bool = True) -> None:
        """Send what the outboxes hold now."""
        for port, outbox in self._outboxes.items():
            if outbox.bodies:
                await self._flush_outbox(port, outbox, trace=trace)

    async def send_frames(self, sock: AsyncSocket, frames: list[Buffer], port: str) -> None:
        """Send one message's frames on `sock`, waiting (a "blocked" span) while it is full."""
        if sock.send_nowait(frames):
            self._unyielded_sends += 1
            if self._unyielded_sends >= _CHECKPOINT_EVERY:  # let other tasks run now and then
                self._unyielded_sends = 0
                self.yields += 1
                await anyio.lowlevel.checkpoint()
        else:
            token = self.tracer.begin("blocked", port, len(self._queued))
            self.yields += 1
            try:
                await sock.send(frames)
            finally:
                self.tracer.end(token)
            self._unyielded_sends = 0
        self.tracer.stats.sent += 1

    async def _flush_outbox(self, port: str, outbox: Outbox, *, trace: bool = True) -> None:
        """Send the outbox as one frame; yields to other tasks once it is out."""
        if not outbox.bodies:
            return
        if not outbox.lock.locked() and outbox.sock.send_nowait([outbox.frame()]):
            self.tracer.stats.sent += outbox.clear()
            self.yields += 1
            await anyio.lowlevel.checkpoint()  # a producer that never blocks still lets others run
            return
        # Full downstream, or another task is sending this outbox's previous frame: wait in
        # line (the lock keeps frames in order) and count it as blocked on output.
        token = self.tracer.begin("blocked", port, len(self._queued)) if trace else None
        self.yields += 1
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
