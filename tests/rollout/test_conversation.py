"""A response text cut into turns: assistant words, tool calls, tool responses."""

from __future__ import annotations

import json

from rstar2.format_markers import (
    EOS,
    IM_END,
    RESPONSE_PREFIX,
    RESPONSE_SUFFIX,
    TOOL_CALL,
    TOOL_CALL_END,
)
from rstar2.rollout.conversation import conversation, logprob_summary


def call(code: str) -> str:
    body = json.dumps({"name": "execute_python_code_with_standard_io", "arguments": {"code": code}})
    return f"{TOOL_CALL}\n{body}\n{TOOL_CALL_END}"


def test_two_turns_with_a_call_and_its_response() -> None:
    text = (
        f"Let me compute.\n{call('print(6*7)')}{RESPONSE_PREFIX}Tool call success\n42\n"
        f"{RESPONSE_SUFFIX}<answer>\\boxed{{42}}</answer>{IM_END}"
    )
    turns = conversation(text)
    assert [t["role"] for t in turns] == ["assistant", "tool", "assistant"]
    assert turns[0]["text"] == "Let me compute.\n"
    assert turns[0]["code"] == "print(6*7)" and turns[0]["input"] == ""
    assert turns[1] == {"role": "tool", "text": "Tool call success\n42\n", "failed": False}
    assert turns[2] == {"role": "assistant", "text": "<answer>\\boxed{42}</answer>", "call": ""}


def test_a_failed_call_and_a_malformed_one_are_marked() -> None:
    text = (
        f"{TOOL_CALL}\nnot json\n{TOOL_CALL_END}{RESPONSE_PREFIX}Tool call failure\ninvalid JSON"
        f"{RESPONSE_SUFFIX}again{EOS}"
    )
    turns = conversation(text)
    assert turns[0]["call"] == "not json" and "invalid JSON" in str(turns[0]["call_error"])
    assert turns[1]["failed"] is True
    assert turns[2]["text"] == "again"


def test_a_response_cut_inside_a_tool_response_keeps_what_is_there() -> None:
    turns = conversation(f"x{call('1')}{RESPONSE_PREFIX}Tool call succ")
    assert turns[-1] == {"role": "tool", "text": "Tool call succ", "failed": False}


def test_no_response_is_no_turn() -> None:
    assert conversation("") == []


def test_logprob_summary_counts_the_sampled_tokens_only() -> None:
    assert logprob_summary([0.0, -1.0, -3.0, 0.0], [0, 1, 1, 0]) == {
        "tokens": 2,
        "mean": -2.0,
        "min": -3.0,
    }
    assert logprob_summary([0.0], [0]) == {"tokens": 0, "mean": 0.0, "min": 0.0}
