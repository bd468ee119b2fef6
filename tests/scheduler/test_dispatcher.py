"""The live scheduler's FIFO admission in front of a policy."""

from __future__ import annotations

from rstar2.scheduler import SchedulerConfig, make_policy
from rstar2.scheduler.dispatcher import Dispatcher
from rstar2.wire import EngineReport, RolloutTask, TrajectoryResult


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
    d.report(
        EngineReport(
            engine=0,
            kv_capacity_tokens=100,
            kv_free_tokens=100,
            running=0,
            waiting=0,
            preemptions=0,
            recomputed_tokens=0,
            generated_tokens=0,
        )
    )
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
    d.report(
        EngineReport(
            engine=0,
            kv_capacity_tokens=100,
            kv_free_tokens=100,
            running=0,
            waiting=0,
            preemptions=0,
            recomputed_tokens=0,
            generated_tokens=0,
        )
    )
    started = d.submit([task(0), task(1)])
    assert [t.traj_id for _, t in started] == ["t0"]  # the idle engine takes one, not both
    assert [t.traj_id for _, t in d.finish(finished(started[0][1], 0, free=100))] == ["t1"]
