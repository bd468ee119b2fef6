"""`RoutedEngine`: one trajectory's engine as the scheduler sees it.

The rollout worker that runs a trajectory's agent loop hands it this object instead of its own
engine. When a turn ends in a tool call it tells the scheduler on the worker's "turns" port
(`TurnEnded`, with the engine's KV report), so the scheduler's policy closes the turn while the
tool runs. The first turn runs on the worker's own engine (the scheduler chose it). With
`scheduler.move_turns` and more than one engine (`route`), before each later turn it asks the
scheduler on the
worker's "route" port (`TurnRoute` -> `TurnRouted`, carrying the worker's engine's fresh KV
report when that engine ran the previous turn) and runs the turn there: on its own engine, or
on another worker's over the "peers" port (`PeerGenerate` -> `PeerGenerated`; "peers" reaches
every rollout worker by index, and the whole context is prefilled on the peer).
`peer_request` / `peer_params` map sampling parameters to and from that message, and
`engine_report` is the worker's engine report, here and on its "report" port.

What it does not do: decide where a turn goes (the scheduler's policy), or keep any trajectory
state (the agent loop does; only tokens cross to the peer).
"""

from __future__ import annotations

from typing import Protocol

from rstar2.actors import ActorContext
from rstar2.engine.protocol import GenerationOutput, SamplingParams
from rstar2.wire import (
    EngineLoad,
    EngineReport,
    PeerGenerate,
    PeerGenerated,
    RolloutTask,
    TurnEnded,
    TurnRoute,
    TurnRouted,
)

PEER_TIMEOUT_S = 3600.0
"""Longest wait for the scheduler's answer or for a peer's turn."""


def engine_report(engine: int, stats: EngineLoad) -> EngineReport:
    """Engine `engine`'s load as the scheduler reads it."""
    return EngineReport(engine, stats)


def peer_request(request_id: str, prompt_ids: list[int], params: SamplingParams) -> PeerGenerate:
    """One turn's generation for a peer's engine (`peer_params` reads it back)."""
    return PeerGenerate(
        request_id, prompt_ids, params.max_tokens, params.temperature, params.top_p,
        list(params.stop_token_ids), params.seed,
    )  # fmt: skip


def peer_params(msg: PeerGenerate) -> SamplingParams:
    """The sampling parameters a `PeerGenerate` carries."""
    return SamplingParams(
        max_tokens=msg.max_tokens,
        temperature=msg.temperature,
        top_p=msg.top_p,
        stop_token_ids=tuple(msg.stop_token_ids),
        seed=msg.seed,
    )


class LocalEngine(Protocol):
    """The worker's own engine as the agent loops see it."""

    max_model_len: int

    async def generate(
        self, request_id: str, prompt_ids: list[int], params: SamplingParams
    ) -> GenerationOutput: ...

    async def abort(self, request_id: str) -> None: ...

    def stats(self) -> EngineLoad: ...


class RoutedEngine:
    """One trajectory's engine as the scheduler sees it: tells it when a turn ends in a tool
    call and, when `route`, runs each later turn where the scheduler says."""

    def __init__(
        self,
        ctx: ActorContext,
        local: LocalEngine,
        index: int,
        task: RolloutTask,
        route: bool,
    ) -> None:
        self.ctx = ctx
        self.local = local
        self.index = index
        self.task = task
        self.route = route
        self.max_model_len = local.max_model_len
        self.turn = 0
        self.engine = index
        """The engine of the latest turn."""
        self.moved_turns = 0
        """Turns generated on another worker's engine."""

    async def generate(
        self, request_id: str, prompt_ids: list[int], params: SamplingParams
    ) -> GenerationOutput:
        if self.turn > 0 and self.route:
            self.engine = await self._route(len(prompt_ids))
        self.turn += 1
        if self.engine == self.index:
            return await self.local.generate(request_id, prompt_ids, params)
        self.moved_turns += 1
        msg = peer_request(request_id, prompt_ids, params)
        reply = await self.ctx.request("peers", msg, peer=self.engine, timeout=PEER_TIMEOUT_S)
        assert isinstance(reply, PeerGenerated)
        return GenerationOutput(
            reply.request_id,
            list(reply.token_ids),
            list(reply.logprobs),
            reply.finish_reason,
            reply.policy_version,
        )

    async def turn_ended(self, turn: int) -> None:
        """Turn `turn` ended in a tool call: tell the scheduler (`TurnEnded`), with this worker's
        engine report when its own engine ran the turn."""
        await self.ctx.send("turns", TurnEnded(self.task.traj_id, turn, self._own_report()))

    async def _route(self, context_tokens: int) -> int:
        """Ask the scheduler for this turn's engine, with the previous engine's KV report when
        it is this worker's own."""
        msg = TurnRoute(self.task.traj_id, self.turn, context_tokens, self._own_report())
        reply = await self.ctx.request("route", msg, timeout=PEER_TIMEOUT_S)
        assert isinstance(reply, TurnRouted)
        return reply.engine

    def _own_report(self) -> EngineReport | None:
        if self.engine != self.index:
            return None
        return engine_report(self.index, self.local.stats())

    async def abort(self, request_id: str) -> None:
        """Abort a turn on this engine; a turn generating on a peer runs to its end there."""
        if self.engine == self.index:
            await self.local.abort(request_id)

    def stats(self) -> EngineLoad:
        return self.local.stats()
