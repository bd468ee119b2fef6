"""The live trainer's rollout trace: a trajectory's loss mask and tool latencies become the
simulator's turns, and a trace of several steps replays one of them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rstar2.train.rollout_trace import trace_record
from sim.workload import Turn, load_trace


def test_runs_of_the_mask_become_turns() -> None:
    # prompt 3 | template 1 | model 4 | tool response 2 | model 3 | tool 5 | model 1
    mask = [0] * 3 + [0] + [1] * 4 + [0] * 2 + [1] * 3 + [0] * 5 + [1]
    record = trace_record("p0", 3, 64, mask, [0.25, 0.5], step=7, traj_id="t")
    assert record == {
        "step": 7,
        "traj_id": "t",
        "prompt_id": "p0",
        "prompt_tokens": 3,
        "max_response_tokens": 64,
        "turns": [
            {"model_tokens": 4, "tool_tokens": 2, "tool_latency_s": 0.25},
            {"model_tokens": 3, "tool_tokens": 5, "tool_latency_s": 0.5},
            {"model_tokens": 1, "tool_tokens": 0, "tool_latency_s": 0.0},
        ],
    }


def test_a_turn_without_a_latency_gets_zero_and_the_budget_covers_what_was_used() -> None:
    mask = [0, 0] + [1] * 5 + [0] * 4  # ends in a tool response (budget ran out after it)
    record = trace_record("p", 2, 6, mask, [])
    assert record["turns"] == [{"model_tokens": 5, "tool_tokens": 4, "tool_latency_s": 0.0}]
    assert record["max_response_tokens"] == 9


def test_bad_prompt_length_is_refused() -> None:
    with pytest.raises(ValueError, match="prompt_tokens"):
        trace_record("p", 0, 8, [1, 1], [])


def _write(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_a_trace_of_several_steps_replays_the_last_or_the_one_asked(tmp_path: Path) -> None:
    mask = [0, 0] + [1] * 3 + [0] * 2 + [1] * 2
    records = [trace_record("p", 2, 16, mask, [0.1], step=s, traj_id=f"s{s}") for s in (1, 2)]
    trace = _write(tmp_path / "t.jsonl", records)
    [last] = load_trace(trace)
    assert last.traj_id == "s2"
    assert last.turns == (Turn(3, 2, 0.1), Turn(2, 0, 0.0))
    assert [t.traj_id for t in load_trace(trace, step=1)] == ["s1"]
    with pytest.raises(ValueError, match="no records of step 5"):
        load_trace(trace, step=5)


def test_a_line_that_is_not_json_is_named(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text(
        '{"prompt_id": "p", "prompt_tokens": 2, "turns": [{"model_tokens": 1}]}\n{oops\n'
    )
    with pytest.raises(ValueError, match=r"t.jsonl:2"):
        load_trace(trace)
