"""A synthetic, sleep-based graph shaped like the trainer, for profiling demos and tests.

    learner.tasks -> rollout.in            (a step's batch of tasks, streamed)
    rollout.gen   -> engine.req            (request/reply: "generate")
    rollout.tool  -> sandbox.req           (request/reply: "run the tool call")
    rollout.out   -> reward.in -> learner.results

- `Learner`: per step sends `batch` tasks, waits for all results, then "updates" for
  `update_s`; after `steps` steps it stops the graph handing back per-step stage times and
  the engine's KV samples (the `result["profile"]` convention of `recording.py`);
- `Rollout`: runs every task it receives concurrently: one engine request, one sandbox
  request, then sends the trajectory on;
- `SlotService`: a request/reply service that serves `slots` requests at a time, each for
  `delay_s` (an engine whose KV budget fits `slots` sequences, or a sandbox with `slots`
  workers); it replies with its KV use (in-flight / slots, per mille);
- `SlowStage`: a stream stage that spends `delay_s` per message (a reward verifier).
All waiting is `anyio.sleep`, so the graph costs almost no CPU and behaves the same on a
shared machine. `synthetic_graph(slow=...)` makes one named actor the bottleneck.

What it does not do: anything real; it only has the trainer's shape.
"""

from __future__ import annotations

import time
from typing import Any, ClassVar

import anyio

from rstar2.actors.actor import Actor, Port, port
from rstar2.actors.context import ActorContext
from rstar2.actors.graph_config import GraphConfig, graph_config
from rstar2.actors.handling import handling
from rstar2.wire import Item

_MODULE = "rstar2.profile.synthetic"
SLOW_CHOICES = ("sandbox", "reward", "engine", "learner")


async def _traced_sleep(ctx: ActorContext, seconds: float, port: str, depth: int = 0) -> None:
    """Sleep as if handling a message, recorded as a "handle" span."""
    with handling(ctx, port, depth):
        await anyio.sleep(seconds)


class Learner(Actor):
    inputs: ClassVar[dict[str, Port]] = {"results": port(Item)}
    outputs: ClassVar[dict[str, Port]] = {"tasks": port(Item)}

    def __init__(self, steps: int = 3, batch: int = 8, update_s: float = 0.01) -> None:
        if steps < 1 or batch < 1 or update_s < 0:
            raise ValueError(
                f"need steps >= 1, batch >= 1, update_s >= 0; got {steps}, {batch}, {update_s}"
            )
        self.steps, self.batch, self.update_s = steps, batch, update_s

    async def serve(self, ctx: ActorContext) -> None:
        rows: list[dict[str, Any]] = []
        counters: list[list[Any]] = []
        for step in range(self.steps):
            t0 = time.time()
            for i in range(self.batch):
                await ctx.send("tasks", Item(step * self.batch + i))
            for _ in range(self.batch):
                msg = (await ctx.recv()).msg
                assert isinstance(msg, Item)
                counters.append(["engine", "kv_used", time.time(), msg.value / 1000])
            t1 = time.time()
            await _traced_sleep(ctx, self.update_s, "update")
            rows.append(
                {"step": step, "time_rollout_s": t1 - t0, "time_learner_s": time.time() - t1}
            )
        ctx.stop_graph("done", {"profile": {"steps": rows, "counters": counters}})


class Rollout(Actor):
    inputs: ClassVar[dict[str, Port]] = {"in": port(Item)}
    outputs: ClassVar[dict[str, Port]] = {
        "gen": port(Item, reply=Item),
        "tool": port(Item, reply=Item),
        "out": port(Item),
    }

    async def serve(self, ctx: ActorContext) -> None:
        async with anyio.create_task_group() as tg:
            while True:
                task = (await ctx.recv()).msg
                assert isinstance(task, Item)
                tg.start_soon(self._trajectory, ctx, task)

    async def _trajectory(self, ctx: ActorContext, task: Item) -> None:
        generated = await ctx.request("gen", task, timeout=60.0)
        await ctx.request("tool", task, timeout=60.0)
        assert isinstance(generated, Item)
        await ctx.send("out", Item(task.seq, generated.value))


class SlotService(Actor):
    inputs: ClassVar[dict[str, Port]] = {"req": port(Item, reply=Item)}

    def __init__(self, delay_s: float = 0.01, slots: int = 8) -> None:
        if delay_s < 0 or slots < 1:
            raise ValueError(f"need delay_s >= 0 and slots >= 1, got {delay_s}, {slots}")
        self.delay_s, self.slots = delay_s, slots
        self.in_flight = 0
        self.waiting = 0

    async def serve(self, ctx: ActorContext) -> None:
        limiter = anyio.CapacityLimiter(self.slots)
        async with anyio.create_task_group() as tg:
            while True:
                incoming = await ctx.recv()
                self.waiting += 1
                tg.start_soon(self._serve_one, ctx, incoming, limiter)

    async def _serve_one(self, ctx: ActorContext, incoming: Any, limiter: Any) -> None:
        async with limiter:
            self.waiting -= 1
            self.in_flight += 1
            kv_permille = 1000 * self.in_flight // self.slots
            await _traced_sleep(ctx, self.delay_s, incoming.port, self.waiting)
            self.in_flight -= 1
        await ctx.reply(incoming, Item(incoming.msg.seq, kv_permille))


class SlowStage(Actor):
    inputs: ClassVar[dict[str, Port]] = {"in": port(Item)}
    outputs: ClassVar[dict[str, Port]] = {"out": port(Item)}

    def __init__(self, delay_s: float = 0.002) -> None:
        if delay_s < 0:
            raise ValueError(f"delay_s must be >= 0, got {delay_s}")
        self.delay_s = delay_s

    async def serve(self, ctx: ActorContext) -> None:
        while True:
            incoming = await ctx.recv()
            await _traced_sleep(ctx, self.delay_s, incoming.port, ctx.tracer.stats.queue_depth)
            await ctx.send("out", incoming.msg)


def synthetic_graph(
    slow: str | None = None, *, steps: int = 3, batch: int = 8, slow_s: float = 0.03
) -> GraphConfig:
    """The synthetic graph, with actor `slow` (one of SLOW_CHOICES, or None) made the
    bottleneck: about `steps * batch * slow_s` seconds of serial work lands on it."""
    if slow is not None and slow not in SLOW_CHOICES:
        raise ValueError(f"slow must be one of {SLOW_CHOICES} or None, got {slow!r}")
    gen = {"delay_s": slow_s if slow == "engine" else 0.005, "slots": 1 if slow == "engine" else 8}
    tool = {
        "delay_s": slow_s if slow == "sandbox" else 0.003,
        "slots": 1 if slow == "sandbox" else 8,
    }
    update = slow_s * batch if slow == "learner" else 0.005
    return graph_config(
        {
            "name": f"synthetic-{slow or 'balanced'}",
            "edges": [
                "learner.tasks -> rollout.in",
                "rollout.gen -> engine.req",
                "rollout.tool -> sandbox.req",
                "rollout.out -> reward.in",
                "reward.out -> learner.results",
            ],
            "actors": [
                {
                    "name": "learner",
                    "cls": f"{_MODULE}:Learner",
                    "params": {"steps": steps, "batch": batch, "update_s": update},
                },
                {"name": "rollout", "cls": f"{_MODULE}:Rollout", "count": 2},
                {"name": "engine", "cls": f"{_MODULE}:SlotService", "params": gen},
                {"name": "sandbox", "cls": f"{_MODULE}:SlotService", "params": tool},
                {
                    "name": "reward",
                    "cls": f"{_MODULE}:SlowStage",
                    "params": {"delay_s": slow_s if slow == "reward" else 0.001},
                },
            ],
        }
    )
