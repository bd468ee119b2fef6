"""`rstar2 profile` on the trainer's real actor graph (learner, scheduler, rollout worker with its
engine, sandbox, reward), from the untrained tiny policy, one short RL step.

The engine case: a KV budget of about one sequence (the KV-aware scheduler admits one
trajectory at a time), so generation is serial and the rollout worker is busy all the step.
The profile must name the rollout worker, see its KV cache full and ask for a bigger KV
budget, and write a valid Chrome trace with the engine's track and the step's stage split.

Why the other three cases are not here: from an untrained policy (SFT takes minutes on a
CPU) the trajectories never reach the sandbox (its tool calls are malformed), are truncated
(scored 0 without verification) and carry no reward signal (so the learner skips the update);
see `test_profile_command.py` for the four cases on the synthetic train-shaped graph.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rstar2.cli import main
from rstar2.profile.chrome_trace import check_chrome_trace

SMALL = [
    "prompts_per_step=2",
    "rollouts_per_prompt=4",
    "rl.group_size=2",
]


def _profile(tmp_path: Path, capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    argv = ["-q", "profile", "--steps", "1", "--out", str(tmp_path), "--json", "--timeout", "240"]
    sets = [x for item in SMALL for x in ("--set", item)]
    assert main([*argv, *sets, *args]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.slow
def test_a_one_sequence_kv_budget_makes_the_engine_the_bottleneck(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    budget = ["engine.kv_budget_tokens=240", 'stages=[{"steps": 1, "max_response_tokens": 150}]']
    doc = _profile(tmp_path, capsys, *[x for item in budget for x in ("--set", item)])
    assert doc["bottleneck"] == "rollout", doc
    assert "bigger KV budget" in doc["advice"]
    assert doc["actors"]["rollout"]["busy"] >= 0.5
    assert set(doc["actors"]) == {"learner", "scheduler", "rollout", "sandbox", "reward"}
    assert {"gen", "tool", "reward", "learner", "sync"} <= set(doc["stages"])
    assert doc["steps"] == 1
    [run_dir] = tmp_path.glob("run-*")
    assert (run_dir / "metrics.jsonl").is_file()
    trace = json.loads((tmp_path / "trace.json").read_text())
    assert check_chrome_trace(trace) == []
    threads = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    assert {"learner.0", "scheduler.0", "rollout.0", "rollout.0/engine", "sandbox.0"} <= threads
    counters = {e["name"] for e in trace["traceEvents"] if e["ph"] == "C"}
    assert "rollout.0/engine kv_used" in counters
