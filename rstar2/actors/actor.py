"""The actor: a named object with typed input and output ports and a synchronous `handle`.

An actor class declares its ports and keeps its decision logic in `handle(port, msg)`, a plain
synchronous method that returns the messages to send as `[(out_port, msg), ...]`; tests call it
directly, without sockets. The runtime (`ActorContext`) moves messages in and out.

Ports come in two kinds:
- stream ports, `port(Msg)`: PUSH -> PULL; a stream output fans out round-robin over the
  instances of the receiving actor; the high-water mark throttles a fast producer.
- request/reply ports, `port(Req, reply=Rep)`: an input port with a reply type is a service
  (ROUTER, many clients); `handle` answers by returning `(same_port, reply)`. An output port
  with a reply type is a client (one DEALER per service instance); it is used from a custom
  `serve()` with `await ctx.request(port, msg)`.

Actors that need their own loop (a decode loop, a service with deferred replies) override
`async serve(ctx)`; the default `serve` just receives and dispatches to `handle` forever.

Parameters: an actor class may declare `Params`, a config dataclass (one docstring under each
field, `validate()`): the graph's `params` table for the actor is then loaded into it with
`rstar2.config.from_dict` when the graph is planned (a bad key or value is a `ConfigError`
naming `graph.actors[i].params.<key>` before anything starts, never an error inside the actor)
and handed to the constructor as its one argument. Without `Params` the table's entries are
the constructor's keyword arguments.

What it does not do: sockets, encoding or supervision (see `context.py`, `supervisor.py`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import msgspec

from rstar2.wire import Message

if TYPE_CHECKING:
    from rstar2.actors.context import ActorContext

MessageTypes = type[Message] | tuple[type[Message], ...]
Outputs = list[tuple[str, Message]]
StopCallback = Callable[[str, Any], None]


@dataclass(frozen=True)
class Port:
    """A port's message type, and the reply type for request/reply ports (None for streams)."""

    msg: MessageTypes
    reply: MessageTypes | None = None

    @property
    def is_request_reply(self) -> bool:
        return self.reply is not None

    def accepts(self, msg: object) -> bool:
        return isinstance(msg, self.msg)

    def type_names(self) -> set[str]:
        types = self.msg if isinstance(self.msg, tuple) else (self.msg,)
        return {t.__name__ for t in types}


def port(msg: MessageTypes, reply: MessageTypes | None = None) -> Port:
    """Declare a port: `port(Item)` for a stream, `port(Req, reply=Rep)` for request/reply."""
    for t in msg if isinstance(msg, tuple) else (msg,):
        if not (isinstance(t, type) and issubclass(t, Message)):
            raise TypeError(f"port message type must be a wire.Message subclass, got {t!r}")
    return Port(msg, reply)


class Incoming(msgspec.Struct, frozen=True):
    """One received message; `reply_to` is the (client identity, request id) of a request.

    A frozen struct rather than a dataclass: one is made per message, and this is 10x cheaper.
    It never goes on the wire.
    """

    port: str
    msg: Message
    reply_to: tuple[bytes, bytes] | None = None


class Actor:
    """Base class. Subclasses set `inputs`/`outputs` and implement `handle` (or `serve`).

    The constructor gets the actor's `params` table of the graph config: as one `Params`
    object when the class declares `Params`, else as keyword arguments.
    The runtime sets `name` ("square.0"), `index` (0-based), `replicas` (the actor's
    instance count) and `restarts` (how often this instance was restarted) before `setup()`
    is called: do not use these attribute names yourself.
    """

    inputs: ClassVar[dict[str, Port]] = {}
    outputs: ClassVar[dict[str, Port]] = {}
    Params: ClassVar[type[Any] | None] = None
    """The typed parameters (a config dataclass), or None for keyword arguments."""
    drains: ClassVar[bool] = False
    """Stops the graph itself when asked (`request_stop`): on a first SIGINT/SIGTERM the graph
    waits for it (up to `graph.drain_timeout_s`) instead of stopping at once."""

    name: str = ""
    index: int = 0
    replicas: int = 1
    restarts: int = 0
    _stop_callback: StopCallback | None = None

    def bind_runtime(
        self,
        name: str,
        index: int,
        replicas: int,
        stop: StopCallback | None,
        restarts: int = 0,
    ) -> None:
        """Called by the runtime once, right after construction."""
        self.name = name
        self.index = index
        self.replicas = replicas
        self.restarts = restarts
        self._stop_callback = stop

    def setup(self) -> None:
        """Optional hook run once per (re)start, before any message is handled."""

    def request_stop(self, reason: str) -> None:
        """The graph was asked to stop (`reason`: the signal's name). Called on the event loop;
        an actor that `drains` wraps up (e.g. checkpoints) and calls `stop_graph`."""

    def handle(self, port: str, msg: Message) -> Outputs:
        """Decide what to send for one message. Override in handle-style actors."""
        raise NotImplementedError(f"{type(self).__name__} handles no messages (port {port!r})")

    async def serve(self, ctx: ActorContext) -> None:
        """The actor's loop; returning means the actor is finished (the graph goes on).

        By default: receive and hand each message to `handle` (`ctx.dispatch`), forever.
        """
        await ctx.serve_handle(self)

    def stop_graph(self, reason: str = "", result: Any = None) -> None:
        """Ask the whole graph to stop; `result` (msgpack-able) is handed to the launcher."""
        if self._stop_callback is None:
            raise RuntimeError(
                f"actor {self.name or type(self).__name__} is not running in a graph"
            )
        self._stop_callback(reason, result)
