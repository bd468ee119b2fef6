"""Runs the actor instances placed in one process: sockets, restarts, failure reports.

`Supervisor.prepare()` creates every socket of the process's instances (binds before connects,
so inproc peers in the same process find each other), and an `Outbox` for each stream port
whose edge reaches a single instance (those edges carry packed frames, so their sockets count
`frame_hwm` frames instead of `hwm` messages); `run()` starts each instance in its own
task and returns when they have all finished (or is cancelled by the graph). An instance that
raises is reported through `GraphEvents.failure` with its name and traceback; it is restarted
(fresh object, same sockets, so queued messages survive) up to its `restarts` budget, after
which the failure is final and the graph owner stops the graph.

What it does not do: processes, handshakes or signals (see `graph.py` and `child.py`).
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio
import zmq

from rstar2.actors.actor import Actor
from rstar2.actors.context import ActorContext, ContextSockets
from rstar2.actors.outbox import PACK_BYTES, Outbox, frame_hwm
from rstar2.actors.plan import GraphPlan, InstancePlan, actor_params, import_actor
from rstar2.actors.sockets import SocketFactory
from rstar2.actors.trace import Tracer
from rstar2.config import ConfigError
from rstar2.wire import ActorFailed, ActorStats, Span, StopGraph

log = logging.getLogger(__name__)


@dataclass
class GraphEvents:
    """Where a supervisor reports to (the graph in the main process, the parent from a child)."""

    failure: Callable[[ActorFailed], None]
    stop: Callable[[StopGraph], None]
    finished: Callable[[str], None]


def format_failure(exc: BaseException) -> str:
    """Traceback text of the actual error (unwrapping task-group exception groups)."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return "".join(traceback.format_exception(exc))


class Supervisor:
    def __init__(
        self, plan: GraphPlan, process: str, factory: SocketFactory, events: GraphEvents
    ) -> None:
        self.plan = plan
        self.process = process
        self.factory = factory
        self.events = events
        self.instances = plan.in_process(process)
        self.tracers = {
            i.name: Tracer(i.name, process, plan.trace_capacity, plan.trace) for i in self.instances
        }
        self._sockets: dict[str, ContextSockets] = {}
        self._classes: dict[str, type[Actor]] = {}
        self._actors: dict[str, Actor] = {}
        """The live actor of each instance (the latest after a restart)."""

    def prepare(self) -> None:
        """Import classes and create all sockets of this process (binds first)."""
        for inst in self.instances:
            self._classes[inst.name] = import_actor(inst.cls, f"graph.actors.{inst.actor}.cls")
            self._sockets[inst.name] = ContextSockets()
        packed_hwm = frame_hwm(self.plan.hwm, self.plan.batch)
        for inst in self.instances:
            cls = self._classes[inst.name]
            for port, endpoint in inst.binds.items():
                if cls.inputs[port].is_request_reply:
                    sock = self.factory.bind(zmq.ROUTER, endpoint)
                else:  # every sender to a lone instance packs
                    hwm = packed_hwm if inst.count == 1 else None
                    sock = self.factory.bind(zmq.PULL, endpoint, hwm=hwm)
                self._sockets[inst.name].inputs[port] = sock
        for inst in self.instances:
            self._connect(inst, self._sockets[inst.name], packed_hwm)

    def _connect(self, inst: InstancePlan, socks: ContextSockets, packed_hwm: int) -> None:
        pack_bytes = min(PACK_BYTES, self.plan.max_message_bytes)
        for port, endpoints in inst.streams.items():
            if len(endpoints) == 1:
                sock = self.factory.connect(zmq.PUSH, endpoints, hwm=packed_hwm)
                socks.outboxes[port] = Outbox(sock, self.plan.batch, pack_bytes)
            else:  # fan-out: one message per frame, so PUSH spreads messages evenly
                sock = self.factory.connect(zmq.PUSH, endpoints)
            socks.streams[port] = sock
        for port, endpoints in inst.requests.items():
            socks.requests[port] = [self.factory.connect(zmq.DEALER, [e]) for e in endpoints]

    async def run(self) -> None:
        """Run every instance until all have finished (cancel to stop them)."""
        async with anyio.create_task_group() as tg:
            for inst in self.instances:
                tg.start_soon(self._run_instance, inst, name=inst.name)

    def _construct(self, inst: InstancePlan, restarts: int) -> Actor:
        cls = self._classes[inst.name]
        try:
            if cls.Params is not None:
                actor = cls(actor_params(cls, inst.params, f"graph.actors.{inst.actor}.params"))
            else:
                actor = cls(**inst.params)
        except TypeError as e:
            raise ConfigError(f"graph.actors.{inst.actor}.params", inst.params, str(e)) from None

        def stop(reason: str, result: Any) -> None:
            self.events.stop(StopGraph(inst.name, reason, result))

        actor.bind_runtime(inst.name, inst.index, inst.count, stop, restarts)
        self._actors[inst.name] = actor
        return actor

    def request_stop(self, reason: str) -> bool:
        """Hand a stop request to every live actor of this process that drains; True when one
        did (it will stop the graph itself)."""
        draining = [a for a in self._actors.values() if type(a).drains]
        for actor in draining:
            actor.request_stop(reason)
        return bool(draining)

    async def _run_instance(self, inst: InstancePlan) -> None:
        tracer = self.tracers[inst.name]
        restarts = 0
        while True:
            try:
                await self._run_once(inst, tracer)
                log.debug("%s finished", inst.name)
                self.events.finished(inst.name)
                return
            except Exception as exc:  # an actor bug: report it, restart or give up
                again = restarts < inst.restarts
                text = format_failure(exc)
                log.error(
                    "actor %s failed%s:\n%s", inst.name, " (restarting)" if again else "", text
                )
                self.events.failure(ActorFailed(inst.name, text, again, restarts))
                if not again:
                    tracer.stats.alive = False
                    return
                restarts += 1
                tracer.stats.restarts = restarts

    async def _run_once(self, inst: InstancePlan, tracer: Tracer) -> None:
        actor = self._construct(inst, tracer.stats.restarts)
        cls = self._classes[inst.name]
        ctx = ActorContext(
            inst.name,
            cls.inputs,
            cls.outputs,
            self._sockets[inst.name],
            tracer,
            max_message_bytes=self.plan.max_message_bytes,
            batch=self.plan.batch,
            stop=actor._stop_callback,
        )
        async with anyio.create_task_group() as tg:
            ctx.attach(tg)
            actor.setup()
            await actor.serve(ctx)
            await ctx.flush()  # the last messages it sent may still sit in an outbox
            tg.cancel_scope.cancel()

    def stats(self) -> list[ActorStats]:
        return [t.snapshot() for t in self.tracers.values()]

    def spans(self) -> list[Span]:
        return [s for t in self.tracers.values() for s in t.spans()]

    def close(self) -> None:
        self.factory.close()
