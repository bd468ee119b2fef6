"""The rollout worker's reply: the agent loop's `Trajectory` itself inside a `TrajectoryResult`,
as it crosses the wire."""

from __future__ import annotations

import msgspec

from rstar2.rollout.trajectory import TrajectoryState, TurnStop
from rstar2.rollout.worker import to_result
from rstar2.wire import EngineLoad, RolloutTask, Trajectory, TrajectoryResult, decode, encode

TASK = RolloutTask("train/3/1/2", "train/3/1", 2, 3, [7, 8], "42", seed=5, prompt=1)
LOAD = EngineLoad(kv_capacity_tokens=64, kv_free_tokens=32, running=1, waiting=0)


def finished() -> Trajectory:
    """Two turns: a failed tool call answered by the sandbox's infrastructure, then an answer."""
    s = TrajectoryState(TASK.prompt_ids, budget=20, max_turns=3)
    s.add_turn([10, 4], [-0.5, -0.25], TurnStop.CALL, answer_tags=0, policy_version=2)
    s.add_tool_response([20, 21], failed=True, timed_out=False, infra="queue_full", latency=0.5)
    s.add_turn([11, 2], [-1.0, -0.125], TurnStop.END, answer_tags=1, policy_version=3)
    return s.to_trajectory(TASK.prompt_id, TASK.sample, "text")


def test_the_result_carries_the_trajectory_and_the_tasks_identity() -> None:
    traj = finished()
    r = to_result(TASK, traj, 1, LOAD, gen_s=2.0, tool_s=0.5, moved_turns=1, loop_cpu_s=0.25)
    assert r.trajectory is traj  # the record itself, not a copy of its fields
    assert (r.traj_id, r.step, r.kind, r.answer, r.prompt) == ("train/3/1/2", 3, "train", "42", 1)
    assert (r.engine, r.load, r.gen_s, r.tool_s, r.moved_turns) == (1, LOAD, 2.0, 0.5, 1)
    assert r.loop_cpu_s == 0.25


def test_the_result_round_trips_through_the_one_decoder() -> None:
    r = to_result(TASK, finished(), 1, LOAD, gen_s=2.0, tool_s=0.5)
    back = decode(encode(r))
    assert isinstance(back, TrajectoryResult) and back == r
    t = back.trajectory
    assert t.token_ids == [7, 8, 10, 4, 20, 21, 11, 2] and t.loss_mask == [0, 0, 1, 1, 0, 0, 1, 1]
    assert (t.turns, t.tool_calls, t.tool_errors, t.finish_reason) == (2, 1, 1, "answer")
    assert (t.infra_failure, t.policy_versions, t.tool_latencies) == (
        "tool:queue_full",
        [2, 3],
        [0.5, 0.0],
    )
    assert t.response_tokens == 6 and t.failed_tool_calls == 1


def test_trajectories_compare_equal_whatever_their_tool_latencies() -> None:
    traj = finished()
    assert msgspec.structs.replace(traj, tool_latencies=[9.0, 9.0]) == traj
    assert msgspec.structs.replace(traj, reward=1.0) != traj
    assert traj != object()
