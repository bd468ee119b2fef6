"""The handle on a running actor graph: its result, its graph events, its control messages.

`RunningGraph` (what `open_graph` yields) records why the graph stopped (`stop`, `wait`),
counts the instances that finished, turns the events of the local supervisor, of child
processes (over the control socket) and of other nodes (over the node link) into that
decision, and collects every process's counters and spans (`collect`). `send_control` and
`decode_control` are the control socket's two framing helpers.

What it does not do: start or stop processes, sockets or the node link (`graph.py` does:
spawning, the handshake, signals, shutdown and cleanup).
"""

from __future__ import annotations

import logging
import multiprocessing
from dataclasses import dataclass, field
from typing import Any

import anyio
import zmq

from rstar2.actors.graph_config import MAIN_PROCESS, GraphConfig
from rstar2.actors.nodes import NodeLink
from rstar2.actors.plan import GraphPlan
from rstar2.actors.sockets import AsyncSocket, SocketFactory
from rstar2.actors.supervisor import GraphEvents, Supervisor
from rstar2.frames import from_frames, to_frames
from rstar2.wire import (
    ActorFailed,
    ActorFinished,
    ActorStats,
    Message,
    Shutdown,
    Span,
    StatsReply,
    StatsRequest,
    StopGraph,
    WireError,
)

log = logging.getLogger(__name__)

_STATS_TIMEOUT_S = 2.0


class GraphStartError(RuntimeError):
    """A child process did not come up (died or missed the handshake timeout)."""


@dataclass
class GraphResult:
    reason: str
    """"stopped" (an actor asked), "finished" (all returned), "failed", "signal" or "stop()"."""
    stopped_by: str = ""
    result: Any = None
    failures: list[ActorFailed] = field(default_factory=list)
    stats: list[ActorStats] = field(default_factory=list)
    spans: list[Span] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.reason in ("stopped", "finished")


class RunningGraph:
    """Handle on a running graph (from `open_graph`): all of it, or one node's share."""

    def __init__(
        self,
        cfg: GraphConfig,
        plan: GraphPlan,
        factory: SocketFactory,
        *,
        total_instances: int | None = None,
        link: NodeLink | None = None,
    ) -> None:
        self.cfg = cfg
        self.plan = plan
        self.total_instances = len(plan.instances) if total_instances is None else total_instances
        """Instances of the whole graph: it has finished when that many have (on node 0)."""
        self.link = link
        """The control link to the other nodes (None: a graph run by one command)."""
        self.member = link is not None and not link.role.coordinator
        """One node of several, but not node 0: node 0 decides for the graph."""
        self._stopped_by_link = False
        self.procs: dict[str, multiprocessing.process.BaseProcess] = {}
        self.control: AsyncSocket | None = None
        self.result = GraphResult(reason="")
        self._done = anyio.Event()
        self._finished: set[str] = set()
        self._replies: dict[str, StatsReply] = {}
        self._reply_event = anyio.Event()
        self.events = GraphEvents(self.on_failure, self._on_stop, self._on_finished)
        self.supervisor = Supervisor(plan, MAIN_PROCESS, factory, self.events)

    # --- events (from the local supervisor or forwarded by children) ------------------------

    def on_failure(self, failure: ActorFailed) -> None:
        self.result.failures.append(failure)
        self._forward(failure)
        if not failure.restarting:
            self.stop("failed", failure.actor)

    def _on_stop(self, msg: StopGraph) -> None:
        self._forward(msg)
        self.stop("stopped", msg.actor, msg.result)

    def _on_finished(self, name: str) -> None:
        if self._forward(ActorFinished(name)):
            return  # node 0 counts the whole graph
        self._finished.add(name)
        if len(self._finished) == self.total_instances:
            self.stop("finished")

    def _forward(self, msg: Message) -> bool:
        """On a member node, send a graph event to node 0; True when it was sent there."""
        if self.member and self.link is not None:
            self.link.send(msg)
        return self.member

    def on_node_message(self, node: str, msg: Message) -> None:
        """A message from another node: events of its actors (at node 0) or Shutdown."""
        if isinstance(msg, Shutdown):
            self._stopped_by_link = self._stopped_by_link or not self.stopping
            self.stop(msg.reason or "stopped", f"node:{node}")
        elif not self.member and isinstance(msg, ActorFailed | StopGraph | ActorFinished):
            self.on_control(node, msg)
        else:
            log.warning("unexpected message from node %s: %r", node, msg)

    def on_link_lost(self, text: str) -> None:
        if self.stopping:
            return  # nodes close their links as they stop
        log.error("%s", text)
        self._stopped_by_link = True
        self.result.failures.append(ActorFailed("node", text))
        self.stop("failed", "node")

    def notify_nodes(self) -> None:
        """When stopping: node 0 tells every member; a member that stopped on its own tells
        node 0 (its forwarded events already did, unless it was a signal or a failed start)."""
        if self.link is None:
            return
        if not self.member:
            self.link.broadcast(Shutdown(self.result.reason))
        elif not self._stopped_by_link:
            self.link.send(Shutdown(self.result.reason))

    def stop(self, reason: str = "stop()", by: str = "", result: Any = None) -> None:
        """Ask the graph to stop (idempotent; the first reason wins)."""
        if self._done.is_set():
            return
        self.result.reason, self.result.stopped_by, self.result.result = reason, by, result
        self._done.set()

    @property
    def stopping(self) -> bool:
        return self._done.is_set()

    async def wait(self) -> GraphResult:
        """Wait until the graph stops; returns its result with final stats (not yet spans)."""
        await self._done.wait()
        return self.result

    # --- stats ------------------------------------------------------------------------------

    async def collect(self, spans: bool = False) -> list[StatsReply]:
        """Counters (and spans) of every process, children asked over the control socket."""
        replies = [
            StatsReply(
                MAIN_PROCESS, self.supervisor.stats(), self.supervisor.spans() if spans else []
            )
        ]
        alive = [n for n, p in self.procs.items() if p.exitcode is None]
        if not alive or self.control is None:
            return replies
        self._replies.clear()
        for name in alive:
            send_control(self.control, name, StatsRequest(spans))
        with anyio.move_on_after(_STATS_TIMEOUT_S):
            while len(self._replies) < len(alive):
                self._reply_event = anyio.Event()
                await self._reply_event.wait()
        return replies + list(self._replies.values())

    def on_control(self, process: str, msg: Message | None) -> None:
        if isinstance(msg, ActorFailed):
            self.on_failure(msg)
        elif isinstance(msg, StopGraph):
            self._on_stop(msg)
        elif isinstance(msg, ActorFinished):
            self._on_finished(msg.actor)
        elif isinstance(msg, StatsReply):
            self._replies[process] = msg
            self._reply_event.set()
        else:
            log.warning("unexpected control message from %s: %r", process, msg)


def send_control(sock: AsyncSocket, process: str, msg: Message) -> None:
    try:
        if not sock.send_nowait([process.encode(), *to_frames(msg)]):
            log.warning("control message to %s dropped (queue full)", process)
    except zmq.ZMQError as e:
        log.debug("control message to %s not delivered: %s", process, e)


def decode_control(frames: list[bytes]) -> tuple[str, Message | None]:
    process = frames[0].decode(errors="replace")
    try:
        return process, from_frames(frames[1:])
    except WireError as e:
        log.warning("malformed control message from %s: %s", process, e)
        return process, None
