"""The scheduler actor of the live graph: routes each trajectory to a rollout worker.

It receives a step's trajectories as one `RolloutBatch` on ``tasks``, asks every rollout worker
for its KV stats once at start (``report``), and starts each trajectory the `Dispatcher` admits
as a request on ``assign`` to the chosen worker (`peer=engine`). The reply is the finished
trajectory: its stats refresh the policy's view, the policy releases it, it goes on to the
reward actor on ``done``, and queued trajectories are admitted. With `move_turns`, rollout
workers ask on ``route`` where each later turn should run (`Dispatcher.route`).

Its own work (admitting a batch, releasing a finished trajectory) is recorded for the profiler
as handle spans (`rstar2.actors.handling`, ports "tasks", "assign" and "route").

What it does not do: any routing decision itself (the policy, through `Dispatcher`).
"""

from __future__ import annotations

import logging
from typing import ClassVar

import anyio
import anyio.abc

from rstar2.actors import Actor, ActorContext, Port, port
from rstar2.actors.handling import handling
from rstar2.config import from_dict
from rstar2.scheduler import SchedulerConfig, make_policy
from rstar2.scheduler.dispatcher import Dispatcher
from rstar2.wire import (
    EngineReport,
    EngineReportRequest,
    RolloutBatch,
    RolloutTask,
    TrajectoryResult,
    TurnRoute,
    TurnRouted,
)

log = logging.getLogger(__name__)


class SchedulerActor(Actor):
    inputs: ClassVar[dict[str, Port]] = {
        "tasks": port(RolloutBatch),
        "route": port(TurnRoute, reply=TurnRouted),
    }
    outputs: ClassVar[dict[str, Port]] = {
        "assign": port(RolloutTask, reply=TrajectoryResult),
        "report": port(EngineReportRequest, reply=EngineReport),
        "done": port(TrajectoryResult),
    }

    def __init__(
        self,
        scheduler: dict | None = None,
        max_response_tokens: int = 1024,
        rollout_timeout_s: float = 3600.0,
    ) -> None:
        self.cfg = from_dict(SchedulerConfig, scheduler or {})
        self.max_response_tokens = max_response_tokens
        self.rollout_timeout_s = rollout_timeout_s

    async def serve(self, ctx: ActorContext) -> None:
        engines = ctx.peers("assign")
        dispatcher = Dispatcher(make_policy(self.cfg, engines), self.max_response_tokens)
        for engine in range(engines):
            report = await ctx.request("report", EngineReportRequest(), peer=engine, timeout=120.0)
            assert isinstance(report, EngineReport)
            dispatcher.report(report)
        log.info("scheduler: policy %s over %d engine(s)", self.cfg.policy, engines)
        async with anyio.create_task_group() as tg:
            while True:
                incoming = await ctx.recv()
                if isinstance(incoming.msg, TurnRoute):
                    with handling(ctx, "route"):
                        engine = dispatcher.route(incoming.msg)
                    await ctx.reply(incoming, TurnRouted(engine=engine))
                    continue
                assert isinstance(incoming.msg, RolloutBatch)
                with handling(ctx, "tasks"):
                    admitted = dispatcher.submit(list(incoming.msg.tasks))
                for engine, task in admitted:
                    tg.start_soon(self._run, ctx, tg, dispatcher, engine, task)

    async def _run(
        self,
        ctx: ActorContext,
        tg: anyio.abc.TaskGroup,
        dispatcher: Dispatcher,
        engine: int,
        task: RolloutTask,
    ) -> None:
        result = await ctx.request("assign", task, peer=engine, timeout=self.rollout_timeout_s)
        assert isinstance(result, TrajectoryResult)
        with handling(ctx, "assign"):
            admitted = dispatcher.finish(result)
        for next_engine, next_task in admitted:
            tg.start_soon(self._run, ctx, tg, dispatcher, next_engine, next_task)
        await ctx.send("done", result)
