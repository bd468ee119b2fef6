"""`cluster.engine_backend = "instant"`: the real graph around an engine with no model."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from rstar2.metrics import read_metrics
from tests.profile.tool_policy import ToolPolicy
from tests.train.test_train_run import train_cmd


@pytest.mark.slow
@pytest.mark.parametrize("own_processes", [False, True])
def test_every_rollout_runs_the_script_through_the_real_sandbox_and_reward(
    tmp_path: Path, tool_policy: ToolPolicy, own_processes: bool
) -> None:
    """Two RL steps of 4 x 4 rollouts, each scripted as two turns of 40 tokens around one
    tool call, with the engine in the learner's process or in a process of its own: every
    step generates exactly 16 x 2 x 40 tokens, every rollout's call ran in the sandbox and
    printed 5, the reward verified its answer, and the event loops' CPU is measured."""
    extra = ["heldout_problems=0", "cluster.engine_backend=instant",
             "engine.instant_turn_tokens=40", "engine.instant_tool_calls=1"]  # fmt: skip
    if own_processes:
        extra.append("graph.worker_processes=true")
    run = tmp_path / "run"
    argv = [x for s in tool_policy.rl_sets(2, *extra) for x in ("--set", s)]
    out = subprocess.run(
        [*train_cmd(), "--run-dir", str(run), *argv], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    rows = [r for r in read_metrics(run / "metrics.jsonl") if r.get("stage") == "rl1"]
    assert [r["gen_tokens"] for r in rows] == [16 * 2 * 40] * 2, rows
    assert all(r["tool_calls_mean"] == 1.0 and r["infra_failed"] == 0.0 for r in rows), rows
    assert all(r["loop_cpu_s"] > 0.0 and r["worker_loop_cpu_s"] > 0.0 for r in rows), rows
    lines = [json.loads(x) for x in (run / "trajectories.jsonl").read_text().splitlines()]
    assert len(lines) == 16  # step 1's rollouts
    for line in lines:
        assert (line["turns"], line["tool_calls"], line["finish_reason"]) == (2, 1, "answer")
        call, tool, _ = line["conversation"]
        assert call["code"] == "print(2 + 3)", line
        assert not tool["failed"] and tool["text"].splitlines()[-1] == "5", line
        assert (line["answer"], line["reward_status"]) == ("5", "ok"), line  # verified
        assert line["reward"] == (1.0 if str(line["reference"]).strip() == "5" else 0.0), line
