"""`graph.worker_processes`: each rollout worker in a process of its own changes no result."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import torch

from rstar2.learner.checkpoint import read_policy
from rstar2.metrics import read_metrics
from tests.profile.tool_policy import ToolPolicy
from tests.train.test_train_run import train_cmd


@pytest.mark.slow
def test_two_engines_in_processes_of_their_own_train_as_two_in_one(
    tmp_path: Path, tool_policy: ToolPolicy
) -> None:
    """From the SFT'd tool policy (it earns reward, so every step updates the policy), three RL
    steps with two engines: in the learner's process, and each in a process of its own
    (`engines-0`, `engines-1`, the weights copied to them over ipc). Every trajectory samples
    from its own seed, so whichever engine the scheduler gives it, the metrics and the final
    weights are the same; only timings, the engines' own counters and the turns the scheduler
    moved to the other engine differ."""
    sets = tool_policy.rl_sets(
        3, "heldout_problems=4", "checkpoint_every=3", "rollout.tool_show_time=false",
        "graph.engines=2",
    )  # fmt: skip
    runs, logs = {}, {}
    for name, extra in (("one", []), ("own", ["graph.worker_processes=true"])):
        run = tmp_path / name
        argv = [x for s in [*sets, *extra] for x in ("--set", s)]
        cmd = [c for c in train_cmd() if c != "-q"]  # the log says where each actor runs
        out = subprocess.run(
            [*cmd, "--run-dir", str(run), *argv], capture_output=True, text=True, timeout=600
        )
        assert out.returncode == 0, out.stderr[-3000:]
        logs[name] = out.stderr
        runs[name] = [r for r in read_metrics(run / "metrics.jsonl") if r.get("stage") == "rl1"]
    assert "process engines" not in logs["one"]
    for k in (0, 1):
        assert f"process engines-{k} (pid" in logs["own"] and f"): rollout.{k}\n" in logs["own"]
    one, own = runs["one"], runs["own"]
    assert [r["trained_rollouts"] > 0 for r in one] == [True] * 3, one
    assert all(r["weights_bus_bytes"] > 100_000 for r in own)  # copies, to both
    # the workers' event loops: in the learner's process the same thread as the learner's
    # loop, over a part of its window; in their own processes measured there
    assert all(0.0 < r["worker_loop_cpu_s"] <= r["loop_cpu_s"] for r in one), one
    assert all(r["worker_loop_cpu_s"] > 0.0 for r in own), own
    # timings, and the scheduler's choices (which engine runs a later turn), arrival-dependent
    timing = (
        "time_",
        "step_s",
        "wall_s",
        "weights_",
        "engine_",
        "loop_cpu_s",
        "worker_loop_cpu_s",
        "moved_turns",
    )
    for a, b in zip(own, one, strict=True):
        assert a.keys() == b.keys()
        for key, value in b.items():
            if key.startswith(timing):
                continue
            if isinstance(value, float):  # test_shared_weights' tolerance (float noise)
                assert a[key] == pytest.approx(value, rel=1e-3, abs=1e-5), (key, a, b)
            else:
                assert a[key] == value, (key, a, b)
    want = read_policy(tmp_path / "one" / "checkpoints" / "step-000003")
    got = read_policy(tmp_path / "own" / "checkpoints" / "step-000003")
    for name, tensor in want["model"].items():
        torch.testing.assert_close(got["model"][name], tensor, rtol=1e-4, atol=1e-5, msg=name)
