"""The per-trajectory state machine: masks, logprobs, budget, turn limit, finish reasons."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rstar2.finish_reason import TRUNCATED_REASONS
from rstar2.rollout.trajectory import (
    TrajectoryState,
    TurnStop,
    classify_stop,
    count_answer_tags,
)

PROMPT = [7, 8, 9]
CALL_END, IM_END, EOS = 4, 2, 0
ENDS = frozenset({IM_END, EOS})


def state(budget: int = 100, max_turns: int = 5) -> TrajectoryState:
    return TrajectoryState(PROMPT, budget=budget, max_turns=max_turns)


def test_masks_and_logprobs_over_turns_and_tool_tokens():
    s = state()
    s.add_turn([10, 11, CALL_END], [-0.1, -0.2, -0.3], TurnStop.CALL, answer_tags=0)
    assert s.awaiting_tool and not s.finished
    s.add_tool_response([20, 21], failed=False, timed_out=False)
    s.add_turn([12, IM_END], [-0.4, -0.5], TurnStop.END, answer_tags=1)
    t = s.to_trajectory("p", 0, "text")
    assert t.token_ids == [7, 8, 9, 10, 11, CALL_END, 20, 21, 12, IM_END]
    assert t.loss_mask == [0, 0, 0, 1, 1, 1, 0, 0, 1, 1]
    assert t.logprobs == [0.0, 0.0, 0.0, -0.1, -0.2, -0.3, 0.0, 0.0, -0.4, -0.5]
    assert (t.turns, t.tool_calls, t.tool_errors, t.answer_tags) == (2, 1, 0, 1)
    assert t.finish_reason == "answer"
    assert t.prompt_len == 3 and t.response_tokens == 7


def test_tool_latencies_are_kept_by_turn():
    """Turn k's call's wall seconds at index k (0.0: none ran), not parsed from a request id."""
    s = state()
    s.add_turn([10, CALL_END], [-1.0] * 2, TurnStop.CALL, answer_tags=0)
    s.add_tool_response([20], failed=False, timed_out=False, latency=0.5)
    s.add_turn([11, CALL_END], [-1.0] * 2, TurnStop.CALL, answer_tags=0)
    s.add_tool_response([22], failed=True, timed_out=False)  # a malformed call: none ran
    s.add_turn([13, CALL_END], [-1.0] * 2, TurnStop.CALL, answer_tags=0)
    s.add_tool_response([21], failed=True, timed_out=False, latency=0.25)
    s.add_turn([14, IM_END], [-1.0] * 2, TurnStop.END, answer_tags=1)
    assert s.to_trajectory("p", 0, "text").tool_latencies == [0.5, 0.0, 0.25, 0.0]


def test_turn_without_call_or_answer():
    s = state()
    s.add_turn([10, IM_END], [-1.0, -1.0], TurnStop.END, answer_tags=0)
    assert s.finish_reason == "no_tool_call"


def test_budget_is_shared_and_tool_tokens_are_cut():
    s = state(budget=6)
    s.add_turn([10, 11, CALL_END], [-1.0] * 3, TurnStop.CALL, answer_tags=0)
    assert s.remaining == 3
    s.add_tool_response([20, 21, 22, 23, 24], failed=False, timed_out=False)
    assert s.finish_reason == "budget"
    assert s.token_ids[3:] == [10, 11, CALL_END, 20, 21, 22]
    assert s.used == 6 and s.tool_calls == 1


def test_tool_response_that_exactly_fills_the_budget_ends_it():
    s = state(budget=5)
    s.add_turn([10, CALL_END], [-1.0] * 2, TurnStop.CALL, answer_tags=0)
    s.add_tool_response([20, 21, 22], failed=False, timed_out=False)
    assert s.finish_reason == "budget"


def test_length_stop_is_budget():
    s = state(budget=3)
    s.add_turn([10, 11, 12], [-1.0] * 3, TurnStop.LENGTH, answer_tags=0)
    assert s.finish_reason == "budget"
    assert s.to_trajectory("p", 1, "").finish_reason in TRUNCATED_REASONS


def test_call_at_the_last_budget_token_ends_without_a_response():
    s = state(budget=2)
    s.add_turn([10, CALL_END], [-1.0] * 2, TurnStop.CALL, answer_tags=0)
    assert s.finish_reason == "budget" and s.tool_calls == 0


def test_turn_limit_stops_before_executing_the_call():
    s = state(max_turns=2)
    s.add_turn([10, CALL_END], [-1.0] * 2, TurnStop.CALL, answer_tags=0)
    s.add_tool_response([20], failed=True, timed_out=False)
    s.add_turn([11, CALL_END], [-1.0] * 2, TurnStop.CALL, answer_tags=0)
    assert s.finish_reason == "turns"
    assert (s.turns, s.tool_calls, s.tool_errors) == (2, 1, 1)


def test_timeouts_and_errors_are_disjoint_counts():
    s = state()
    for failed, timed_out in [(True, True), (True, False), (False, False)]:
        s.add_turn([10, CALL_END], [-1.0] * 2, TurnStop.CALL, answer_tags=0)
        s.add_tool_response([20], failed=failed, timed_out=timed_out)
    assert (s.tool_calls, s.tool_errors, s.tool_timeouts) == (3, 1, 1)
    s.add_turn([IM_END], [-1.0], TurnStop.END, answer_tags=0)
    assert s.to_trajectory("p", 0, "").failed_tool_calls == 2


def test_abort():
    s = state()
    s.add_turn([10], [-1.0], TurnStop.ABORT, answer_tags=0)
    assert s.finish_reason == "abort"


def test_misuse_is_rejected():
    s = state(budget=4)
    with pytest.raises(ValueError, match="logprobs"):
        s.add_turn([10, 11], [-1.0], TurnStop.END, answer_tags=0)
    with pytest.raises(ValueError, match="exceeds"):
        s.add_turn([1, 2, 3, 4, 5], [0.0] * 5, TurnStop.LENGTH, answer_tags=0)
    with pytest.raises(RuntimeError, match="pending"):
        s.add_tool_response([1], failed=False, timed_out=False)
    with pytest.raises(RuntimeError, match="finished"):
        s.to_trajectory("p", 0, "")
    s.add_turn([10, IM_END], [0.0, 0.0], TurnStop.END, answer_tags=0)
    with pytest.raises(RuntimeError, match="finished"):
        s.add_turn([10], [0.0], TurnStop.END, answer_tags=0)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"prompt_ids": []}, "prompt"), ({"budget": 0}, "budget"), ({"max_turns": 0}, "max_turns")],
)
def test_bad_construction(kwargs: dict, match: str):
    args = {"prompt_ids": PROMPT, "budget": 10, "max_turns": 2, **kwargs}
    with pytest.raises(ValueError, match=match):
        TrajectoryState(**args)


@pytest.mark.parametrize(
    ("tokens", "reason", "expected"),
    [
        ([1, CALL_END], "stop", TurnStop.CALL),
        ([1, IM_END], "stop", TurnStop.END),
        ([1, EOS], "stop", TurnStop.END),
        ([1, 1], "length", TurnStop.LENGTH),
        ([1, CALL_END], "length", TurnStop.CALL),
        ([1], "abort", TurnStop.ABORT),
        ([], "length", TurnStop.LENGTH),
    ],
)
def test_classify_stop(tokens: list[int], reason: str, expected: TurnStop):
    assert classify_stop(tokens, reason, CALL_END, ENDS) is expected


def test_count_answer_tags():
    assert count_answer_tags("<answer>a</answer> x <answer>b</answer>") == 2
    assert count_answer_tags("no tags </answer>") == 0


@given(
    budget=st.integers(1, 60),
    max_turns=st.integers(1, 6),
    turns=st.lists(st.tuples(st.integers(1, 20), st.booleans(), st.integers(0, 25)), max_size=8),
)
def test_any_run_keeps_lengths_equal_and_within_budget(
    budget: int, max_turns: int, turns: list[tuple[int, bool, int]]
):
    s = TrajectoryState(PROMPT, budget=budget, max_turns=max_turns)
    for n, calls, response in turns:
        if s.finished:
            break
        n = min(n, s.remaining)
        stop = TurnStop.CALL if calls else TurnStop.END
        s.add_turn([10] * (n - 1) + [CALL_END if calls else IM_END], [-1.0] * n, stop, 0)
        if s.awaiting_tool:
            s.add_tool_response([20] * response, failed=False, timed_out=False)
    assert len(s.token_ids) == len(s.loss_mask) == len(s.logprobs)
    assert 0 <= s.used <= budget and s.turns <= max_turns
    assert all((m == 1) == (lp != 0.0) for m, lp in zip(s.loss_mask, s.logprobs, strict=True))
    assert s.loss_mask[: s.prompt_len] == [0] * s.prompt_len
