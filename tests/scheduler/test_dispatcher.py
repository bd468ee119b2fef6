"""The live scheduler's FIFO admission in front of a policy."""

from __future__ import annotations

import pytest

from rstar2.scheduler import Policy, SchedulerConfig, TurnRequest, make_policy
from rstar2.scheduler.dispatcher import Dispatcher
from rstar2.wire import EngineReport, RolloutTask, TrajectoryResult, TurnRoute


def task(i: int, prompt_len: int = 10) -> RolloutTask:
    return RolloutTask(
        traj_id=f"t{i}",
        prompt_id="p",
        sample=i,
        step=1,
        prompt_ids=[1] * prompt_len,
        answer="1",
        seed=i,
    )


def report(engine: int, free: int) -> EngineReport:
    """A report of an engine of 100 KV tokens with nothing running or waiting."""
    return EngineReport(engine, 100, free, 0, 0, 0, 0, 0)


def finished(t: RolloutTask, engine: int, free: int) -> TrajectoryResult:
    return TrajectoryResult(
        traj_id=t.traj_id,
        prompt_id=t.prompt_id,
        sample=t.sample,
        step=1,
        kind="train",
        answer="1",
        token_ids=[1] * 20,
        loss_mask=[0] * 20,
        logprobs=[0.0] * 20,
        prompt_len=10,
        response_text="",
        turns=1,
        tool_calls=0,
        tool_errors=0,
        tool_timeouts=0,
        answer_tags=0,
        finish_reason="no_tool_call",
        engine=engine,
        kv_capacity_tokens=100,
        kv_free_tokens=free,
        running=0,
        waiting=0,
        preemptions=0,
    )


def test_kv_aware_holds_until_room_and_keeps_fifo() -> None:
    policy = make_policy(SchedulerConfig(policy="kv_aware", reservation="max"), 1)
    d = Dispatcher(policy, max_response_tokens=40)
    d.report(report(0, free=100))
    started = d.submit([task(i) for i in range(4)])
    # each reservation is 10 + 40 = 50 tokens: two fit in 100
    assert [t.traj_id for _, t in started] == ["t0", "t1"]
    assert [t.traj_id for t in d.queue] == ["t2", "t3"]
    more = d.finish(finished(started[0][1], 0, free=50))
    assert [t.traj_id for _, t in more] == ["t2"]
    assert set(d.in_flight) == {"t1", "t2"}


def test_round_robin_spreads() -> None:
    d = Dispatcher(make_policy(SchedulerConfig(policy="round_robin"), 2), 40)
    started = d.submit([task(i) for i in range(4)])
    assert [e for e, _ in started] == [0, 1, 0, 1]


def test_oversized_reservation_goes_to_an_idle_engine_instead_of_waiting_forever() -> None:
    policy = make_policy(SchedulerConfig(policy="kv_aware", reservation="max"), 1)
    d = Dispatcher(policy, max_response_tokens=500)
    d.report(report(0, free=100))
    started = d.submit([task(0), task(1)])
    assert [t.traj_id for _, t in started] == ["t0"]  # the idle engine takes one, not both
    assert [t.traj_id for _, t in d.finish(finished(started[0][1], 0, free=100))] == ["t1"]


def route(t: RolloutTask, turn: int, context: int, engine: int = -1, free: int = 0) -> TurnRoute:
    return TurnRoute(
        traj_id=t.traj_id, prompt_id=t.prompt_id, turn=turn, context_tokens=context,
        prompt_tokens=len(t.prompt_ids), max_total_tokens=50,
        report=report(engine, free) if engine >= 0 else None,
    )  # fmt: skip


def test_route_asks_the_policy_for_each_later_turn() -> None:
    d = Dispatcher(make_policy(SchedulerConfig(policy="round_robin"), 2), max_response_tokens=40)
    t = task(0)
    assert d.submit([t]) == [(0, t)]
    assert d.route(route(t, 1, 30)) == 1  # round robin: every turn to the next engine
    assert d.in_flight["t0"] == 1
    assert d.route(route(t, 2, 40)) == 0


def test_route_moves_a_kv_aware_turn_off_an_engine_holding_much_more_kv() -> None:
    policy = make_policy(SchedulerConfig(policy="kv_aware", predicted_scale=1.0), 2)
    d = Dispatcher(policy, max_response_tokens=40)
    for e in (0, 1):
        d.report(report(e, free=100))
    t = task(0)
    assert d.submit([t]) == [(0, t)]
    # The worker reports its engine with each question: 1 token of KV in use is within
    # 1.3 x 0 + 100 // 50 = 2 of the empty engine 1, so the turn stays; 25 tokens is not.
    assert d.route(route(t, 1, 30, engine=0, free=99)) == 0
    assert d.route(route(t, 2, 40, engine=0, free=75)) == 1
    assert policy.stats[0].kv_free_tokens == 75 and d.in_flight["t0"] == 1


class Holder(Policy):
    """Admits to engine 0, then holds every later turn."""

    def assign(self, req: TurnRequest) -> int | None:
        return 0 if req.turn == 0 else None


def test_a_held_later_turn_continues_where_the_trajectory_runs() -> None:
    d = Dispatcher(Holder(2), max_response_tokens=40)
    t = task(0)
    d.submit([t])
    assert d.route(route(t, 1, 30)) == 0


def test_route_refuses_a_first_turn_or_an_unknown_trajectory() -> None:
    d = Dispatcher(make_policy(SchedulerConfig(policy="round_robin"), 2), max_response_tokens=40)
    t = task(0)
    with pytest.raises(ValueError, match="not in flight"):
        d.route(route(t, 1, 30))
    d.submit([t])
    with pytest.raises(ValueError, match="later turns"):
        d.route(route(t, 0, 10))
