"""A simulated run's memory follows the steps in flight, not the run's length, and its figures
are those of the run that held every step's trajectories from the start (issue 34).

The pinned summaries were printed by the run that built every step up front (commit 1963b8e);
the lazy run must reproduce them exactly.
"""

from __future__ import annotations

import gc
import tracemalloc
from dataclasses import replace

import pytest

from rstar2.scheduler import SchedulerConfig
from sim.config import LearnerConfig, SimConfig, build_run
from sim.workload import WorkloadConfig


def pinned_config(policy: str, k: int, colocated: bool, scenario: str, tool_workers: int | None):
    return SimConfig(
        gpus=4, tp=1, seed=3, scenario=scenario, tool_workers=tool_workers,
        workload=replace(WorkloadConfig(), prompts=6, rollouts=4),
        scheduler=SchedulerConfig(policy=policy),  # type: ignore[arg-type]
        steps=6, max_staleness=k, learner=LearnerConfig(colocated=colocated),
    )  # fmt: skip


PINNED = [
    (
        ("kv_aware", 2, False, "short-uniform", None),
        {"policy": "kv_aware", "steps": 6, "max_staleness": 2, "learner": "separate",
         "run_s": 62.742, "step_s_mean": 10.457, "step_s_steady": 13.1081,
         "trajectories_per_hour": 8262.4, "engine_idle_fraction": 0.4645, "staleness_mean": 1.5,
         "staleness_max": 2, "staleness_histogram": {0: 24, 1: 24, 2: 96},
         "partial_rollout_fraction": 0.2153, "generation_s_mean": 16.8452,
         "update_s_mean": 0.7451, "push_wait_s_mean": 3.6362, "tool_queue_s": 0.0,
         "preemptions": 0, "generated_tokens": 84832, "events": 628},
    ),
    (
        ("static", 1, True, "tool-heavy", 2),
        {"policy": "static", "steps": 6, "max_staleness": 1, "learner": "colocated",
         "run_s": 901.51, "step_s_mean": 150.2516, "step_s_steady": 184.3933,
         "trajectories_per_hour": 575.0, "engine_idle_fraction": 0.2995,
         "staleness_mean": 0.8333, "staleness_max": 1, "staleness_histogram": {0: 24, 1: 120},
         "partial_rollout_fraction": 0.3681, "generation_s_mean": 284.1262,
         "update_s_mean": 3.3954, "push_wait_s_mean": 0.0, "tool_queue_s": 24909.559,
         "preemptions": 0, "generated_tokens": 473827, "events": 6085},
    ),
]  # fmt: skip


@pytest.mark.parametrize(("args", "expected"), PINNED, ids=["kv_aware_k2", "static_colocated"])
def test_a_lazy_run_reproduces_the_run_built_up_front(args: tuple, expected: dict) -> None:
    summary = build_run(pinned_config(*args)).run_steps().summary()
    del summary["wall_s"]
    assert summary == expected


def traced_run(steps: int) -> tuple[int, int]:
    """(peak bytes allocated during a run of `steps` steps, bytes the finished run still holds):
    k = 1, 32 trajectories a step, a policy that keeps nothing per prompt (kv_aware keeps the
    engine of each prompt's last rollout, ~75 B a prompt)."""
    cfg = SimConfig(
        gpus=2, tp=1, cost="constant", step_s=1.0, scenario="short-uniform", seed=3,
        workload=replace(WorkloadConfig(), prompts=8, rollouts=4),
        scheduler=SchedulerConfig(policy="least_outstanding"), steps=steps, max_staleness=1,
    )  # fmt: skip
    gc.collect()  # also empties the free lists, whose filling would count as growth
    tracemalloc.start()
    try:
        run = build_run(cfg)
        result = run.run_steps()
        peak = tracemalloc.get_traced_memory()[1]
        gc.collect()
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert result.trajectories == 32 * steps and run is not None
    return peak, held


def test_memory_does_not_grow_with_the_steps() -> None:
    # When the run held every step up front (~1.4 KB a trajectory here), 24 steps peaked at 5x
    # the 4 steps' memory and the finished run held ~45 KB more a step.
    peak_4, held_4 = traced_run(4)
    peak_24, held_24 = traced_run(24)
    assert peak_24 < 2.5 * peak_4
    assert (held_24 - held_4) / 20 < 1000  # a step's times (~90 B), nothing per trajectory
