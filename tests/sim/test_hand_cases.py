"""Cases solvable by hand under constant cost (every decode step 1 s, prefill free, tools instant)."""

from __future__ import annotations

from rstar2.scheduler import KVAware, RoundRobin, StaticSplit
from sim.bound import bound_parts
from sim.cluster import Cluster
from sim.cost import constant_cost
from sim.simulator import Simulation
from sim.workload import TrajectorySpec, Turn


def traj(
    i: int, prompt: int, *turns: int, budget: int | None = None, tool: int = 0
) -> TrajectorySpec:
    ts = tuple(Turn(t, tool if k < len(turns) - 1 else 0) for k, t in enumerate(turns))
    used = sum(turns) + tool * (len(turns) - 1)
    return TrajectorySpec(f"t{i}", f"p{i}", prompt, budget or used, ts)


def run(policy, workload, engines=1, kv=1024, max_num_seqs=256):
    return Simulation(
        policy, workload, Cluster(engines, kv, constant_cost(1.0), max_num_seqs)
    ).run()


def test_two_sequences_share_one_engine_makespan_is_the_longer() -> None:
    r = run(StaticSplit(1), [traj(0, 10, 10), traj(1, 10, 20)])
    assert r.makespan_s == 20.0
    assert r.generated_tokens == 30
    assert r.busy_s == [20.0]


def test_instant_tool_call_continues_on_the_next_step() -> None:
    r = run(StaticSplit(1), [traj(0, 10, 10, 10, tool=5)])
    assert r.makespan_s == 20.0


def test_max_num_seqs_serialises() -> None:
    r = run(StaticSplit(1), [traj(i, 10, 5) for i in range(3)], max_num_seqs=1)
    assert r.makespan_s == 15.0


def test_round_robin_over_two_engines_halves_the_work() -> None:
    r = run(RoundRobin(2), [traj(i, 10, 7) for i in range(4)], engines=2)
    assert r.makespan_s == 7.0
    assert r.idle_fraction == 0.0


def test_preemption_of_the_newest_with_recompute() -> None:
    # 4 blocks of 16. A and B (prompt 8, 40 tokens each) both fit at first; at L=32 (step 24)
    # both need a third block, none is free: B (newest) is preempted with 32 tokens to
    # recompute. A finishes at step 40 and frees 3 blocks; B is re-admitted (2 blocks + 1 for
    # its next token) and generates its last 16 tokens: done at step 56.
    r = run(StaticSplit(1), [traj(0, 8, 40), traj(1, 8, 40)], kv=64)
    assert r.preemptions == 1
    assert r.recomputed_tokens == 32
    assert r.makespan_s == 56.0
    assert r.generated_tokens == 80
    assert r.max_used_blocks == [4]


def test_kv_aware_max_reservation_serialises_instead_of_preempting() -> None:
    # Same pair with a 48-token budget each: only one reservation of 56 fits in 64 tokens.
    workload = [traj(0, 8, 40, budget=48), traj(1, 8, 40, budget=48)]
    r = run(KVAware(1, reservation="max"), workload, kv=64)
    assert r.preemptions == 0
    assert r.makespan_s == 80.0


def test_lower_bound_of_hand_cases() -> None:
    r = run(StaticSplit(1), [traj(0, 10, 10), traj(1, 10, 20)])
    assert r.lower_bound_s == 20.0
    assert r.ratio_to_bound == 1.0


def test_sticky_bound_of_a_hand_case_is_its_makespan() -> None:
    # One sequence at a time per engine. Static split: engine 0 serves 10 + 10 tokens, engine 1
    # 10 + 30, one after the other: 40 s. The lower bound for any policy is 30 (the 30-token
    # path, and 60 steps over 2 engines); given where the trajectories ran it is 40.
    r = run(StaticSplit(2), [traj(0, 4, 10), traj(1, 4, 10), traj(2, 4, 10), traj(3, 4, 30)],
            engines=2, max_num_seqs=1)  # fmt: skip
    assert r.engine_of == [0, 0, 1, 1]
    assert r.lower_bound_s == 30.0
    assert r.sticky_bound_s == 40.0
    assert r.makespan_s == 40.0


def test_sticky_bound_is_none_once_a_turn_moved() -> None:
    r = run(RoundRobin(2), [traj(0, 4, 5, 5)], engines=2)
    assert r.sticky_bound_s is None


def test_spread_tokens_is_the_length_an_even_blind_split_puts_on_every_engine() -> None:
    # 100 trajectories over 2 engines, 50 each. With c long ones, an engine misses them all
    # with probability <= (1 - c/100)^50; both engines together must stay under 1%:
    # c = 10 gives 2 * 0.9^50 = 1.03% (not enough), c = 11 gives 2 * 0.89^50 = 0.59%.
    for long, expected in ((10, 10), (11, 1000)):
        workload = [traj(i, 4, 1000 if i < long else 10) for i in range(100)]
        parts = bound_parts(workload, constant_cost(1.0), 2, 1 << 20, 256)
        assert parts.spread_tokens == expected
        assert parts.spread_floor_s == max(parts.bound_s, float(expected))


def test_without_turn_moves_a_later_turn_stays_without_asking_the_policy() -> None:
    # Round robin would send turn 1 to engine 1; with move_turns off it is not asked (as the live
    # graph with scheduler.move_turns = false): both turns run on engine 0, 5 + 5 steps.
    sim = Simulation(
        RoundRobin(2), [traj(0, 4, 5, 5)], Cluster(2, 1024, constant_cost(1.0)), move_turns=False
    )
    r = sim.run()
    assert r.engine_of == [0] and r.sticky_bound_s == 10.0 and r.makespan_s == 10.0
