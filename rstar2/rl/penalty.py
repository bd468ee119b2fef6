"""RoC penalties of one trajectory: tool-call errors (p_err) and answer format (p_format).

    p_err    = (tool_errors + tool_timeouts) / tool_calls, or 0.5 when there was no tool call
    p_format = 1 when there is no <answer> tag, else min(1, (answer_tags - 1) / turns)

A trajectory that used no tool is neither clean nor faulty, hence the middle value 0.5 (the
paper's choice). One answer tag costs nothing; each extra one costs 1/turns. The inputs are
duck-typed: anything with the `Trajectory` fields `tool_calls`, `tool_errors`, `tool_timeouts`,
`answer_tags` and `turns` (docs/interfaces.md) works, including hand-built test records.
`tool_errors` and `tool_timeouts` are disjoint counts; their sum above `tool_calls` is a
ValueError, as is any negative count.

What it does not do: look at the text (the rollout actor counts tags and errors as it goes).
"""

from __future__ import annotations

from typing import Protocol


class PenaltyRecord(Protocol):
    tool_calls: int
    tool_errors: int
    tool_timeouts: int
    answer_tags: int
    turns: int


def tool_error_penalty(t: PenaltyRecord) -> float:
    """p_err: the share of tool calls that errored or timed out (0.5 without tool calls)."""
    calls, failed = t.tool_calls, t.tool_errors + t.tool_timeouts
    if min(calls, t.tool_errors, t.tool_timeouts) < 0:
        raise ValueError(
            f"negative tool counts: calls={calls} errors={t.tool_errors} timeouts={t.tool_timeouts}"
        )
    if failed > calls:
        raise ValueError(
            f"{failed} failed tool calls out of {calls}: errors and timeouts "
            "must be disjoint subsets of tool_calls"
        )
    return 0.5 if calls == 0 else failed / calls


def format_penalty(t: PenaltyRecord) -> float:
    """p_format: 1 without an <answer> tag, else min(1, (answer_tags - 1) / turns)."""
    if t.answer_tags < 0 or t.turns < 0:
        raise ValueError(f"negative counts: answer_tags={t.answer_tags} turns={t.turns}")
    if t.answer_tags == 0:
        return 1.0
    if t.turns == 0:  # tags without a turn cannot happen in a well-formed record
        raise ValueError(f"{t.answer_tags} answer tags in 0 turns")
    return min(1.0, (t.answer_tags - 1) / t.turns)


def total_penalty(t: PenaltyRecord, use_errors: bool = True, use_format: bool = True) -> float:
    """p_total = p_err + p_format (either term can be switched off for ablations)."""
    total = 0.0
    if use_errors:
        total += tool_error_penalty(t)
    if use_format:
        total += format_penalty(t)
    return total
