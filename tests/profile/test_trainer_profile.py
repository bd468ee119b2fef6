"""`rstar2 profile` on the trainer's real actor graph (learner, scheduler, rollout worker with its
engine, sandbox, reward), one short RL step, with each actor in turn made the bottleneck by a
setting a user could also use for what-if profiling. The profile must name that actor with
its advice, measure it busy most of the time, and write a valid Chrome trace.

- engine, from the untrained tiny policy: a KV budget of about one sequence
  (`engine.kv_budget_tokens=240`; the KV-aware scheduler admits one trajectory at a time), so
  generation is serial; the profile must also see the KV cache full and ask for a bigger one.
- sandbox, reward and learner, from a policy that calls the tool (`tool_policy`, a short SFT
  once per session, see tool_policy.py; an untrained policy's tool calls are malformed, its
  answers truncated and its groups without reward signal, so none of the three would work):
  - sandbox: one worker slot and 0.3 s more per tool call (`sandbox.concurrency=1`,
    `sandbox.extra_latency_s=0.3`, the paper's tool-call time);
  - reward: one verifier and 0.2 s more per verification (`reward.workers=1`,
    `reward.extra_latency_s=0.2`);
  - learner: little generation (2 prompts x 8 rollouts) and 100 passes of the policy update
    over the kept rollouts (`learner.epochs=100`): the tiny model's update is cheap next to
    its token-by-token generation, so one pass would leave the learner at ~5% of the step.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rstar2.cli import main
from rstar2.metrics import read_metrics
from rstar2.profile.chrome_trace import check_chrome_trace
from tests.profile.tool_policy import ToolPolicy

SMALL = ["prompts_per_step=2", "rollouts_per_prompt=4", "rl.group_size=2"]
ACTORS = {"learner", "scheduler", "rollout", "sandbox", "reward"}
SLOWED = {
    # actor: (what-if settings, the step stage it stretches, advice)
    "sandbox": (
        ["prompts_per_step=4", "sandbox.concurrency=1", "sandbox.extra_latency_s=0.3"],
        "tool",
        "add sandbox workers",
    ),
    "reward": (
        ["prompts_per_step=4", "reward.workers=1", "reward.extra_latency_s=0.2"],
        "reward",
        "add reward capacity",
    ),
    "learner": (
        ["rollouts_per_prompt=8", "rl.group_size=4", "learner.epochs=100"],
        "learner",
        "the policy update dominates",
    ),
}


def _profile(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], sets: list[str], *args: str
) -> dict:
    argv = ["-q", "profile", "--steps", "1", "--out", str(tmp_path), "--json", "--timeout", "240"]
    overrides = [x for item in [*SMALL, *sets] for x in ("--set", item)]
    assert main([*argv, *overrides, *args]) == 0
    return json.loads(capsys.readouterr().out)


def _check_trace(tmp_path: Path) -> set[str]:
    """The trace is valid Chrome trace JSON; returns its thread (track) names."""
    trace = json.loads((tmp_path / "trace.json").read_text())
    assert check_chrome_trace(trace) == []
    threads = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    assert {"learner.0", "scheduler.0", "rollout.0", "rollout.0/engine", "sandbox.0"} <= threads
    return threads


@pytest.mark.slow
def test_a_one_sequence_kv_budget_makes_the_engine_the_bottleneck(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    budget = ["engine.kv_budget_tokens=240", 'stages=[{"steps": 1, "max_response_tokens": 150}]']
    doc = _profile(tmp_path, capsys, budget)
    assert doc["bottleneck"] == "rollout", doc
    assert "bigger KV budget" in doc["advice"]
    assert doc["actors"]["rollout"]["busy"] >= 0.5
    assert set(doc["actors"]) == ACTORS
    assert {"gen", "tool", "reward", "learner", "sync"} <= set(doc["stages"])
    assert doc["steps"] == 1
    [run_dir] = tmp_path.glob("run-*")
    assert (run_dir / "metrics.jsonl").is_file()
    _check_trace(tmp_path)
    trace = json.loads((tmp_path / "trace.json").read_text())
    counters = {e["name"] for e in trace["traceEvents"] if e["ph"] == "C"}
    assert "rollout.0/engine kv_used" in counters


@pytest.mark.slow
@pytest.mark.parametrize("slow", list(SLOWED))
def test_a_slowed_actor_is_named_the_bottleneck(
    slow: str, tool_policy: ToolPolicy, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sets, stage, advice = SLOWED[slow]
    doc = _profile(tmp_path, capsys, [*tool_policy.sets, *sets], "--model", str(tool_policy.path))
    assert doc["bottleneck"] == slow, doc
    assert advice in doc["advice"]
    busy = {name: a["busy"] for name, a in doc["actors"].items()}
    assert set(busy) == ACTORS
    assert busy[slow] >= 0.5 and busy[slow] == max(busy.values()), busy
    assert max(doc["stages"], key=doc["stages"].get) == stage, doc["stages"]
    # the policy did what the case needs: call the tool (and give the learner a signal)
    [run_dir] = tmp_path.glob("run-*")
    [row] = [r for r in read_metrics(run_dir / "metrics.jsonl") if "time_gen_s" in r]
    assert row["tool_calls_mean"] >= 0.5, row
    assert slow != "learner" or row["trained_rollouts"] > 0, row
    if slow == "sandbox":  # the rollout worker waits on its tool calls: not idle, evidence
        assert any(e.startswith("caller rollout") for e in doc["evidence"]), doc["evidence"]
        assert doc["actors"]["rollout"]["idle"] < 0.5, doc["actors"]["rollout"]
    _check_trace(tmp_path)
