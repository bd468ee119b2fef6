"""From a GraphConfig to a concrete plan: instances, processes and ZeroMQ endpoints.

Pure and deterministic (every host computes the same plan from the same config):
- each actor becomes `count` instances named "<actor>.<index>", in the actor's process or, with
  `process_per_instance`, each in "<process>-<index>";
- every input port of every instance binds one endpoint; its transport is the narrowest that
  reaches all its senders: inproc:// when they all share its process, ipc:// (a file in the
  graph's temp dir) when they share its host, tcp://<host address>:<base_port + n> otherwise;
- a stream output connects one PUSH socket to every instance of the receiving actor (zmq
  spreads messages round-robin); a request output gets one DEALER per service instance.

Classes are imported here, so bad import paths, bad typed params (`Actor.Params`), unknown
ports and mismatched message types raise `ConfigError` naming the key before anything starts.

`GraphPlan.on_host(host)` keeps one node's instances (for `rstar2 launch --node-rank K`).

What it does not do: create sockets or processes.
"""

from __future__ import annotations

import dataclasses
import importlib
import uuid
from dataclasses import dataclass, field
from typing import Any

from rstar2.actors.actor import Actor, Port
from rstar2.actors.graph_config import MAIN_PROCESS, GraphConfig, instance_process, parse_edge
from rstar2.config import ConfigError, from_dict


@dataclass
class InstancePlan:
    name: str
    """Instance name, "<actor>.<index>"."""
    actor: str
    index: int
    count: int
    cls: str
    params: dict[str, Any]
    process: str
    host: str
    restarts: int
    binds: dict[str, str] = field(default_factory=dict)
    """Input port -> endpoint it binds."""
    streams: dict[str, list[str]] = field(default_factory=dict)
    """Stream output port -> endpoints its PUSH socket connects to."""
    requests: dict[str, list[str]] = field(default_factory=dict)
    """Request output port -> one endpoint per service instance."""


@dataclass
class GraphPlan:
    name: str
    uid: str
    ipc_dir: str
    instances: list[InstancePlan]
    hwm: int
    max_message_bytes: int
    batch: int
    trace: bool
    trace_capacity: int

    def processes(self) -> list[str]:
        """Process names in first-use order; "main" first when used."""
        names: list[str] = []
        for inst in self.instances:
            if inst.process not in names:
                names.append(inst.process)
        return sorted(names, key=lambda n: n != MAIN_PROCESS)

    def in_process(self, process: str) -> list[InstancePlan]:
        return [i for i in self.instances if i.process == process]

    def on_host(self, host: str) -> GraphPlan:
        """The plan of one node: only the instances placed on `host`. Their endpoints are the
        whole graph's (every node computes the same ones), so nodes launched separately meet."""
        instances = [i for i in self.instances if i.host == host]
        if not instances:
            hosts = sorted({i.host for i in self.instances})
            raise ValueError(f"no actor is placed on host {host!r}; hosts with actors: {hosts}")
        return dataclasses.replace(self, instances=instances)


def import_actor(path: str, key: str) -> type[Actor]:
    module_name, _, class_name = path.partition(":")
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as e:
        raise ConfigError(key, path, f"an importable actor class ({e})") from None
    if not (isinstance(cls, type) and issubclass(cls, Actor)):
        raise ConfigError(key, path, "a subclass of rstar2.actors.Actor")
    return cls


def _check_edge(i: int, edge: str, classes: dict[str, type[Actor]]) -> tuple[Port, Port]:
    key = f"graph.edges[{i}]"
    src, out_port, dst, in_port = parse_edge(edge, key)
    for actor in (src, dst):
        if actor not in classes:
            raise ConfigError(key, edge, f"actors declared in graph.actors, not {actor!r}")
    out = classes[src].outputs.get(out_port)
    inp = classes[dst].inputs.get(in_port)
    if out is None:
        raise ConfigError(key, edge, f"an output port of {src}: {sorted(classes[src].outputs)}")
    if inp is None:
        raise ConfigError(key, edge, f"an input port of {dst}: {sorted(classes[dst].inputs)}")
    if out.is_request_reply != inp.is_request_reply:
        raise ConfigError(key, edge, "both ports stream, or both request/reply")
    if not out.type_names() <= inp.type_names():
        raise ConfigError(key, edge, f"{dst}.{in_port} to accept {sorted(out.type_names())}")
    return out, inp


def actor_params(cls: type[Actor], params: dict[str, Any], key: str) -> Any:
    """The constructor argument of `cls`: its `Params` loaded (and validated) from the params
    table, or the table itself for a class without `Params`. ConfigError names the key."""
    if cls.Params is None:
        return params
    return from_dict(cls.Params, params, key)


def _bind_endpoints(
    cfg: GraphConfig,
    classes: dict[str, type[Actor]],
    instances: dict[str, list[InstancePlan]],
    senders: dict[tuple[str, str], list[str]],
    uid: str,
    ipc_dir: str,
) -> None:
    """Give every input port of every instance the narrowest transport its senders reach."""
    n = 0
    for a in cfg.actors:
        for inst in instances[a.name]:
            for in_port in classes[a.name].inputs:
                procs = {
                    (sender.host, sender.process)
                    for s in senders.get((a.name, in_port), [])
                    for sender in instances[s]
                }
                if all(p == (inst.host, inst.process) for p in procs):
                    ep = f"inproc://rstar2-{uid}/{inst.name}/{in_port}"
                elif all(h == inst.host for h, _ in procs):
                    ep = f"ipc://{ipc_dir}/{n}.sock"
                else:
                    ep = f"tcp://{cfg.hosts[a.host]}:{cfg.base_port + n}"
                inst.binds[in_port] = ep
                n += 1


def build_plan(cfg: GraphConfig, ipc_dir: str, uid: str | None = None) -> GraphPlan:
    """Resolve classes, params, ports and endpoints; ConfigError names the offending key."""
    classes = {
        a.name: import_actor(a.cls, f"graph.actors[{i}].cls") for i, a in enumerate(cfg.actors)
    }
    for i, a in enumerate(cfg.actors):
        actor_params(classes[a.name], dict(a.params), f"graph.actors[{i}].params")
    uid = uid or uuid.uuid4().hex[:8]
    instances = {
        a.name: [
            InstancePlan(
                f"{a.name}.{k}",
                a.name,
                k,
                a.count,
                a.cls,
                dict(a.params),
                instance_process(a.process, k) if a.process_per_instance else a.process,
                a.host,
                a.restarts,
            )
            for k in range(a.count)
        ]
        for a in cfg.actors
    }
    # Senders of each (dst actor, in port), to choose each bound endpoint's transport.
    senders: dict[tuple[str, str], list[str]] = {}
    edges = []
    for i, edge in enumerate(cfg.edges):
        out, _ = _check_edge(i, edge, classes)
        src, out_port, dst, in_port = parse_edge(edge)
        senders.setdefault((dst, in_port), []).append(src)
        edges.append((src, out_port, dst, in_port, out.is_request_reply))
    _bind_endpoints(cfg, classes, instances, senders, uid, ipc_dir)
    for src, out_port, dst, in_port, is_rr in edges:
        targets = [d.binds[in_port] for d in instances[dst]]
        for inst in instances[src]:
            table = inst.requests if is_rr else inst.streams
            if out_port in table:
                raise ConfigError("graph.edges", f"{src}.{out_port}", "one edge per output port")
            table[out_port] = targets
    return GraphPlan(
        cfg.name,
        uid,
        ipc_dir,
        [inst for a in cfg.actors for inst in instances[a.name]],
        cfg.hwm,
        cfg.max_message_bytes,
        cfg.batch,
        cfg.trace,
        cfg.trace_capacity,
    )
