"""Run a graph with tracing on and collect what the report and the trace need.

`record_graph(cfg)` starts the graph (tracing forced on), waits until it stops (or until
`timeout_s`, then stops it), collects every process's counters and spans before shutdown,
and returns the graph's result with a `Recording`. Extra tracks, counters and step rows the
graph hands back in its stop result (`result["profile"]`) are included.

`time_graph(cfg)` only measures how long a graph runs to completion, for the tracing overhead
comparison (`overhead.py`).

What it does not do: build the trainer's graph (the trainer does) or interpret anything.
"""

from __future__ import annotations

import dataclasses
import logging
import time

import anyio

from rstar2.actors.backend import backend_options
from rstar2.actors.graph import open_graph
from rstar2.actors.graph_config import GraphConfig, parse_edge
from rstar2.actors.plan import import_actor
from rstar2.actors.running_graph import GraphResult
from rstar2.profile.recording import Edge, Recording, extras_from_result, from_replies

log = logging.getLogger(__name__)


def graph_edges(cfg: GraphConfig) -> list[Edge]:
    """The actor-to-actor connections of `cfg`, in config order, without repeats; an edge into
    a request/reply port (the receiving class says) is a request edge."""
    classes = {a.name: a.cls for a in cfg.actors}
    out: list[Edge] = []
    for i, text in enumerate(cfg.edges):
        src, _, dst, dst_port = parse_edge(text, f"graph.edges[{i}]")
        cls = import_actor(classes[dst], f"graph.actors.{dst}.cls") if dst in classes else None
        port = cls.inputs.get(dst_port) if cls is not None else None
        edge = Edge(src, dst, port is not None and port.is_request_reply)
        if edge not in out:
            out.append(edge)
    return out


async def record_graph(
    cfg: GraphConfig, *, timeout_s: float | None = None
) -> tuple[GraphResult, Recording]:
    """Run `cfg` with tracing on; the Recording covers the graph's start to its stop."""
    cfg = dataclasses.replace(cfg, trace=True)
    start = time.time()
    async with open_graph(cfg) as graph:
        with anyio.move_on_after(timeout_s):
            await graph.wait()
        if not graph.stopping:
            log.warning("graph %s still running after %s s: stopping it", cfg.name, timeout_s)
            graph.stop("timeout")
        end = time.time()
        replies = await graph.collect(spans=True)
    result = graph.result
    spans, counters, steps = extras_from_result(result.result)
    rec = from_replies(
        replies,
        start,
        end,
        extra_spans=spans,
        counters=counters,
        steps=steps,
        edges=graph_edges(cfg),
    )
    return result, rec


def record_graph_blocking(
    cfg: GraphConfig, *, timeout_s: float | None = None, backend: str = "asyncio"
) -> tuple[GraphResult, Recording]:
    """`record_graph` from synchronous code."""
    return anyio.run(
        lambda: record_graph(cfg, timeout_s=timeout_s),
        backend=backend,
        backend_options=backend_options(backend),
    )


async def time_graph(cfg: GraphConfig) -> float:
    """Seconds from start to stop of one run of `cfg` (start-up and shutdown excluded)."""
    async with open_graph(cfg) as graph:
        start = time.perf_counter()
        result = await graph.wait()
        elapsed = time.perf_counter() - start
    if not result.ok:
        raise RuntimeError(f"graph {cfg.name} did not finish cleanly: {result.reason}")
    return elapsed
