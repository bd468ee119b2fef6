"""`RUN/rollout_trace.jsonl`: one line per trajectory of each RL step, resume drops the steps
that run again, and the rollout worker times each tool call by turn."""

from __future__ import annotations

import json
from pathlib import Path

from rstar2.analysis import load_trajectories
from rstar2.train.rollout_trace import TRACE_FILE, RolloutTrace
from rstar2.wire import TrajectoryResult
from sim.workload import load_trace
from tests.trajectories import trajectory


def result(traj: str, mask: list[int], latencies: list[float]) -> TrajectoryResult:
    return TrajectoryResult(
        traj_id=traj,
        step=1,
        kind="train",
        answer="1",
        trajectory=trajectory(
            token_ids=list(range(len(mask))),
            loss_mask=mask,
            logprobs=[0.0] * len(mask),
            prompt_len=2,
            turns=2,
            tool_calls=1,
            tool_latencies=latencies,
        ),
        engine=0,
    )


def lines(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / TRACE_FILE).read_text().splitlines()]


def test_each_step_is_appended_and_resume_drops_later_steps(tmp_path: Path) -> None:
    mask = [0, 0, 1, 1, 0, 1]
    trace = RolloutTrace(tmp_path)
    for step in (1, 2, 3):
        assert trace.write(step, [result(f"a{step}", mask, [0.2]), result("b", [0, 0], [])], 8) == 1
    trace.close()
    assert [(r["step"], r["traj_id"]) for r in lines(tmp_path)] == [(1, "a1"), (2, "a2"), (3, "a3")]
    assert lines(tmp_path)[0]["turns"][0] == {
        "model_tokens": 2,
        "tool_tokens": 1,
        "tool_latency_s": 0.2,
    }
    RolloutTrace(tmp_path, resume_step=2).close()
    assert [r["step"] for r in lines(tmp_path)] == [1, 2]
    RolloutTrace(tmp_path).close()  # a fresh run starts a fresh trace
    assert lines(tmp_path) == []


def test_rollout_trace_tokens_makes_the_trace_analysable(tmp_path: Path) -> None:
    """With `tokens` (rollout_trace_tokens) a line carries the token ids and mask that
    `rstar2 analyze` reads; the simulator still reads the file."""
    mask = [0, 0, 1, 1, 0, 1]
    trace = RolloutTrace(tmp_path, tokens=True)
    trace.write(4, [result("a", mask, [0.2])], 8)
    trace.close()
    (loaded,) = load_trajectories(tmp_path / TRACE_FILE, step=4).trajectories
    assert (loaded.name, loaded.token_ids, loaded.loss_mask) == ("a", list(range(6)), mask)
    assert len(load_trace(tmp_path / TRACE_FILE)) == 1
    plain = RolloutTrace(tmp_path / "plain")
    plain.write(4, [result("a", mask, [0.2])], 8)
    plain.close()
    assert "token_ids" not in lines(tmp_path / "plain")[0]
