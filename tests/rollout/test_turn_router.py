"""`RoutedEngine`: the first turn on the worker's own engine, each later turn where the
scheduler routes it, with the worker's KV report when its own engine ran the previous turn;
turn ends reported to the scheduler."""

from __future__ import annotations

import pytest

from rstar2.engine.protocol import GenerationOutput, SamplingParams
from rstar2.rollout.turn_router import RoutedEngine
from rstar2.wire import (
    EngineLoad,
    PeerGenerate,
    PeerGenerated,
    RolloutTask,
    TurnEnded,
    TurnRoute,
    TurnRouted,
)

pytestmark = pytest.mark.anyio

TASK = RolloutTask(traj_id="t0", prompt_id="p", sample=0, step=1, prompt_ids=[1, 2, 3],
                   answer="1", seed=0)  # fmt: skip
PARAMS = SamplingParams(max_tokens=5, temperature=0.7, top_p=0.9, stop_token_ids=(9,), seed=4)


class Local:
    max_model_len = 64

    def __init__(self) -> None:
        self.generated: list[str] = []
        self.aborted: list[str] = []

    async def generate(self, request_id: str, prompt_ids: list[int], params: SamplingParams):
        self.generated.append(request_id)
        return GenerationOutput(request_id, [7], [-0.5], "stop")

    async def abort(self, request_id: str) -> None:
        self.aborted.append(request_id)

    def stats(self) -> EngineLoad:
        return EngineLoad(kv_capacity_tokens=100, kv_free_tokens=60, running=2, waiting=1,
                           preemptions=0, recomputed_tokens=0, generated_tokens=0)  # fmt: skip


class Ctx:
    """Answers "route" with the next of `routes`, and "peers" with one token."""

    def __init__(self, routes: list[int]) -> None:
        self.routes = routes
        self.sent: list[tuple[str, object, int | None]] = []

    async def request(self, port: str, msg: object, *, peer: int | None = None, timeout=None):
        self.sent.append((port, msg, peer))
        if port == "route":
            return TurnRouted(engine=self.routes.pop(0))
        assert isinstance(msg, PeerGenerate)
        return PeerGenerated(msg.request_id, [8, 9], [-1.0, -2.0], "stop")

    async def send(self, port: str, msg: object) -> None:
        self.sent.append((port, msg, None))


async def test_later_turns_run_where_the_scheduler_routes_them() -> None:
    local, ctx = Local(), Ctx(routes=[1, 0])
    engine = RoutedEngine(ctx, local, 0, TASK, route=True)  # type: ignore[arg-type]
    out = await engine.generate("p/0/t0", [1, 2, 3], PARAMS)  # first turn: here, unasked
    assert out.token_ids == [7] and local.generated == ["p/0/t0"] and ctx.sent == []

    out = await engine.generate("p/0/t1", [1, 2, 3, 7, 4, 4], PARAMS)  # moved to engine 1
    (port, route, _), (peer_port, gen, peer) = ctx.sent
    assert port == "route" and isinstance(route, TurnRoute)
    assert (route.traj_id, route.turn, route.context_tokens) == ("t0", 1, 6)
    assert route.report is not None
    assert (route.report.engine, route.report.load) == (0, Local().stats())
    assert (peer_port, peer) == ("peers", 1) and isinstance(gen, PeerGenerate)
    assert (gen.prompt_ids, gen.max_tokens, gen.temperature, gen.top_p) == ([1, 2, 3, 7, 4, 4],
                                                                            5, 0.7, 0.9)  # fmt: skip
    assert (gen.stop_token_ids, gen.seed) == ([9], 4)
    assert (out.token_ids, out.logprobs, engine.moved_turns) == ([8, 9], [-1.0, -2.0], 1)
    await engine.abort("p/0/t1")  # a turn on a peer is not aborted here
    assert local.aborted == []

    await engine.generate("p/0/t2", [1] * 10, PARAMS)  # back home; no fresh report of engine 1
    route = ctx.sent[2][1]
    assert isinstance(route, TurnRoute) and route.report is None
    assert local.generated == ["p/0/t0", "p/0/t2"] and engine.moved_turns == 1


async def test_turn_ends_are_reported_with_the_own_engines_load_only() -> None:
    local, ctx = Local(), Ctx(routes=[1])
    engine = RoutedEngine(ctx, local, 0, TASK, route=True)  # type: ignore[arg-type]
    await engine.generate("p/0/t0", [1, 2, 3], PARAMS)
    await engine.turn_ended(0)
    port, ended, _ = ctx.sent[-1]
    assert port == "turns" and isinstance(ended, TurnEnded)
    assert (ended.traj_id, ended.turn, ended.report.load) == ("t0", 0, local.stats())  # type: ignore[union-attr]
    await engine.generate("p/0/t1", [1] * 6, PARAMS)  # on engine 1: no report of it here
    await engine.turn_ended(1)
    assert ctx.sent[-1][1] == TurnEnded("t0", 1, None)


async def test_without_route_every_turn_stays_and_nobody_is_asked() -> None:
    local, ctx = Local(), Ctx(routes=[])
    engine = RoutedEngine(ctx, local, 0, TASK, route=False)  # type: ignore[arg-type]
    for turn in range(3):
        await engine.generate(f"p/0/t{turn}", [1] * (3 + turn), PARAMS)
    assert ctx.sent == [] and local.generated == ["p/0/t0", "p/0/t1", "p/0/t2"]
