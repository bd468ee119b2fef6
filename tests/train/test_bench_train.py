"""`rstar2 bench train`: the figures it prints are computed from the metrics rows."""

from __future__ import annotations

import subprocess
import sys

import pytest

from rstar2.commands.bench_train import summarize


def row(step_s: float, gen_tokens: float) -> dict:
    return {
        "step_s": step_s,
        "gen_tokens": gen_tokens,
        "time_gen_s": step_s / 2,
        "time_tool_s": 0.1,
        "time_reward_s": 0.05,
        "time_learner_s": 0.2,
        "time_sync_s": 0.05,
        "tool_calls_mean": 1.0,
    }


def test_summarize_exact() -> None:
    out = summarize([row(2.0, 1000.0), row(4.0, 2000.0)], completions_per_step=64)
    assert out["step_s"] == 3.0
    assert out["completions_per_s"] == pytest.approx(64 / 3)
    assert out["gen_tokens_per_s"] == pytest.approx(500.0)
    assert out["split_s"]["optimisation"] == pytest.approx(0.25)
    with pytest.raises(ValueError):
        summarize([], 64)


def test_steps_must_leave_a_timed_step() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "rstar2.cli", "bench", "train", "--steps", "1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2 and "--steps" in out.stderr and "Traceback" not in out.stderr
