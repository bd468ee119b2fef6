"""The service primitive: an actor that answers requests, with its serving loop written once.

`Service(ctx, routes).serve()` receives forever and hands each message to the `Route` of its
input port:

- a concurrent route runs each message in its own task (a sandbox run, a scoring, a rollout),
  so a slow one never holds back the others; at most `limit` run at once, and while that many
  are in flight the loop stops receiving (backpressure reaches the senders through ZeroMQ);
- an inline route runs the message in the loop, in arrival order (a weight load, a routing
  decision), recorded as one handle span (`rstar2.actors.handling.handling`);
- busy time: the units of concurrent routes with ``busy=True`` are tracked as non-overlapping
  handle spans (`BusyTrack`; `slots` and `waiting` say what counts as queued);
- replies: on a request port the handler's return value is the reply (exactly one per
  request); on a stream port the handler returns None and sends what it produces itself;
- errors as data: when a handler raises, the requester gets the failure as its reply
  (`RemoteError` at the client, never a hang). An error listed in the route's `survives` is
  then logged and the service goes on (a bad request); any other error stops the actor after
  the reply (a bug: the supervisor decides).

Handlers may start work that outlives them with `spawn` (the service's task group).

What it does not do: decide anything (the handlers do), or retry.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any, NoReturn

import anyio
import anyio.abc

from rstar2.actors.actor import Incoming
from rstar2.actors.context import ActorContext
from rstar2.actors.handling import BusyTrack, handling
from rstar2.wire import Message

log = logging.getLogger(__name__)

Handler = Callable[[Any], Awaitable[Message | None]]
"""Handles one message of a port; returns the reply (request ports) or None (streams)."""


@dataclass(frozen=True)
class Route:
    """How a service handles the messages of one input port (see the module docstring)."""

    handler: Handler
    concurrent: bool | Callable[[Message], bool] = True
    """Each message in its own task; False: inline, in order. A function decides per message."""
    busy: bool = True
    """A concurrent unit counts as busy time of the service (False: the handler records its
    own, e.g. around an engine's generation)."""
    survives: tuple[type[Exception], ...] = ()
    """Errors answered as data after which the service goes on serving."""


class Service:
    """One actor instance's request-serving loop (see the module docstring)."""

    def __init__(
        self,
        ctx: ActorContext,
        routes: dict[str, Route],
        *,
        limit: int | None = None,
        busy: BusyTrack | None = None,
    ) -> None:
        if limit is not None and limit < 1:
            raise ValueError(f"service limit must be >= 1, got {limit}")
        self.ctx = ctx
        self.routes = routes
        self.busy = busy or BusyTrack(ctx, ",".join(routes))
        self._slots = anyio.Semaphore(limit) if limit is not None else None
        self._tg: anyio.abc.TaskGroup | None = None

    def spawn(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> None:
        """Run `fn(*args)` in the service's task group (work a handler starts and leaves)."""
        if self._tg is None:
            raise RuntimeError("the service is not serving")
        self._tg.start_soon(fn, *args)

    async def serve(self) -> NoReturn:
        async with anyio.create_task_group() as tg:
            self._tg = tg
            while True:
                incoming = await self.ctx.recv()
                route = self.routes.get(incoming.port)
                if route is None:
                    raise ValueError(f"{self.ctx.name}: no route for input port {incoming.port!r}")
                concurrent = route.concurrent
                if callable(concurrent):
                    concurrent = concurrent(incoming.msg)
                if not concurrent:
                    await self._run(incoming, route, handling(self.ctx, incoming.port))
                    continue
                if self._slots is not None:
                    await self._slots.acquire()  # released when the unit ends
                tg.start_soon(self._unit, incoming, route)
        raise AssertionError("unreachable")  # pragma: no cover - the loop never ends

    async def _unit(self, incoming: Incoming, route: Route) -> None:
        try:
            await self._run(incoming, route, self.busy.unit() if route.busy else nullcontext())
        finally:
            if self._slots is not None:
                self._slots.release()

    async def _run(
        self, incoming: Incoming, route: Route, span: AbstractContextManager[None]
    ) -> None:
        try:
            with span:
                reply = await route.handler(incoming.msg)
        except Exception as e:
            if incoming.reply_to is not None:
                self.ctx.reply_failure(incoming)
            if not isinstance(e, route.survives):
                raise
            log.warning("%s: %s on port %r: %s", self.ctx.name, type(e).__name__, incoming.port, e)
            return
        if incoming.reply_to is not None:
            if reply is None:
                raise TypeError(f"{self.ctx.name}: the handler of {incoming.port!r} gave no reply")
            await self.ctx.reply(incoming, reply)
        elif reply is not None:
            raise TypeError(
                f"{self.ctx.name}: stream port {incoming.port!r} got a reply "
                f"({type(reply).__name__}); send outputs from the handler"
            )
