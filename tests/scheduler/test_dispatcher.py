"""The dispatch core: FIFO admission in front of a policy, turn ends, later turns, finishes."""

from __future__ import annotations

import pytest

from rstar2.scheduler import Policy, SchedulerConfig, TurnRequest, make_policy
from rstar2.scheduler.dispatcher import Dispatcher, NewTrajectory, Placement
from rstar2.scheduler.length_predictor import LengthPredictor
from rstar2.wire import EngineLoad


def traj(i: int, prompt: int = 10, budget: int = 40, prompt_id: str = "p") -> NewTrajectory:
    return NewTrajectory(f"t{i}", prompt_id, prompt, prompt + budget)


def load(free: int, capacity: int = 100) -> EngineLoad:
    """An engine of `capacity` KV tokens with nothing running or waiting."""
    return EngineLoad(capacity, free, 0, 0)


def core(policy: str, engines: int, **cfg: object) -> Dispatcher:
    config = SchedulerConfig(policy=policy, **cfg)  # type: ignore[arg-type]
    return Dispatcher(make_policy(config, engines), move_turns=config.move_turns)


def starts(placements: list[Placement]) -> list[tuple[str, int]]:
    return [(p.traj_id, p.engine) for p in placements]


def test_kv_aware_holds_until_room_and_keeps_fifo() -> None:
    d = core("kv_aware", 1, reservation="max")
    d.report(0, load(100))
    # each reservation is 10 + 40 = 50 tokens: two fit in 100
    assert starts(d.submit([traj(i) for i in range(4)])) == [("t0", 0), ("t1", 0)]
    assert [t.traj_id for t in d.queue] == ["t2", "t3"]
    assert starts(d.finish("t0", 10)) == [("t2", 0)]
    assert set(d.running) == {"t1", "t2"}


def test_round_robin_spreads() -> None:
    d = core("round_robin", 2)
    assert [p.engine for p in d.submit([traj(i) for i in range(4)])] == [0, 1, 0, 1]


def test_oversized_reservation_goes_to_an_idle_engine_instead_of_waiting_forever() -> None:
    d = core("kv_aware", 1, reservation="max")
    d.report(0, load(100))
    placed = d.submit([traj(0, budget=500), traj(1, budget=500)])
    assert starts(placed) == [("t0", 0)]  # the idle engine takes one, not both
    assert starts(d.finish("t0", 10)) == [("t1", 0)]


def test_a_report_showing_free_kv_admits_what_was_held() -> None:
    d = core("kv_aware", 1, reservation="predicted", predicted_scale=1.0)
    d.predictor.observe(20)  # predicted total 10 + 20 = 30 tokens per trajectory
    d.report(0, load(100))
    assert starts(d.submit([traj(0)])) == [("t0", 0)]
    d.report(0, load(20))  # the ledger has room, the engine's blocks do not: held
    assert d.submit([traj(1)]) == [] and len(d.queue) == 1
    assert d.report(0, load(90)) == [Placement("t1", 0, 0)]


def test_later_turns_ask_the_policy_and_the_first_placement_is_the_turn() -> None:
    d = core("round_robin", 2)
    d.submit([traj(0), traj(1)])
    placed = d.next_turn("t0", 1, 30)  # round robin: every turn to the next engine
    assert placed == [Placement("t0", 0, 1)]
    assert d.engine_of("t0") == 0 and d.next_turn("t0", 2, 40) == [Placement("t0", 1, 2)]


def test_without_move_turns_later_turns_stay_and_the_policy_is_not_asked() -> None:
    d = core("round_robin", 2, move_turns=False)
    d.submit([traj(0)])
    assert not d.asks_later_turns
    assert d.next_turn("t0", 1, 30) == [Placement("t0", 0, 1)]
    assert d.policy._next == 1  # type: ignore[attr-defined]  # asked once, for the first turn


def test_route_moves_a_kv_aware_turn_off_an_engine_holding_much_more_kv() -> None:
    d = core("kv_aware", 2, predicted_scale=1.0)
    for e in (0, 1):
        d.report(e, load(100))
    assert starts(d.submit([traj(0)])) == [("t0", 0)]
    # 1 token of KV in use is within 1.3 x 0 + 100 // 50 = 2 of the empty engine 1, so the turn
    # stays; 25 tokens is not.
    d.report(0, load(99))
    assert d.next_turn("t0", 1, 30)[0].engine == 0
    d.report(0, load(75))
    assert d.next_turn("t0", 2, 40)[0].engine == 1


class Holder(Policy):
    """Admits to engine 0, then holds every later turn."""

    def assign(self, req: TurnRequest) -> int | None:
        return 0 if req.turn == 0 else None


def test_a_held_later_turn_continues_where_the_trajectory_runs() -> None:
    d = Dispatcher(Holder(2))
    d.submit([traj(0)])
    assert d.next_turn("t0", 1, 30) == [Placement("t0", 0, 1)]


def test_bad_events_are_refused_with_the_trajectory_named() -> None:
    d = core("round_robin", 2)
    with pytest.raises(ValueError, match="'t0' is not running"):
        d.next_turn("t0", 1, 30)
    with pytest.raises(ValueError, match="'t0' is not running"):
        d.finish("t0", 3)
    d.submit([traj(0)])
    with pytest.raises(ValueError, match="at turn 0, not 1"):
        d.next_turn("t0", 2, 30)
    with pytest.raises(ValueError, match="submitted twice"):
        d.submit([traj(0)])
    with pytest.raises(ValueError, match="prompt_tokens"):
        NewTrajectory("x", "p", 0, 10)


@pytest.mark.parametrize("policy", ["least_outstanding", "prefix_aware"])
def test_turn_counters_return_to_zero_when_a_step_finishes(policy: str) -> None:
    # 2 engines, 6 trajectories of 3 turns: every assigned turn is ended exactly once, by
    # turn_end, by a late next_turn or by finish, so the per-engine counts end at [0, 0].
    d = core(policy, 2)
    counts = d.policy.outstanding if policy == "least_outstanding" else d.policy.load  # type: ignore[attr-defined]
    d.submit([traj(i) for i in range(6)])
    assert sum(counts) == 6
    for i in range(6):
        d.turn_end(f"t{i}", 0)
        d.turn_end(f"t{i}", 0)  # a repeated turn end is ignored
        d.next_turn(f"t{i}", 1, 20)
        if i % 2:
            d.turn_end(f"t{i}", 1)  # even ones: the turn end never arrives
        d.next_turn(f"t{i}", 2, 30)
    assert sum(counts) == 6  # the last turn of each is running
    for i in range(6):
        d.finish(f"t{i}", 30)
        d.turn_end(f"t{i}", 2)  # late, after the finish: ignored
    assert counts == [0, 0]


def test_the_prediction_is_the_running_mean_of_finished_responses() -> None:
    d = core("kv_aware", 1, predicted_scale=1.0)
    d.report(0, load(1000))
    d.submit([traj(0), traj(1)])
    assert d._request(traj(9), 0, 10).predicted_total_tokens is None  # nothing finished yet
    d.finish("t0", 10)
    d.finish("t1", 30)
    assert d._request(traj(9), 0, 10).predicted_total_tokens == 10 + 20


def test_length_predictor_prior_and_clamps() -> None:
    p = LengthPredictor(prior_mean=100.0, prior_count=3)
    assert p.predict(10, 1000) == 110
    p.observe(500)  # (300 + 500) / 4 = 200
    assert p.predict(10, 1000) == 210 and p.predict(10, 50) == 50
    assert LengthPredictor(0.0, 1).predict(10, 50) == 11  # at least one token
    with pytest.raises(ValueError, match="together"):
        LengthPredictor(prior_mean=5.0)
    with pytest.raises(ValueError, match="response_tokens"):
        p.observe(-1)
