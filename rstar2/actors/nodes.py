"""The control link between the nodes of a multi-host graph launched one command per node.

`rstar2 launch GRAPH --node-rank K` runs only the actors of node K: the K-th host of
`graph.hosts` (in its order) that places at least one actor. Every node builds the same plan
from the same file, so their tcp endpoints agree; this link ties their lifetimes together:

- node 0, the coordinator, binds a ROUTER on `tcp://<hosts[node 0]>:<base_port - 1>` (CURVE
  when the graph has keys, as every tcp socket); every other node, a member, connects a DEALER
  whose identity is its host name;
- start: a member sends `Hello(host, its instances)` once its own processes have said Hello;
  node 0 sends `Ready` to every member once all have (within `handshake_timeout_s`), and only
  then do actors start, on any node. A node that hears nothing in time raises `NodeLinkError`
  naming the missing node and the endpoint: it never waits forever;
- running: members forward `ActorFailed`, `StopGraph` and `ActorFinished` to node 0, which
  decides exactly as for local actors ("finished" counts the whole graph's instances);
- stop: node 0 sends `Shutdown(reason)` to every member; a member that stops on its own (a
  signal, its start failing) sends `Shutdown(reason)` up, and node 0 stops the rest. A control
  connection that drops while the graph runs (a launcher died) stops the graph as failed;
- liveness: both ends of the link send ZeroMQ (ZMTP) heartbeats every `graph.node_heartbeat_s`
  and close a connection whose peer has been silent for `graph.node_timeout_s` (a host that
  vanished without closing its TCP connections, a frozen launcher), which is then a dropped
  connection as above. The heartbeats run in ZeroMQ's I/O thread: a busy actor does not
  delay them.

What it does not do: start processes on other machines (run the command on each node), or
gather stats across nodes (`graph.collect()` covers this node's processes).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import anyio
import zmq
from zmq.utils.monitor import parse_monitor_message

from rstar2.actors.graph_config import GraphConfig
from rstar2.actors.sockets import AsyncSocket, SocketFactory
from rstar2.config import ConfigError
from rstar2.frames import from_frames, to_frames
from rstar2.wire import Hello, Message, Ready, WireError

log = logging.getLogger(__name__)

_POLL_S = 0.2

OnMessage = Callable[[str, Message], None]


class NodeLinkError(RuntimeError):
    """The nodes of a graph did not all come up within the handshake timeout."""


@dataclass(frozen=True)
class NodeRole:
    """Where this node stands in a multi-host graph."""

    host: str
    """This node's host name (a key of `graph.hosts`)."""
    nodes: tuple[str, ...]
    """Every node's host name, by rank; nodes[0] coordinates."""
    endpoint: str
    """Node 0's control endpoint, `tcp://<hosts[nodes[0]]>:<base_port - 1>`."""

    @property
    def coordinator(self) -> bool:
        return self.host == self.nodes[0]

    @property
    def members(self) -> tuple[str, ...]:
        return self.nodes[1:]


def node_host(cfg: GraphConfig, rank: int) -> str:
    """The host name of node `rank`; ConfigError when the graph has no such node."""
    nodes = cfg.nodes()
    if not 0 <= rank < len(nodes):
        raise ConfigError(
            "--node-rank",
            rank,
            f"0 .. {len(nodes) - 1}: the graph's nodes (hosts placing actors, in graph.hosts "
            f"order) are {nodes}",
        )
    return nodes[rank]


def node_role(cfg: GraphConfig, host: str) -> NodeRole | None:
    """This node's role, or None when `host` is the graph's only node (no link needed)."""
    nodes = tuple(cfg.nodes())
    if host not in nodes:
        raise ConfigError("host", host, f"a host that places actors: {list(nodes)}")
    if len(nodes) == 1:
        return None
    if cfg.base_port < 2:
        raise ConfigError(
            "graph.base_port", cfg.base_port, ">= 2 (node 0's control socket uses base_port - 1)"
        )
    return NodeRole(host, nodes, f"tcp://{cfg.hosts[nodes[0]]}:{cfg.base_port - 1}")


def heartbeat_options(interval_s: float, timeout_s: float) -> dict[int, int]:
    """ZeroMQ socket options for ZMTP heartbeats: ping every `interval_s`, drop the connection
    after `timeout_s` without traffic from the peer (ask the peer to do the same: TTL)."""
    if not 0 < interval_s < timeout_s:
        raise ValueError(f"need 0 < interval < timeout, got {interval_s}, {timeout_s}")
    ivl, timeout = max(1, round(interval_s * 1000)), round(timeout_s * 1000)
    # ZMTP carries the TTL in deciseconds; below 100 ms it would round to "no TTL"
    return {
        zmq.HEARTBEAT_IVL: ivl,
        zmq.HEARTBEAT_TIMEOUT: timeout,
        zmq.HEARTBEAT_TTL: max(100, timeout),
    }


class NodeLink:
    """This node's end of the control link (see the module docstring)."""

    def __init__(
        self,
        role: NodeRole,
        factory: SocketFactory,
        heartbeat_s: float = 1.0,
        timeout_s: float = 10.0,
    ) -> None:
        self.role = role
        options = heartbeat_options(heartbeat_s, timeout_s)
        if role.coordinator:
            self.sock = factory.bind(zmq.ROUTER, role.endpoint, options=options)
        else:
            self.sock = factory.connect(
                zmq.DEALER, [role.endpoint], identity=role.host.encode(), options=options
            )
        monitor = self.sock.sock.get_monitor_socket(zmq.EVENT_DISCONNECTED)
        self._monitor = AsyncSocket(monitor, f"monitor of {role.endpoint}")
        self.joined: list[str] = []
        """Members that said Hello (node 0 only)."""

    def send(self, msg: Message, to: str = "") -> None:
        """To node 0 (from a member), or to member `to` (from node 0); never blocks."""
        frames = to_frames(msg)
        try:
            if not self.sock.send_nowait([to.encode(), *frames] if to else frames):
                log.warning("control link full: %s to %s dropped", type(msg).__name__, to or 0)
        except zmq.ZMQError as e:  # ROUTER_MANDATORY: that member is not connected
            log.warning("%s to node %s not delivered: %s", type(msg).__name__, to, e)

    def broadcast(self, msg: Message) -> None:
        """From node 0: to every member that joined."""
        for member in self.joined:
            self.send(msg, member)

    def decode(self, frames: list[bytes]) -> tuple[str, Message | None]:
        """(sending node, message); None for a message that does not decode."""
        sender = self.role.nodes[0]
        if self.role.coordinator:
            sender, frames = frames[0].decode(errors="replace"), frames[1:]
        try:
            return sender, from_frames(frames)
        except WireError as e:
            log.warning("malformed control message from node %s: %s", sender, e)
            return sender, None

    def greeted(self, sender: str, msg: Message | None, waiting: set[str]) -> bool:
        """True when `msg` is the handshake message this node waits for from `sender`."""
        expected = Hello if self.role.coordinator else Ready
        if not isinstance(msg, expected) or sender not in waiting:
            return False
        waiting.discard(sender)
        if self.role.coordinator:
            self.joined.append(sender)
        return True

    async def join(
        self, hello: Hello, timeout_s: float, on_message: OnMessage, stopping: Callable[[], bool]
    ) -> None:
        """Node 0: wait for every member's Hello, then Ready to all. A member: Hello, then wait
        for Ready. Other messages go to `on_message`; `stopping()` ends the wait early."""
        if not self.role.coordinator:
            self.send(hello)
        waiting = set(self.role.members if self.role.coordinator else self.role.nodes[:1])
        with anyio.move_on_after(timeout_s):
            while waiting and not stopping():
                with anyio.move_on_after(_POLL_S):
                    for frames in await self.sock.recv_batch(64):
                        sender, msg = self.decode(frames)
                        if not self.greeted(sender, msg, waiting) and msg is not None:
                            on_message(sender, msg)
        if stopping():
            return
        if waiting:
            raise NodeLinkError(self._missing(sorted(waiting), timeout_s))
        for member in self.joined:
            self.send(Ready(member), member)

    def _missing(self, waiting: list[str], timeout_s: float) -> str:
        if self.role.coordinator:
            ranks = [f"{h} (--node-rank {self.role.nodes.index(h)})" for h in waiting]
            return (
                f"node(s) {', '.join(ranks)} did not say Hello on {self.role.endpoint} within "
                f"{timeout_s} s (graph.handshake_timeout_s): is `rstar2 launch` running there "
                "with the same config, and can it reach this address?"
            )
        return (
            f"node {self.role.host}: no answer from node 0 ({self.role.nodes[0]}) at "
            f"{self.role.endpoint} within {timeout_s} s (graph.handshake_timeout_s): is "
            "`rstar2 launch --node-rank 0` running there with the same config?"
        )

    async def serve(self, on_message: OnMessage, on_lost: Callable[[str], None]) -> None:
        """Hand every control message to `on_message`; a dropped connection to `on_lost`."""
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._watch_connection, on_message, on_lost)
            while True:
                for frames in await self.sock.recv_batch(64):
                    sender, msg = self.decode(frames)
                    if msg is not None:
                        on_message(sender, msg)

    async def _watch_connection(
        self, on_message: OnMessage, on_lost: Callable[[str], None]
    ) -> None:
        while True:
            event = parse_monitor_message(await self._monitor.recv())
            if event["event"] != zmq.EVENT_DISCONNECTED:
                continue
            # What the peer sent before it went comes first (its failure, its Shutdown).
            for frames in self.sock.recv_batch_nowait(1024):
                sender, msg = self.decode(frames)
                if msg is not None:
                    on_message(sender, msg)
            peer = "a member node" if self.role.coordinator else f"node 0 ({self.role.nodes[0]})"
            on_lost(f"control connection to {peer} dropped ({self.role.endpoint})")

    def close(self, linger_s: float) -> None:
        """Close, giving queued messages (the last Shutdown) up to `linger_s` to leave."""
        self.sock.sock.disable_monitor()
        self._monitor.close()
        if not self.sock.closed:
            self.sock.sock.close(linger=int(linger_s * 1000))
