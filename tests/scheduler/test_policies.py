"""Each policy's defining behaviour, driven directly through the policy interface."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from rstar2.config import ConfigError
from rstar2.scheduler import (
    KVAware,
    LeastOutstanding,
    PrefixAware,
    RoundRobin,
    SchedulerConfig,
    StaticSplit,
    TurnRequest,
    make_policy,
)


@dataclass
class Stats:
    kv_capacity_tokens: int = 1000
    kv_free_tokens: int = 1000
    running: int = 0
    waiting: int = 0
    preemptions: int = 0


def req(traj: str, turn: int = 0, context: int = 100, prompt_id: str = "p", max_total: int = 500):
    return TurnRequest(traj, prompt_id, turn, context, min(context, 100), max_total, None)


def test_static_split_is_contiguous_and_even_and_sticky() -> None:
    p = StaticSplit(2)
    batch = [req(f"t{i}") for i in range(4)]
    p.prepare(batch)
    assert [p.assign(r) for r in batch] == [0, 0, 1, 1]
    assert p.assign(req("t2", turn=1, context=200)) == 1


def test_round_robin_cycles_every_turn_ignoring_stickiness() -> None:
    p = RoundRobin(3)
    assert [p.assign(req("a")), p.assign(req("b")), p.assign(req("a", 1, 200))] == [0, 1, 2]
    assert p.assign(req("c")) == 0


def test_least_outstanding_picks_least_loaded_and_sticks() -> None:
    p = LeastOutstanding(2)
    assert p.assign(req("a")) == 0
    assert p.assign(req("b")) == 1
    p.on_turn_end("a")
    assert p.assign(req("c")) == 0  # engine 0 has nothing in flight now
    assert p.assign(req("a", 1, 200)) == 0  # sticky, although engine 1 has less


def test_thrash_guard_moves_a_turn_off_a_saturated_engine() -> None:
    guarded, pure = LeastOutstanding(2), LeastOutstanding(2, sticky_guard=False)
    for p in (guarded, pure):
        assert p.assign(req("a")) == 0
        p.on_turn_end("a")
        p.on_stats(0, Stats(kv_free_tokens=0, waiting=5, preemptions=9))  # thrashing
        p.on_stats(1, Stats())
    assert pure.assign(req("a", 1, 300)) == 0  # locked onto the thrashing engine
    assert guarded.assign(req("a", 1, 300)) == 1
    assert guarded.moved == 1
    guarded.on_turn_end("a")
    guarded.on_stats(0, Stats())
    assert guarded.assign(req("a", 2, 400)) == 1  # and sticks to its new engine


def test_thrash_guard_stays_when_every_engine_is_saturated() -> None:
    p = LeastOutstanding(2)
    p.assign(req("a"))
    for e in (0, 1):
        p.on_stats(e, Stats(kv_free_tokens=0, waiting=1))
    assert p.assign(req("a", 1, 300)) == 0


def test_prefix_aware_groups_a_prompt_and_falls_back_on_imbalance() -> None:
    p = PrefixAware(2, balance_abs_threshold=2)
    engines = [p.assign(req(f"t{i}", prompt_id="x")) for i in range(3)]
    assert engines == [0, 0, 0]  # same prompt prefix: same engine (loads 3 vs 0 now)
    assert p.assign(req("t3", prompt_id="x")) == 1  # 3 - 0 > 2: imbalanced, least loaded wins
    assert p.assign(req("u0", prompt_id="y")) == 1  # new prefix: the smaller tree


def test_prefix_aware_follows_a_trajectory_to_its_cache() -> None:
    p = PrefixAware(2)
    p.assign(req("a", prompt_id="x"))
    p.assign(req("b", prompt_id="y"))
    p.on_turn_end("a")
    assert p.assign(req("a", 1, 150, prompt_id="x")) == 0


def test_kv_aware_max_holds_until_a_reservation_is_released() -> None:
    p = KVAware(2, reservation="max")
    for e in (0, 1):
        p.on_stats(e, Stats(kv_capacity_tokens=1000))
    # siblings of one prompt share an engine while it has room: 2 x 500 per engine
    assert [p.assign(req(t)) for t in "abcd"] == [0, 0, 1, 1]
    assert p.assign(req("e")) is None
    assert p.assign(req("a", 1, 300)) == 0  # later turns always go home
    p.on_finish("b")
    assert p.assign(req("e")) == 0


def test_kv_aware_places_a_fitting_step_as_the_static_split() -> None:
    kv, static = KVAware(2, reservation="predicted"), StaticSplit(2)
    batch = [req(f"t{i}", prompt_id=f"p{i % 3}") for i in range(6)]
    for p in (kv, static):
        p.on_stats(0, Stats(kv_capacity_tokens=10_000, kv_free_tokens=10_000))
        p.on_stats(1, Stats(kv_capacity_tokens=10_000, kv_free_tokens=10_000))
        p.prepare(batch)
    assert [kv.assign(r) for r in batch] == [static.assign(r) for r in batch] == [0, 0, 0, 1, 1, 1]


def test_kv_aware_spills_a_planned_trajectory_where_there_is_room() -> None:
    p = KVAware(2, reservation="max")
    p.on_stats(0, Stats(kv_capacity_tokens=1000))
    p.on_stats(1, Stats(kv_capacity_tokens=1500))
    batch = [req(f"t{i}", prompt_id=f"p{i}") for i in range(4)]
    p.prepare(batch)  # plan: t0, t1 -> 0; t2, t3 -> 1
    assert [p.assign(r) for r in batch] == [0, 0, 1, 1]
    p.prepare([req("u0", prompt_id="q"), req("u1", prompt_id="q")])  # plan: u0 -> 0
    assert p.assign(req("u0", prompt_id="q")) == 1  # engine 0 is full, engine 1 has 500 left
    assert p.assign(req("u1", prompt_id="q")) is None


def test_kv_aware_moves_a_turn_off_a_saturated_engine() -> None:
    p = KVAware(2, reservation="predicted", predicted_scale=1.0)
    p.on_stats(0, Stats(kv_capacity_tokens=1000))
    p.on_stats(1, Stats(kv_capacity_tokens=1000))
    assert p.assign(TurnRequest("a", "p", 0, 100, 100, 500, 200)) == 0
    p.on_stats(0, Stats(kv_capacity_tokens=1000, kv_free_tokens=100, waiting=3))
    assert p.assign(TurnRequest("a", "p", 1, 150, 100, 500, 200)) == 1
    assert p.reserved == [0, 200] and p.moved == 1
    p.on_finish("a")
    assert p.reserved == [0, 0]


def test_kv_aware_moves_a_turn_off_an_engine_holding_much_more_kv_than_the_lightest() -> None:
    p = KVAware(3, reservation="predicted", predicted_scale=1.0, overload_factor=1.3)
    for e in range(3):
        p.on_stats(e, Stats(kv_capacity_tokens=1000))
    assert p.assign(TurnRequest("a", "p", 0, 100, 100, 500, 200)) == 0
    assert p.assign(TurnRequest("b", "p", 0, 100, 100, 500, 200)) == 0
    # KV in use 371 / 300 / 270: engine 0 holds exactly 1.3 x 270 + 2% of 1000: it stays.
    for e, free in enumerate((629, 700, 730)):
        p.on_stats(e, Stats(kv_capacity_tokens=1000, kv_free_tokens=free))
    assert p.assign(TurnRequest("a", "p", 1, 150, 100, 500, 200)) == 0 and p.moved == 0
    # 400 / 300 / 200: over 1.3 x 200 + 20 = 280: the turn moves to the engine with the most
    # unreserved KV (engines 1 and 2 tie at 1000: the lower id).
    for e, free in enumerate((600, 700, 800)):
        p.on_stats(e, Stats(kv_capacity_tokens=1000, kv_free_tokens=free))
    assert p.assign(TurnRequest("b", "p", 1, 150, 100, 500, 200)) == 1
    assert p.moved == 1 and p.reserved == [200, 200, 0]


def test_kv_aware_rejects_an_overload_factor_below_one() -> None:
    with pytest.raises(ValueError, match="overload_factor"):
        KVAware(2, overload_factor=0.9)
    with pytest.raises(ConfigError, match="overload_factor"):
        SchedulerConfig(overload_factor=0.5).validate()


def test_kv_aware_without_turn_moves_keeps_a_turn_on_its_saturated_engine() -> None:
    """The live trainer graph's behaviour (its rollout workers own their engines)."""
    p = make_policy(SchedulerConfig(predicted_scale=1.0, move_turns=False), num_engines=2)
    assert isinstance(p, KVAware)
    p.on_stats(0, Stats(kv_capacity_tokens=1000))
    p.on_stats(1, Stats(kv_capacity_tokens=1000))
    assert p.assign(TurnRequest("a", "p", 0, 100, 100, 500, 200)) == 0
    p.on_stats(0, Stats(kv_capacity_tokens=1000, kv_free_tokens=100, waiting=3))
    assert p.assign(TurnRequest("a", "p", 1, 150, 100, 500, 200)) == 0
    assert p.reserved == [200, 0] and p.moved == 0


def test_kv_aware_max_never_moves_a_turn() -> None:
    p = KVAware(2, reservation="max")
    for e in (0, 1):
        p.on_stats(e, Stats(kv_capacity_tokens=1000))
    assert p.assign(req("a")) == 0
    p.on_stats(0, Stats(kv_capacity_tokens=1000, kv_free_tokens=0, waiting=5))
    assert p.assign(req("a", 1, 300)) == 0


def test_kv_aware_holds_before_any_stats() -> None:
    assert KVAware(1).assign(req("a")) is None


def test_kv_aware_predicted_reserves_less_and_raises_on_growth() -> None:
    p = KVAware(1, reservation="predicted", predicted_scale=1.0)
    p.on_stats(0, Stats(kv_capacity_tokens=1000))
    r = TurnRequest("a", "p", 0, 100, 100, 500, predicted_total_tokens=200)
    assert p.reservation_for(r) == 200
    assert p.assign(r) == 0 and p.reserved == [200]
    assert p.assign(TurnRequest("a", "p", 1, 250, 100, 500, 200)) == 0
    assert p.reserved == [300]  # 250 + (200 - 100) / 2
    p.on_finish("a")
    assert p.reserved == [0]


def test_kv_aware_predicted_respects_live_free_kv() -> None:
    p = KVAware(1, reservation="predicted", predicted_scale=1.0)
    p.on_stats(0, Stats(kv_capacity_tokens=1000, kv_free_tokens=150))
    assert p.assign(TurnRequest("a", "p", 0, 100, 100, 500, 200)) is None


def test_make_policy_builds_each_and_rejects_bad_input() -> None:
    for name in ("static", "round_robin", "least_outstanding", "prefix_aware", "kv_aware"):
        assert make_policy(SchedulerConfig(policy=name), 3).num_engines == 3  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        RoundRobin(0)
    with pytest.raises(ValueError):
        TurnRequest("a", "p", 0, 10, 20, 30)  # prompt longer than context
    with pytest.raises(ValueError):
        LeastOutstanding(2).on_stats(2, Stats())
