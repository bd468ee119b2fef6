"""Runs of several steps under bounded staleness, on cases solvable by hand.

Constant cost: every decode step 1 s whatever the batch, prefill free. One engine, so the
trajectories released together decode side by side and finish together.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from rstar2.scheduler import LeastOutstanding, SchedulerConfig, StaticSplit
from sim.cluster import Cluster
from sim.config import SimConfig, build_run, resolve_cluster, run_steps, scenario_workload
from sim.cost import constant_cost
from sim.learner import LearnerCost
from sim.run_result import RunResult
from sim.simulator import Simulation
from sim.training_run import TrainingRun
from sim.workload import TrajectorySpec, Turn, WorkloadConfig


def traj(i: int, *turns: int, tool_s: float = 0.0) -> TrajectorySpec:
    ts = tuple(Turn(t, 0, tool_s if k < len(turns) - 1 else 0.0) for k, t in enumerate(turns))
    return TrajectorySpec(f"t{i}", f"p{i}", 4, sum(turns), ts)


def run(
    steps: list[list[TrajectorySpec]], k: int, update_s: float, push_s: float, **kw: object
) -> RunResult:
    learner = LearnerCost(update_s, 0.0, 1.0, push_s)
    cluster = Cluster(1, 1024, constant_cost(1.0))
    sim = TrainingRun(StaticSplit(1), steps, cluster, learner, max_staleness=k, **kw)  # type: ignore[arg-type]
    return sim.run_steps()


def test_synchronous_step_is_generation_then_update_then_push() -> None:
    # Each step: 10 s of decoding, a 5 s update, a 2 s push; nothing overlaps at k = 0.
    r = run([[traj(0, 10)]] * 3, k=0, update_s=5.0, push_s=2.0)
    assert r.run_s == 51.0
    assert r.step_s_mean == 17.0
    assert r.engine_idle_fraction == pytest.approx(1 - 30 / 51)
    assert r.staleness_counts == [3]
    assert [t.released_s for t in r.step_times] == [0.0, 17.0, 34.0]


def test_one_step_of_staleness_overlaps_generation_with_the_update() -> None:
    # k = 1: steps 1 and 2 start at 0 and finish at 10. Update 1 10-15, push 15-17 (nothing in
    # flight), step 3 released at 17 and done at 27. Update 2 17-22; its push waits for step
    # 3's turn in flight (turn-boundary pushes): 27-29. Update 3 29-34, push 34-36.
    r = run([[traj(0, 10)]] * 3, k=1, update_s=5.0, push_s=2.0)
    assert r.run_s == 36.0
    assert r.step_s_mean == 12.0
    assert r.step_s_steady == 12.0  # too short for a full pipeline: the mean
    assert r.engine_idle_fraction == pytest.approx(1 - 20 / 36)
    assert r.staleness_counts == [1, 2]  # step 2 from version 0, step 3 from version 1
    assert [t.push_start_s for t in r.step_times] == [15.0, 27.0, 34.0]
    assert r.summary()["push_wait_s_mean"] == pytest.approx(5 / 3, abs=1e-4)


def test_the_steady_step_leaves_out_the_pipeline_fill_and_drain() -> None:
    # As above for 5 steps: each push waits for the next step's turn, so pushes end at 17, 29,
    # 41, 53 and (update 5 53-58, push 58-60) 60. Full pipeline from push 2 to push 4: 12 s a
    # step, the update hidden behind generation.
    r = run([[traj(0, 10)]] * 5, k=1, update_s=5.0, push_s=2.0)
    assert [t.push_end_s for t in r.step_times] == [17.0, 29.0, 41.0, 53.0, 60.0]
    assert r.step_s_steady == 12.0
    assert r.step_s_mean == 12.0
    assert run([[traj(0, 10)]] * 3, k=0, update_s=5.0, push_s=2.0).step_s_steady == 17.0


def test_a_turn_waits_at_the_gate_and_continues_under_the_new_version() -> None:
    # Trajectories of two 3-token turns with a 2 s tool call between them; update 4 s, push
    # 1.5 s, k = 1. Steps 1, 2: 0-3, tool 3-5, 5-8. Update 1 8-12, push 12-13.5. Step 3 from
    # 13.5: turn 0 to 16.5, tool to 18.5. Update 2 13.5-17.5; nothing is on the engine, so the
    # push runs 17.5-19 and step 3's second turn, back at 18.5, waits at the gate until 19:
    # 19-22 under version 2. Update 3 22-26, push 26-27.5.
    r = run([[traj(0, 3, 3, tool_s=2.0)]] * 3, k=1, update_s=4.0, push_s=1.5)
    assert r.run_s == 27.5
    assert r.partial_rollouts == 1  # step 3's trajectory: turns under versions 1 and 2
    assert r.staleness_counts == [1, 2]
    assert r.engine_idle_fraction == pytest.approx(1 - 12 / 27.5)


def test_a_colocated_learner_waits_for_the_engines_and_stops_them() -> None:
    # As the k = 1 case, but update 2 may only start once step 3's turn (17-27) is done:
    # 27-32, push 32-34; update 3 34-39, push 39-41.
    r = run([[traj(0, 10)]] * 3, k=1, update_s=5.0, push_s=2.0, colocated=True)
    assert r.run_s == 41.0
    assert [t.update_start_s for t in r.step_times] == [10.0, 27.0, 34.0]


def test_the_tool_workers_queue_calls() -> None:
    # Two trajectories, one call each of 2 s, at the same time: one worker serves them in turn.
    steps = [[traj(0, 3, 3, tool_s=2.0), traj(1, 3, 3, tool_s=2.0)]]
    one = run(steps * 2, k=0, update_s=1.0, push_s=1.0, tool_workers=1)
    many = run(steps * 2, k=0, update_s=1.0, push_s=1.0)
    assert many.step_s_mean == 3 + 2 + 3 + 2.0
    assert one.step_s_mean == 3 + 4 + 3 + 2.0
    assert one.tool_queue_s == 4.0


def small(k: int, steps: int = 5, policy: str = "least_outstanding") -> SimConfig:
    return SimConfig(
        gpus=2, tp=1, cost="constant", step_s=1.0, scenario="short-uniform", seed=3,
        workload=replace(WorkloadConfig(), prompts=4, rollouts=4),
        scheduler=SchedulerConfig(policy=policy),  # type: ignore[arg-type]
        steps=steps, max_staleness=k,
    )  # fmt: skip


def test_synchronous_run_is_the_one_step_simulations_plus_update_and_push() -> None:
    cfg = small(0)
    cfg.learner.update_s, cfg.learner.push_s = 7.0, 3.0
    r = build_run(cfg).run_steps()
    wl = scenario_workload(cfg)
    cluster = resolve_cluster(cfg, 2048)
    one_steps = 0.0
    for step in run_steps(cfg, wl):
        sim = Simulation(LeastOutstanding(cluster.num_engines), step, cluster)
        one_steps += sim.run().makespan_s
    assert r.run_s == one_steps + 5 * (7.0 + 3.0)
    assert r.staleness_histogram() == {0: 5 * 16}


@pytest.mark.parametrize("k", [0, 1, 2, 3])
@pytest.mark.parametrize("policy", ["kv_aware", "static"])
def test_staleness_never_exceeds_k(k: int, policy: str) -> None:
    cfg = small(k, steps=7, policy=policy)
    cfg.learner.update_s, cfg.learner.push_s = 40.0, 2.0  # a slow learner: the bound binds
    r = build_run(cfg).run_steps()
    assert r.summary()["staleness_max"] == k
    assert r.staleness_counts[0] > 0
    assert sum(r.staleness_histogram().values()) == r.trajectories == 7 * 16


def test_a_trajectory_longer_than_an_engines_kv_is_refused_before_the_run() -> None:
    learner = LearnerCost(1.0, 0.0, 1.0, 1.0)
    with pytest.raises(ValueError, match="trajectory 2/t1 may reach 34 tokens"):
        TrainingRun(
            StaticSplit(1),
            [[traj(0, 10)], [traj(1, 30)]],
            Cluster(1, 32, constant_cost(1.0)),
            learner,
        )
