"""The live scheduler's decisions from wire messages, and their equivalence with the simulator's:
a simulated step's recorded dispatch events, replayed as the messages the live scheduler actor
receives, give the same placements and leave the policy in the same state."""

from __future__ import annotations

import copy

import pytest

from rstar2.scheduler import POLICY_NAMES, SchedulerConfig, make_policy
from rstar2.scheduler.dispatcher import Dispatcher, Event, NewTrajectory
from rstar2.scheduler.live import LiveDispatch, Start
from rstar2.wire import (
    EngineLoad,
    EngineReport,
    Message,
    RolloutBatch,
    RolloutTask,
    TrajectoryResult,
    TurnEnded,
    TurnRoute,
    decode,
    encode,
)
from sim.config import SimConfig, build
from sim.workload import WorkloadConfig
from tests.trajectories import trajectory


def task(traj_id: str, prompt_id: str, prompt: int, budget: int) -> RolloutTask:
    return RolloutTask(
        traj_id=traj_id, prompt_id=prompt_id, sample=0, step=1, prompt_ids=[1] * prompt,
        answer="1", seed=0, max_response_tokens=budget,
    )  # fmt: skip


def result(
    traj_id: str, prompt: int, response: int, engine: int = -1, free: int = 0
) -> TrajectoryResult:
    return TrajectoryResult(
        traj_id=traj_id,
        step=1,
        kind="train",
        answer="1",
        trajectory=trajectory(
            prompt_id="p",
            token_ids=[1] * (prompt + response),
            loss_mask=[0] * (prompt + response),
            logprobs=[0.0] * (prompt + response),
            prompt_len=prompt,
        ),
        engine=engine,
        load=EngineLoad(100, free, 0, 0) if engine >= 0 else None,
    )


def live(policy: str, engines: int, **cfg: object) -> LiveDispatch:
    config = SchedulerConfig(policy=policy, **cfg)  # type: ignore[arg-type]
    core = Dispatcher(make_policy(config, engines), move_turns=config.move_turns)
    return LiveDispatch(core, max_response_tokens=40)


def ids(started: list[Start]) -> list[tuple[str, int]]:
    return [(t.traj_id, e) for e, t in started]


def test_a_batch_starts_tasks_and_a_result_admits_the_next() -> None:
    s = live("kv_aware", 1, reservation="max")
    s.report(EngineReport(0, EngineLoad(100, 100, 0, 0)))
    tasks = [task(f"t{i}", "p", 10, 0) for i in range(3)]  # budget 0: the default 40
    assert ids(s.batch(RolloutBatch(1, tasks))) == [("t0", 0), ("t1", 0)]
    assert ids(s.finished(result("t0", 10, 5, engine=0, free=50))) == [("t2", 0)]
    assert s.dispatcher.predictor.mean == 5


def test_live_counters_return_to_zero_after_a_step() -> None:
    # The bug this core fixed: the live scheduler never closed turns, so with 2 engines and 6
    # trajectories least_outstanding's counters read [3, 3] after the step, not [0, 0].
    s = live("least_outstanding", 2)
    s.batch(RolloutBatch(1, [task(f"t{i}", "p", 10, 40) for i in range(6)]))
    for i in range(6):
        s.turn_ended(TurnEnded(f"t{i}", 0, EngineReport(i % 2, EngineLoad(100, 90, 1, 0))))
        engine, _ = s.route(TurnRoute(f"t{i}", 1, 20))
        assert engine == i % 2  # sticky
    assert s.dispatcher.policy.outstanding == [3, 3]  # type: ignore[attr-defined]
    for i in range(6):
        s.finished(result(f"t{i}", 10, 15, engine=i % 2, free=80))
    assert s.dispatcher.policy.outstanding == [0, 0]  # type: ignore[attr-defined]


# --- replay: the simulator's dispatch events through the live scheduler's message handling ---


def message(event: Event, budgets: dict[str, int]) -> Message:
    """The message the live scheduler actor receives for a recorded dispatch event."""
    if event.kind == "submit":
        (trajs,) = event.args
        assert isinstance(trajs, tuple)
        tasks = []
        for t in trajs:
            assert isinstance(t, NewTrajectory)
            budgets[t.traj_id] = t.prompt_tokens
            tasks.append(
                task(t.traj_id, t.prompt_id, t.prompt_tokens, t.max_total_tokens - t.prompt_tokens)
            )
        return RolloutBatch(1, tasks)
    if event.kind == "report":
        engine, load = event.args
        return EngineReport(engine, load)  # type: ignore[arg-type]
    if event.kind == "turn_end":
        traj_id, turn = event.args
        return TurnEnded(traj_id, turn)  # type: ignore[arg-type]
    if event.kind == "next_turn":
        traj_id, turn, context = event.args
        return TurnRoute(traj_id, turn, context)  # type: ignore[arg-type]
    assert event.kind == "finish"
    traj_id, response = event.args
    return result(traj_id, budgets[traj_id], response)  # type: ignore[arg-type]


def deliver(s: LiveDispatch, msg: Message) -> list[tuple[str, int, int]]:
    """Hand one message to the live scheduler, as its actor does; the placements it made."""
    msg = decode(encode(msg))  # as it crossed the wire
    routed: list[tuple[str, int, int]] = []
    if isinstance(msg, RolloutBatch):
        started = s.batch(msg)
    elif isinstance(msg, EngineReport):
        started = s.report(msg)
    elif isinstance(msg, TurnEnded):
        started = s.turn_ended(msg)
    elif isinstance(msg, TurnRoute):
        engine, started = s.route(msg)
        routed = [(msg.traj_id, engine, msg.turn)]
    else:
        assert isinstance(msg, TrajectoryResult)
        started = s.finished(msg)
    return routed + [(t.traj_id, e, 0) for e, t in started]


def policy_state(policy: object) -> dict[str, object]:
    return {k: v for k, v in vars(policy).items() if k != "stats"}


@pytest.mark.parametrize("policy", POLICY_NAMES)
@pytest.mark.parametrize("move_turns", [True, False])
def test_live_dispatch_replays_the_simulators_decisions(policy: str, move_turns: bool) -> None:
    # A small step under KV pressure (3 engines of 24K tokens, 48 trajectories of up to ~4K
    # tokens with tool calls): kv_aware holds and moves turns, the sticky policies guard.
    cfg = SimConfig(
        gpus=3,
        kv_tokens=24_000,
        seed=5,
        workload=WorkloadConfig(
            prompts=6, rollouts=8, max_response_tokens=4096, tool_calls_mean=2.0
        ),
        scheduler=SchedulerConfig(policy=policy, move_turns=move_turns),  # type: ignore[arg-type]
    )
    sim = build(cfg)
    start = copy.deepcopy(sim.core.predictor)
    sim.core.record = True
    sim.run()
    events = sim.core.events
    kinds = {e.kind for e in events}
    assert {"submit", "report", "turn_end", "finish"} <= kinds
    assert ("next_turn" in kinds) == move_turns

    def fresh() -> Dispatcher:
        d = Dispatcher(make_policy(cfg.scheduler, 3), move_turns=move_turns)
        d.predictor = copy.deepcopy(start)  # the simulated step's warm start
        return d

    # The log replayed through the core as the simulator calls it, and through the live
    # scheduler's message handling: the same placements, the same policy state after each event.
    direct, replica = fresh(), fresh()
    s = LiveDispatch(replica, max_response_tokens=4096)
    budgets: dict[str, int] = {}
    for event in events:
        want = [(p.traj_id, p.engine, p.turn) for p in event.placements]
        again = getattr(direct, event.kind)(*event.args)
        assert [(p.traj_id, p.engine, p.turn) for p in again] == want, event
        assert deliver(s, message(event, budgets)) == want, event
        assert policy_state(replica.policy) == policy_state(direct.policy), event
    assert policy_state(replica.policy) == policy_state(sim.policy)
    assert not replica.running and not replica.queue
