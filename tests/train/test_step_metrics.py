"""Per-step rollout statistics on hand-built trajectories."""

from __future__ import annotations

import msgspec
import pytest

from rstar2.train.step_metrics import (
    accuracy,
    engine_split,
    latest_loads,
    rollout_metrics,
    stage_split,
    worker_loop,
)
from rstar2.wire import EngineLoad, TrajectoryResult
from tests.trajectories import trajectory


def result(
    prompt_id: str,
    reward: float,
    *,
    tool_calls: int = 0,
    tool_errors: int = 0,
    tool_timeouts: int = 0,
    infra_failure: str = "",
    gen_s: float = 1.0,
    tool_s: float = 0.0,
    reward_s: float = 0.0,
    moved_turns: int = 0,
) -> TrajectoryResult:
    """A scored result of 2 prompt and 2 response tokens, one of them sampled."""
    return TrajectoryResult(
        traj_id="t",
        step=1,
        kind="train",
        answer="",
        trajectory=trajectory(
            prompt_id=prompt_id,
            token_ids=[0, 0, 1, 1],
            loss_mask=[0, 0, 1, 0],
            logprobs=[0.0] * 4,
            prompt_len=2,
            tool_calls=tool_calls,
            tool_errors=tool_errors,
            tool_timeouts=tool_timeouts,
            reward=reward,
            infra_failure=infra_failure,
        ),
        gen_s=gen_s,
        tool_s=tool_s,
        reward_s=reward_s,
        moved_turns=moved_turns,
    )


def test_rollout_metrics_exact() -> None:
    trajs = [
        result("a", 1.0, tool_calls=4, tool_errors=1),
        result("a", 0.0, tool_calls=3, tool_errors=3),
        result("b", 1.0, tool_calls=2, tool_timeouts=1),
        result("b", 1.0, tool_calls=2, moved_turns=2),
    ]
    m = rollout_metrics(trajs)
    assert m["reward_mean"] == 0.75
    assert m["response_tokens_mean"] == 2.0
    assert m["tool_calls_mean"] == pytest.approx(11 / 4)
    # correct trajectories only: (1 + 1) failed of (4 + 2 + 2) calls
    assert m["tool_error_ratio_correct"] == pytest.approx(2 / 8)
    # two of the three correct trajectories recovered from a failed call
    assert m["correct_with_failed_call"] == pytest.approx(2 / 3)
    assert m["mixed_group_fraction"] == 0.5
    assert m["gen_tokens"] == 4.0
    assert m["moved_turns"] == 2.0
    assert m["infra_failed"] == 0.0
    assert accuracy(trajs) == 0.75


def test_infra_failures_are_counted_and_not_judged() -> None:
    clean = [result("a", 1.0, tool_calls=2, tool_errors=1), result("a", 0.0, tool_calls=1)]
    hit = [
        result("a", 0.0, tool_calls=4, tool_errors=4, infra_failure="tool:queue_full"),
        result("b", 0.0, tool_calls=1, infra_failure="reward:timeout"),
    ]
    m = rollout_metrics(clean + hit)
    assert m["infra_failed"] == 2.0
    # model-quality figures over the two clean rollouts only (prompt "b" has none left)
    assert m["reward_mean"] == 0.5
    assert m["tool_error_ratio_correct"] == 0.5
    assert m["correct_with_failed_call"] == 1.0
    assert m["mixed_group_fraction"] == 1.0
    # work done counts every rollout
    assert m["tool_calls_mean"] == 2.0
    assert m["gen_tokens"] == 4.0


def test_stage_split_sums_to_wall_time() -> None:
    trajs = [
        result("a", 1.0, gen_s=3.0, tool_s=1.0, reward_s=0.0),
        result("a", 0.0, gen_s=1.0, reward_s=1.0),
    ]
    split = stage_split(trajs, wall_s=12.0)
    assert split == {"time_gen_s": 8.0, "time_tool_s": 2.0, "time_reward_s": 2.0}
    assert stage_split([], 5.0)["time_gen_s"] == 5.0


def counters(
    steps: int, step_s: float, wait_s: float, rounds: int = 0, prefills: int = 0
) -> EngineLoad:
    return EngineLoad(
        64,
        64,
        0,
        0,
        steps=steps,
        step_s=step_s,
        wait_s=wait_s,
        round_steps=rounds,
        prefill_steps=prefills,
        prefill_s=prefills / 8,
    )


def test_engine_split_is_the_change_of_each_engines_latest_counters() -> None:
    served = [
        msgspec.structs.replace(result("p", 1.0), engine=0, load=counters(12, 1.5, 0.25)),
        msgspec.structs.replace(result("p", 1.0), engine=0, load=counters(15, 2.0, 0.5, 8, 4)),
        msgspec.structs.replace(result("q", 1.0), engine=1, load=counters(7, 1.0, 0.0)),
        msgspec.structs.replace(result("q", 1.0), engine=1, load=None),  # no engine report
    ]
    assert latest_loads(served) == {0: counters(15, 2.0, 0.5, 8, 4), 1: counters(7, 1.0, 0.0)}
    before = {0: counters(5, 0.5, 0.125, 0, 2), 1: counters(2, 0.25, 0.0)}
    assert engine_split(served, before) == {
        "engine_steps": 15.0,  # (15 - 5) + (7 - 2)
        "engine_step_s": 2.25,  # (2.0 - 0.5) + (1.0 - 0.25)
        "engine_wait_s": 0.375,
        "engine_round_steps": 8.0,  # (8 - 0) + (0 - 0)
        "engine_prefill_steps": 2.0,  # (4 - 2) + (0 - 0)
        "engine_prefill_s": 0.25,  # (0.5 - 0.25) + 0
    }
    # an engine without a baseline adds nothing; no baseline at all: no figures
    assert engine_split(served, {1: before[1]})["engine_steps"] == 5.0
    assert engine_split(served, {}) == {}
    # engines that count no steps (vLLM): no figures
    vllm = [msgspec.structs.replace(result("p", 1.0), engine=0, load=EngineLoad(64, 64, 0, 0))]
    assert engine_split(vllm, {0: EngineLoad(64, 64, 0, 0)}) == {}


def test_the_worker_loop_figure_is_the_busiest_loop_not_the_sum() -> None:
    served = [
        msgspec.structs.replace(result("p", 1.0), engine=0, loop_cpu_s=0.25),
        msgspec.structs.replace(result("p", 1.0), engine=0, loop_cpu_s=0.5),
        msgspec.structs.replace(result("q", 1.0), engine=1, loop_cpu_s=0.375),
    ]
    assert worker_loop(served) == {"worker_loop_cpu_s": 0.5}
    assert worker_loop([result("p", 1.0)]) == {}  # not measured (a simulated or old worker)
    assert worker_loop([]) == {}
