"""`RoutedEngine`: one trajectory's engine when the scheduler may move its later turns.

The rollout worker that runs a trajectory's agent loop hands it this object instead of its own
engine (`scheduler.move_turns` with more than one engine). The first turn runs on the worker's
own engine (the scheduler chose it). Before each later turn it asks the scheduler on the
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

from typing import Any, Protocol

from rstar2.actors import ActorContext
from rstar2.engine.protocol import EngineStats, GenerationOutput, SamplingParams
from rstar2.wire import (
    EngineReport,
    PeerGenerate,
    PeerGenerated,
    RolloutTask,
    TurnRoute,
    TurnRouted,
)

PEER_TIMEOUT_S = 3600.0
"""Longest wait for the scheduler's answer or for a peer's turn."""


def engine_report(engine: int, stats: Any) -> EngineReport:
    """Engine `engine`'s KV stats (an `EngineStats`) as the scheduler reads them."""
    return EngineReport(
        engine=engine,
        kv_capacity_tokens=stats.kv_capacity_tokens,
        kv_free_tokens=stats.kv_free_tokens,
        running=stats.running,
        waiting=stats.waiting,
        preemptions=stats.preemptions,
        recomputed_tokens=stats.recomputed_tokens,
        generated_tokens=stats.generated_tokens,
    )


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

    def stats(self) -> EngineStats: ...


class RoutedEngine:
    """One trajectory's engine: each later turn where the scheduler routes it."""

    def __init__(
        self,
        ctx: ActorContext,
        local: LocalEngine,
        index: int,
        task: RolloutTask,
        max_response_tokens: int,
    ) -> None:
        self.ctx = ctx
        self.local = local
        self.index = index
        self.task = task
        self.max_total_tokens = len(task.prompt_ids) + max_response_tokens
        self.max_model_len = local.max_model_len
        self.turn = 0
        self.engine = index
        """The engine of the latest turn."""
        self.moved_turns = 0
        """Turns generated on another worker's engine."""

    async def generate(
        self, request_id: str, prompt_ids: list[int], params: SamplingParams
    ) -> GenerationOutput:
        if self.turn > 0:
            self.engine = await self._route(len(prompt_ids))
        self.turn += 1
        if self.engine == self.index:
            return await self.local.generate(request_id, prompt_ids, params)
        self.moved_turns += 1
        msg = peer_request(request_id, prompt_ids, params)
        reply = await self.ctx.request("peers", msg, peer=self.engine, timeout=PEER_TIMEOUT_S)
        assert isinstance(reply, PeerGenerated)
        return GenerationOutput(
            reply.request_id, list(reply.token_ids), list(reply.logprobs), reply.finish_reason
        )

    async def _route(self, context_tokens: int) -> int:
        """Ask the scheduler for this turn's engine, with the previous engine's KV report when
        it is this worker's own."""
        own = self.engine == self.index
        msg = TurnRoute(
            traj_id=self.task.traj_id,
            prompt_id=self.task.prompt_id,
            turn=self.turn,
            context_tokens=context_tokens,
            prompt_tokens=len(self.task.prompt_ids),
            max_total_tokens=self.max_total_tokens,
            report=engine_report(self.index, self.local.stats()) if own else None,
        )
        reply = await self.ctx.request("route", msg, timeout=PEER_TIMEOUT_S)
        assert isinstance(reply, TurnRouted)
        return reply.engine

    async def abort(self, request_id: str) -> None:
        """Abort a turn on this engine; a turn generating on a peer runs to its end there."""
        if self.engine == self.index:
            await self.local.abort(request_id)

    def stats(self) -> EngineStats:
        return self.local.stats()
