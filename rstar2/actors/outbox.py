"""Small messages on their way to a single receiver, packed several to a frame.

A stream output port whose edge reaches exactly one instance gets an `Outbox`. The sender
(`sender.py`) puts the body of each small, array-free message in it and sends the outbox as one
packed frame (`frames.pack_bodies`) when it holds `max_messages` bodies or the next body would
pass `room`, when the actor is about to wait for input, or on the next turn of the event loop
(a flusher task), so a message never waits longer than the actor's current step. Edges that fan out to several
instances are never packed: ZeroMQ's PUSH round-robin spreads frames, and a packed frame would
give one instance a whole batch.

The ZeroMQ high-water marks count frames; sockets of packed edges get `frame_hwm(hwm, batch)`
of them, so the messages an edge can hold stay about `hwm` per side.

What it does not do: decide what is packed, encode, trace or wait (the sender does all four),
or pack messages that carry array frames (they go out alone, in order, after what the outbox
held).
"""

from __future__ import annotations

import anyio

from rstar2.actors.sockets import AsyncSocket
from rstar2.frames import pack_bodies, packed_size

_PACK_OVERHEAD = packed_size(0, 1 << 16)  # the mark and the largest array header

PACK_BYTES = 60 * 1024
"""Most bytes in one packed frame: enough to amortise the per-frame cost over ~60 messages of
1 KB, and under pyzmq's copy threshold (64 KiB): bigger frames go zero-copy, and releasing
those runs through pyzmq's garbage-collector thread, which cost more than the copy (measured
with cProfile on `rstar2 bench bus`)."""


def frame_hwm(hwm: int, batch: int) -> int:
    """High-water mark, in frames, for the sockets of a packed edge (about `hwm` messages)."""
    return max(1, hwm // batch)


class Outbox:
    """The bodies queued for one packed stream port, in send order."""

    def __init__(self, sock: AsyncSocket, max_messages: int, max_bytes: int) -> None:
        if max_messages < 1 or max_bytes < 1:
            raise ValueError(f"outbox limits must be >= 1, got {max_messages}, {max_bytes}")
        self.sock = sock
        self.max_messages = max_messages
        self.max_bytes = max_bytes
        self.bodies: list[bytes] = []
        self.nbytes = 0
        self.room = max_bytes - _PACK_OVERHEAD
        """`nbytes` may grow to this (the frame's mark and array header take the rest): a body
        that does not fit beside the queued ones waits for them to be sent; one bigger than
        `room` is not packed at all."""
        self.lock = anyio.Lock(fast_acquire=True)
        """Held while a frame of this outbox is being sent, so frames leave in order."""

    def frame(self) -> bytes:
        """What is queued as one frame: the body itself when there is only one."""
        return self.bodies[0] if len(self.bodies) == 1 else pack_bodies(self.bodies)

    def clear(self) -> int:
        """Forget the queued bodies (they were sent); returns how many there were."""
        count = len(self.bodies)
        self.bodies = []
        self.nbytes = 0
        return count
