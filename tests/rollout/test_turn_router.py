"""`RoutedEngine`: the first turn on the worker's own engine, each later turn where the
scheduler routes it, with the worker's KV report when its own engine ran the previous turn."""

from __future__ import annotations

import pytest

from rstar2.engine.protocol import EngineStats, GenerationOutput, SamplingParams
from rstar2.rollout.turn_router import RoutedEngine
from rstar2.wire import PeerGenerate, PeerGenerated, RolloutTask, TurnRoute, TurnRouted

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

    def stats(self) -> EngineStats:
        return EngineStats(kv_capacity_tokens=100, kv_free_tokens=60, running=2, waiting=1,
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


async def test_later_turns_run_where_the_scheduler_routes_them() -> None:
    local, ctx = Local(), Ctx(routes=[1, 0])
    engine = RoutedEngine(ctx, local, 0, TASK, max_response_tokens=20)  # type: ignore[arg-type]
    out = await engine.generate("p/0/t0", [1, 2, 3], PARAMS)  # first turn: here, unasked
    assert out.token_ids == [7] and local.generated == ["p/0/t0"] and ctx.sent == []

    out = await engine.generate("p/0/t1", [1, 2, 3, 7, 4, 4], PARAMS)  # moved to engine 1
    (port, route, _), (peer_port, gen, peer) = ctx.sent
    assert port == "route" and isinstance(route, TurnRoute)
    assert (route.turn, route.context_tokens, route.prompt_tokens, route.max_total_tokens) == (
        1,
        6,
        3,
        23,
    )
    assert route.report is not None
    assert (route.report.engine, route.report.kv_free_tokens) == (0, 60)
    assert (route.report.running, route.report.waiting) == (2, 1)
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
