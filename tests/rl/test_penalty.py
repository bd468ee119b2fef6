from __future__ import annotations

import pytest

from rstar2.rl.penalty import format_penalty, tool_error_penalty, total_penalty

from .records import Rec


@pytest.mark.parametrize(
    ("calls", "errors", "timeouts", "expected"),
    [(0, 0, 0, 0.5), (4, 0, 0, 0.0), (4, 1, 0, 0.25), (4, 1, 1, 0.5), (3, 2, 1, 1.0)],
)
def test_tool_error_penalty(calls: int, errors: int, timeouts: int, expected: float) -> None:
    rec = Rec(tool_calls=calls, tool_errors=errors, tool_timeouts=timeouts)
    assert tool_error_penalty(rec) == expected


@pytest.mark.parametrize(
    ("tags", "turns", "expected"),
    [(0, 3, 1.0), (1, 3, 0.0), (2, 4, 0.25), (3, 4, 0.5), (9, 2, 1.0)],
)
def test_format_penalty(tags: int, turns: int, expected: float) -> None:
    assert format_penalty(Rec(answer_tags=tags, turns=turns)) == expected


def test_total_penalty_and_switches() -> None:
    rec = Rec(tool_calls=4, tool_errors=1, answer_tags=2, turns=4)
    assert total_penalty(rec) == 0.5
    assert total_penalty(rec, use_format=False) == 0.25
    assert total_penalty(rec, use_errors=False) == 0.25
    assert total_penalty(rec, use_errors=False, use_format=False) == 0.0


@pytest.mark.parametrize(
    "rec",
    [
        Rec(tool_calls=1, tool_errors=1, tool_timeouts=1),
        Rec(tool_calls=-1),
        Rec(tool_errors=-1),
    ],
)
def test_inconsistent_tool_counts_are_errors(rec: Rec) -> None:
    with pytest.raises(ValueError):
        tool_error_penalty(rec)


def test_inconsistent_format_counts_are_errors() -> None:
    with pytest.raises(ValueError, match="0 turns"):
        format_penalty(Rec(answer_tags=1, turns=0))
    with pytest.raises(ValueError, match="negative"):
        format_penalty(Rec(answer_tags=-1))
