"""The `[graph]` config table: which actors run, how many, where, and how they are wired.

```toml
[graph]
name = "demo"
edges = ["source.out -> square.in", "square.out -> sink.in"]

[[graph.actors]]
name = "source"
cls = "rstar2.actors.demo:Source"
params = { n = 100 }

[[graph.actors]]
name = "square"
cls = "rstar2.actors.demo:Square"
count = 2
process = "workers"     # its own OS process; actors sharing a name share a process
# process_per_instance = true   # instead "workers-0", "workers-1": a process per instance
```

Validation here is what can be checked without importing actor classes (names, counts, hosts,
edge syntax, CURVE keys); `plan.build_plan` checks ports and classes. Both raise `ConfigError`
naming the key.

What it does not do: launch anything (see `graph.py`).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rstar2.actors.sockets import CurveKeys
from rstar2.config import ConfigError, from_dict, load_file, require, to_dict

MAIN_PROCESS = "main"
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")
_EDGE = re.compile(r"^\s*([\w-]+)\.(\w+)\s*->\s*([\w-]+)\.(\w+)\s*$")
_Z85_KEY_LEN = 40


@dataclass
class ActorConfig:
    name: str
    """Actor name, unique in the graph; instances are named "<name>.<index>"."""
    cls: str
    """Import path of the actor class, "package.module:ClassName"."""
    count: int = 1
    """Number of instances (a stream into this actor is spread round-robin over them)."""
    process: str = MAIN_PROCESS
    """OS process to run in; "main" is the launching process, any other name is spawned."""
    process_per_instance: bool = False
    """Each instance in a spawned process of its own, "<process>-<index>" (`process` "engines":
    "engines-0", "engines-1", ...), so that instances which are busy in Python each have an
    interpreter (an event loop and a lock) to themselves."""
    host: str = "local"
    """Host to run on: a key of `graph.hosts`."""
    restarts: int = 0
    """How many times a failed instance is restarted before the whole graph is stopped."""
    params: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments for the actor class's constructor."""


@dataclass
class CurveConfig:
    server_public_key: str = ""
    """Z85 public key (40 characters) of the binding side; `zmq.curve_keypair()` makes pairs."""
    server_secret_key: str = ""
    """Z85 secret key of the binding side."""
    client_public_key: str = ""
    """Z85 public key of the connecting side."""
    client_secret_key: str = ""
    """Z85 secret key of the connecting side."""

    def keys(self) -> CurveKeys | None:
        if not self.server_secret_key:
            return None
        return CurveKeys(
            self.server_public_key,
            self.server_secret_key,
            self.client_public_key,
            self.client_secret_key,
        )


@dataclass
class GraphConfig:
    actors: list[ActorConfig]
    """The actors of the graph."""
    edges: list[str] = field(default_factory=list)
    """Connections, "src_actor.out_port -> dst_actor.in_port"."""
    name: str = "graph"
    """Graph name (used in socket and temp-dir names)."""
    hosts: dict[str, str] = field(default_factory=lambda: {"local": "127.0.0.1"})
    """Host name -> address its tcp endpoints bind on; non-loopback addresses require CURVE."""
    base_port: int = 5700
    """First tcp port; endpoints crossing hosts use base_port, base_port + 1, ..."""
    hwm: int = 1000
    """ZeroMQ high-water mark (messages) of every socket: the backpressure bound."""
    max_message_bytes: int = 64 * 1024 * 1024
    """Messages larger than this are dropped and counted by the receiver."""
    batch: int = 64
    """Messages an actor drains from a socket per wake-up."""
    handshake_timeout_s: float = 30.0
    """How long spawned processes get to say HELLO (they import torch: be generous)."""
    shutdown_timeout_s: float = 5.0
    """How long processes get to exit after Shutdown before they are killed."""
    drain_timeout_s: float = 300.0
    """On a first SIGINT/SIGTERM, how long actors that drain (`Actor.drains`: the trainer's
    learner, which checkpoints) get to stop the graph themselves before it is stopped; a second
    signal stops it at once. Without such an actor a signal stops the graph at once."""
    node_heartbeat_s: float = 1.0
    """Multi-host graphs: interval of the ZeroMQ heartbeats on the control link between nodes."""
    node_timeout_s: float = 10.0
    """Multi-host graphs: a node silent this long (a host that vanished, a frozen launcher) is
    lost, and the graph stops as failed."""
    trace: bool = True
    """Record spans into each actor's ring buffer."""
    trace_capacity: int = 4096
    """Spans kept per actor instance (oldest dropped)."""
    curve: CurveConfig = field(default_factory=CurveConfig)
    """CURVE keys; required when any used host address is not loopback."""

    def validate(self) -> None:
        _validate_actors(self)
        for key, value, low in (
            ("graph.hwm", self.hwm, 1),
            ("graph.batch", self.batch, 1),
            ("graph.max_message_bytes", self.max_message_bytes, 64),
            ("graph.trace_capacity", self.trace_capacity, 1),
        ):
            require(value >= low, key, value, f"an integer >= {low}")
        require(1 <= self.base_port <= 65000, "graph.base_port", self.base_port, "a tcp port")
        require(
            self.handshake_timeout_s > 0,
            "graph.handshake_timeout_s",
            self.handshake_timeout_s,
            "> 0",
        )
        require(
            self.shutdown_timeout_s > 0, "graph.shutdown_timeout_s", self.shutdown_timeout_s, "> 0"
        )
        require(self.drain_timeout_s > 0, "graph.drain_timeout_s", self.drain_timeout_s, "> 0")
        require(
            self.node_heartbeat_s >= 0.01,
            "graph.node_heartbeat_s",
            self.node_heartbeat_s,
            ">= 0.01",
        )
        require(
            self.node_timeout_s > self.node_heartbeat_s,
            "graph.node_timeout_s",
            self.node_timeout_s,
            f"> graph.node_heartbeat_s ({self.node_heartbeat_s})",
        )
        for i, edge in enumerate(self.edges):
            parse_edge(edge, f"graph.edges[{i}]")
        _validate_curve(self)

    def used_hosts(self) -> set[str]:
        return {a.host for a in self.actors}

    def nodes(self) -> list[str]:
        """Hosts that place at least one actor, in `hosts` order: `--node-rank K` is the K-th."""
        used = self.used_hosts()
        return [h for h in self.hosts if h in used]


def _validate_actors(cfg: GraphConfig) -> None:
    require(bool(cfg.actors), "graph.actors", cfg.actors, "at least one actor")
    seen: set[str] = set()
    for i, a in enumerate(cfg.actors):
        key = f"graph.actors[{i}]"
        require(
            bool(_NAME.match(a.name)), f"{key}.name", a.name, "a name of letters, digits, _ or -"
        )
        require(a.name not in seen, f"{key}.name", a.name, "a name not used by another actor")
        seen.add(a.name)
        require(":" in a.cls, f"{key}.cls", a.cls, '"package.module:ClassName"')
        require(a.count >= 1, f"{key}.count", a.count, "an integer >= 1")
        require(a.restarts >= 0, f"{key}.restarts", a.restarts, "an integer >= 0")
        require(bool(_NAME.match(a.process)), f"{key}.process", a.process, "a process name")
        require(
            not (a.process_per_instance and a.process == MAIN_PROCESS),
            f"{key}.process",
            a.process,
            'the name of a spawned process (not "main") with process_per_instance',
        )
        require(
            a.host in cfg.hosts, f"{key}.host", a.host, f"one of graph.hosts: {sorted(cfg.hosts)}"
        )


def _validate_curve(cfg: GraphConfig) -> None:
    c = cfg.curve
    for key in ("server_public_key", "server_secret_key", "client_public_key", "client_secret_key"):
        value = getattr(c, key)
        require(
            value == "" or len(value) == _Z85_KEY_LEN,
            f"graph.curve.{key}",
            "<hidden>",
            "a 40-character Z85 key",
        )
    exposed = [h for h in sorted(cfg.used_hosts()) if not is_loopback(cfg.hosts[h])]
    if exposed and not all(
        getattr(c, k)
        for k in (
            "server_public_key",
            "server_secret_key",
            "client_public_key",
            "client_secret_key",
        )
    ):
        raise ConfigError(
            "graph.curve",
            "<missing keys>",
            f"all four CURVE keys, because host {exposed[0]!r} binds tcp on the non-loopback "
            f"address {cfg.hosts[exposed[0]]}",
        )


def is_loopback(address: str) -> bool:
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def parse_edge(edge: str, key: str = "graph.edges") -> tuple[str, str, str, str]:
    """ "a.out -> b.in" -> ("a", "out", "b", "in"); ConfigError naming `key` otherwise."""
    m = _EDGE.match(edge)
    if m is None:
        raise ConfigError(key, edge, '"src_actor.out_port -> dst_actor.in_port"')
    return m.group(1), m.group(2), m.group(3), m.group(4)


def instance_process(process: str, index: int) -> str:
    """The process of instance `index` of an actor placed with `process_per_instance`."""
    return f"{process}-{index}"


def actor_node(name: str, cls: type, params: Any = None, **placement: Any) -> dict[str, Any]:
    """One `graph.actors` entry for code that builds a graph: the class itself (written as its
    import path) and its typed params (a config dataclass, written as its table; or a dict of
    keyword arguments); `placement` adds `count`, `process`, `process_per_instance`, `host`,
    `restarts`."""
    table = {} if params is None else params if isinstance(params, dict) else to_dict(params)
    return {
        "name": name,
        "cls": f"{cls.__module__}:{cls.__qualname__}",
        "params": table,
        **placement,
    }


def graph_config(data: dict[str, Any]) -> GraphConfig:
    """Build a GraphConfig from a mapping holding a `graph` table (or the table itself)."""
    table = data.get("graph", data) if isinstance(data, dict) else data
    return from_dict(GraphConfig, table, "graph")


def load_graph_config(path: str | Path) -> GraphConfig:
    return graph_config(load_file(path))
