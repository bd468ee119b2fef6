"""Calling an actor's `handle` on received messages, and the "handle" spans that time it.

`HandleRuns.handle_until_output` is the one place the runtime calls `handle`: a request whose
handling raises is answered with the failure (the client raises `RemoteError`), and what
`handle` returns must be a list.

Span accounting: a *run* is the messages handled back to back on one port, with the sends among
them that did not let another task run (that time is this actor's work). A run is one "handle"
span, recorded when it ends: at a port change, before the actor waits for input, when a send
yielded (other tasks ran: the run ends before that send), or when `handle` raised (the run so
far). One clock read per message, and no await for a message whose `handle` sends nothing.
`handle_one` (for `ActorContext.dispatch`) makes one message a run of its own.

What it does not do: receive or send (the context does), or record "wait", "blocked" or
"reply" spans (the inbox, the sender and the request client do).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from rstar2.actors.actor import Incoming, Outputs
from rstar2.actors.trace import Tracer, now
from rstar2.wire import Message

Handle = Callable[[str, Message], Outputs]
ReplyFailure = Callable[[Incoming], None]


class HandleRuns:
    """Handles an actor instance's buffered messages and records their "handle" spans."""

    def __init__(
        self, name: str, tracer: Tracer, buffer: deque[Incoming], reply_failure: ReplyFailure
    ) -> None:
        """`reply_failure` answers a request with the exception being handled."""
        self.name = name
        self.tracer = tracer
        self._buffer = buffer
        self._reply_failure = reply_failure
        self._start = self._end = 0.0
        self._port = ""
        self._count = self._depth = 0

    def begin(self) -> None:
        """A run may start now (the buffer was just filled)."""
        self._start = self._end = now()
        self._count = self._depth = 0

    def handle_until_output(
        self, handle: Handle, queue: deque[Incoming] | None = None
    ) -> tuple[Incoming, Outputs] | None:
        """Handle the buffered messages (or `queue`'s) until one returns outputs (returned, for
        the caller to send, then to call `sent`) or none is left (None).

        This is the one place the runtime calls `handle`: a request whose handling raises is
        answered with the failure (the client raises `RemoteError`), and the outputs must be a
        list. The run's state lives in locals while the loop runs, once per message.
        """
        buffer = self._buffer
        if queue is None:
            queue = buffer
        start, end, port = self._start, self._end, self._port
        count, depth = self._count, self._depth
        incoming = None
        try:
            while queue:
                incoming = queue.popleft()
                if incoming.port != port:
                    if count:  # a run on another port ends here
                        self.tracer.handled(start, end, port, depth, count)
                        start, count, depth = end, 0, 0
                    port = incoming.port
                outputs = handle(port, incoming.msg)
                count += 1
                if len(buffer) > depth:
                    depth = len(buffer)
                end = now()
                if outputs:
                    if not isinstance(outputs, list):
                        name = type(outputs).__name__
                        raise TypeError(f"{self.name}.handle must return a list, got {name}")
                    return incoming, outputs
            return None
        except BaseException:
            if incoming is not None and incoming.reply_to is not None:
                self._reply_failure(incoming)
            raise
        finally:
            self._start, self._end, self._port = start, end, port
            self._count, self._depth = count, depth

    def handle_one(self, handle: Handle, incoming: Incoming) -> Outputs:
        """`handle` on one message (already taken from the buffer), as a run of its own."""
        self.begin()
        step = self.handle_until_output(handle, deque((incoming,)))
        self.close()
        return [] if step is None else step[1]

    def sent(self, yielded: bool) -> None:
        """The outputs `handle_until_output` returned were sent; `yielded`: other tasks ran
        meanwhile, so the run ends before the send."""
        if yielded:
            self.close()
            self._start = self._end = now()
        else:
            self._end = now()

    def close(self) -> None:
        """End the run: record its span, if it handled anything."""
        if self._count:
            self.tracer.handled(self._start, self._end, self._port, self._depth, self._count)
            self._start = self._end
            self._count = self._depth = 0
