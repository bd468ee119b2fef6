"""How much tracing slows a graph: the same workload with `graph.trace` on and off.

Runs alternate (off, on, off, on, ...) so that drift of a shared machine hits both sides
alike; the overhead is median(on) / median(off) - 1. The default workloads (`WORKLOADS`):

- "pipeline": the runtime's message-bound demo pipeline (source -> square x2 -> sink, tiny
  messages). Its actors drain runs of back-to-back messages, and the runtime records one
  "handle" span per run (docs/actors.md), so it is the case where spans coalesce best;
- "request_reply": a Pinger -> Echo pair, one request in flight at a time: every message is a
  run of its own, so the echo records one "handle" span per request and the pinger one
  "reply" span, the case where spans coalesce least.

Both are the worst case for tracing in another way too: the actors do almost nothing but pass
messages, so any real graph, whose actors work per message, pays a smaller share.

With `trace = false` the runtime still keeps its counters (busy/wait/blocked seconds); only
the span ring buffer is skipped. So this measures the spans; `rstar2 top` needs only counters.

What it does not do: isolate the machine (report figures as measured on a shared machine).
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable
from dataclasses import dataclass

import anyio

from rstar2.actors.backend import backend_options
from rstar2.actors.graph_config import GraphConfig, graph_config
from rstar2.profile.workload import time_graph

TARGET = 0.05
"""The acceptance target: tracing costs under 5%."""


@dataclass(frozen=True)
class Overhead:
    on_s: list[float]
    off_s: list[float]

    @property
    def overhead(self) -> float:
        return statistics.median(self.on_s) / statistics.median(self.off_s) - 1.0

    def summary(self) -> str:
        verdict = "within" if self.overhead < TARGET else "OVER"
        return (
            f"tracing overhead {self.overhead:+.1%} ({verdict} the {TARGET:.0%} target): "
            f"median {statistics.median(self.on_s):.3f} s traced vs "
            f"{statistics.median(self.off_s):.3f} s untraced over {len(self.on_s)} runs each"
        )


def request_reply(n: int = 3000) -> GraphConfig:
    """`n` round trips, one at a time, over a request/reply port (inproc)."""
    demo = "rstar2.actors.demo"
    return graph_config(
        {
            "name": "overhead-rr",
            "edges": ["pinger.req -> echo.req"],
            "actors": [
                {"name": "echo", "cls": f"{demo}:Echo"},
                {"name": "pinger", "cls": f"{demo}:Pinger", "params": {"n": n}},
            ],
        }
    )


def demo_pipeline(n: int = 20000) -> GraphConfig:
    """The message-bound default workload (all in one process, inproc sockets)."""
    demo = "rstar2.actors.demo"
    return graph_config(
        {
            "name": "overhead",
            "edges": ["source.out -> square.in", "square.out -> sink.in"],
            "actors": [
                {"name": "source", "cls": f"{demo}:Source", "params": {"n": n}},
                {"name": "square", "cls": f"{demo}:Square", "count": 2},
                {"name": "sink", "cls": f"{demo}:Sink", "params": {"n": n}},
            ],
        }
    )


WORKLOADS: dict[str, Callable[[], GraphConfig]] = {
    "pipeline": demo_pipeline,
    "request_reply": request_reply,
}
"""The workloads `rstar2 profile --overhead` measures when no `--graph` is given."""


async def measure_overhead(cfg: GraphConfig, repeats: int = 5) -> Overhead:
    """Time `repeats` runs of `cfg` with tracing off and on, alternating."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    on, off = [], []
    for _ in range(repeats):
        off.append(await time_graph(dataclasses.replace(cfg, trace=False)))
        on.append(await time_graph(dataclasses.replace(cfg, trace=True)))
    return Overhead(on, off)


def measure_overhead_blocking(
    cfg: GraphConfig, repeats: int = 5, backend: str = "asyncio"
) -> Overhead:
    return anyio.run(
        lambda: measure_overhead(cfg, repeats),
        backend=backend,
        backend_options=backend_options(backend),
    )
