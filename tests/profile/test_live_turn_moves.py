"""Turn moves in the live trainer graph: with two engines and `scheduler.move_turns`, a later
turn runs where the scheduler routes it, on the other rollout worker's engine
(`rstar2.rollout.turn_router.RoutedEngine`, `Dispatcher.route`). Round robin hands each request,
first turns and later turns alike, to the next engine in one cycle, so about half of the later
turns land on the other engine (none moving among ~16 has probability ~2^-16)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rstar2.cli import main
from rstar2.metrics import read_metrics
from tests.profile.tool_policy import ToolPolicy

SETS = ["prompts_per_step=4", "rollouts_per_prompt=4", "rl.group_size=2", "graph.engines=2"]


def _step(tmp_path: Path, capsys: pytest.CaptureFixture[str], policy: ToolPolicy, *sets: str):
    argv = ["-q", "profile", "--steps", "1", "--out", str(tmp_path), "--json", "--timeout", "240"]
    overrides = [x for s in [*policy.sets, *SETS, *sets] for x in ("--set", s)]
    assert main([*argv, *overrides, "--model", str(policy.path)]) == 0
    doc = json.loads(capsys.readouterr().out)
    [run_dir] = tmp_path.glob("run-*")
    [row] = [r for r in read_metrics(run_dir / "metrics.jsonl") if "time_gen_s" in r]
    return doc, row


@pytest.mark.slow
def test_round_robin_moves_later_turns_to_the_other_engine(
    tool_policy: ToolPolicy, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # two processes: the route requests cross from the engines' process to the scheduler's
    doc, row = _step(
        tmp_path, capsys, tool_policy, 'scheduler.policy="round_robin"', "graph.processes=2"
    )
    assert row["tool_calls_mean"] >= 0.5, row
    later_turns = row["tool_calls_mean"] * 16  # 16 rollouts; a turn follows each tool call
    assert 1 <= row["moved_turns"] <= later_turns, row
    assert row["reward_mean"] > 0, row  # moved turns still reach answers the reward accepts
    assert doc["steps"] == 1


@pytest.mark.slow
def test_without_turn_moves_every_turn_stays_on_its_engine(
    tool_policy: ToolPolicy, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, row = _step(
        tmp_path,
        capsys,
        tool_policy,
        'scheduler.policy="round_robin"',
        "scheduler.move_turns=false",
    )
    assert row["tool_calls_mean"] >= 0.5, row
    assert row["moved_turns"] == 0, row
