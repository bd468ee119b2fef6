"""Graph configs shared by the actor tests (built from the demo actors)."""

from __future__ import annotations

from typing import Any, ClassVar

import anyio

from rstar2.actors import Actor, ActorContext, Port, port
from rstar2.actors.graph_config import GraphConfig, graph_config
from rstar2.wire import Item

DEMO = "rstar2.actors.demo"


def pipeline(n: int = 200, process: str = "main", **graph: Any) -> GraphConfig:
    """source -> square (x2) -> sink; `process` places square and sink."""
    return graph_config(
        {
            "name": "test-pipeline",
            "edges": ["source.out -> square.in", "square.out -> sink.in"],
            "actors": [
                {"name": "source", "cls": f"{DEMO}:Source", "params": {"n": n}},
                {"name": "square", "cls": f"{DEMO}:Square", "count": 2, "process": process},
                {"name": "sink", "cls": f"{DEMO}:Sink", "params": {"n": n}, "process": process},
            ],
            **graph,
        }
    )


def expected_sum(n: int) -> int:
    return sum(i * i for i in range(n))


class SendThenIdle(Actor):
    """Sends `n` Items on "out", then sleeps forever without receiving (so only the flusher
    can send what is left in its outbox)."""

    outputs: ClassVar[dict[str, Port]] = {"out": port(Item)}

    def __init__(self, n: int = 1) -> None:
        self.n = n

    async def serve(self, ctx: ActorContext) -> None:
        for seq in range(self.n):
            await ctx.send("out", Item(seq, seq))
        await anyio.sleep_forever()
