"""The scheduler actor of the live graph: routes each trajectory to a rollout worker.

It receives a step's trajectories as one `RolloutBatch` on ``tasks``, asks every rollout worker
for its KV stats once at start (``report``), and starts each trajectory the `Dispatcher` admits
as a request on ``assign`` to the chosen worker (`peer=engine`). The reply is the finished
trajectory: its stats refresh the policy's view, the policy releases it, it goes on to the
reward actor on ``done``, and queued trajectories are admitted. Rollout workers tell it on
``turns`` when a turn ended in a tool call and, with `move_turns`, ask on ``route`` where each
later turn should run. Every decision is `LiveDispatch`'s (the dispatch core's, shared with the
simulator); this module only moves messages, on the service primitive
(`rstar2.actors.service.Service`: the three input ports inline, in arrival order; a route
request for a trajectory the scheduler does not know is answered as an error and the
scheduler goes on).

Its own work (admitting a batch, releasing a finished trajectory) is recorded for the profiler
as handle spans (`rstar2.actors.handling`, ports "tasks", "assign", "route" and "turns").

What it does not do: any routing decision itself (the policy, through the dispatch core).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import ClassVar

from rstar2.actors import Actor, ActorContext, Port, port
from rstar2.actors.handling import handling
from rstar2.actors.service import Route, Service
from rstar2.config import require
from rstar2.scheduler import SchedulerConfig, make_policy
from rstar2.scheduler.dispatcher import Dispatcher
from rstar2.scheduler.live import LiveDispatch, Start
from rstar2.wire import (
    EngineReport,
    EngineReportRequest,
    RolloutBatch,
    RolloutTask,
    TrajectoryResult,
    TurnEnded,
    TurnRoute,
    TurnRouted,
)

log = logging.getLogger(__name__)


@dataclass
class SchedulerParams:
    """The scheduler actor's parameters (the graph's `params` table for it)."""

    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    """The routing policy and its knobs."""
    max_response_tokens: int = 1024
    """Response budget of a task that does not set its own (`RolloutTask.max_response_tokens`)."""
    rollout_timeout_s: float = 3600.0
    """Longest wait for one trajectory's result from a rollout worker."""

    def validate(self) -> None:
        require(
            self.max_response_tokens >= 1, "max_response_tokens", self.max_response_tokens, ">= 1"
        )
        require(self.rollout_timeout_s > 0, "rollout_timeout_s", self.rollout_timeout_s, "> 0")


class SchedulerActor(Actor):
    inputs: ClassVar[dict[str, Port]] = {
        "tasks": port(RolloutBatch),
        "route": port(TurnRoute, reply=TurnRouted),
        "turns": port(TurnEnded),
    }
    outputs: ClassVar[dict[str, Port]] = {
        "assign": port(RolloutTask, reply=TrajectoryResult),
        "report": port(EngineReportRequest, reply=EngineReport),
        "done": port(TrajectoryResult),
    }

    Params = SchedulerParams

    def __init__(self, params: SchedulerParams) -> None:
        self.cfg = params.scheduler
        self.max_response_tokens = params.max_response_tokens
        self.rollout_timeout_s = params.rollout_timeout_s

    async def serve(self, ctx: ActorContext) -> None:
        engines = ctx.peers("assign")
        policy = make_policy(self.cfg, engines)
        core = Dispatcher(policy, move_turns=self.cfg.move_turns)
        live = LiveDispatch(core, self.max_response_tokens)
        for engine in range(engines):
            report = await ctx.request("report", EngineReportRequest(), peer=engine, timeout=120.0)
            assert isinstance(report, EngineReport)
            live.report(report)
        log.info("scheduler: policy %s over %d engine(s)", self.cfg.policy, engines)

        async def tasks(msg: RolloutBatch) -> None:
            start(live.batch(msg))

        async def turns(msg: TurnEnded) -> None:
            start(live.turn_ended(msg))

        async def route(msg: TurnRoute) -> TurnRouted:
            engine, starts = live.route(msg)
            start(starts)
            return TurnRouted(engine=engine)

        async def run(engine: int, task: RolloutTask) -> None:
            result = await ctx.request("assign", task, peer=engine, timeout=self.rollout_timeout_s)
            assert isinstance(result, TrajectoryResult)
            with handling(ctx, "assign"):
                starts = live.finished(result)
            start(starts)
            await ctx.send("done", result)

        def start(starts: list[Start]) -> None:
            for engine, task in starts:
                service.spawn(run, engine, task)

        service = Service(
            ctx,
            {  # decisions are quick and must see events in order: all inline
                "tasks": Route(tasks, concurrent=False),
                "turns": Route(turns, concurrent=False),
                "route": Route(route, concurrent=False, survives=(ValueError,)),
            },
        )
        await service.serve()
