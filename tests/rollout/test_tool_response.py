"""Tool response texts match docs/format.md, with truncation and the optional time line."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from rstar2.rollout.tool_response import TRUNCATED_MARKER, format_malformed, format_result


@dataclass
class Result:
    status: str = "ok"
    stdout: str = ""
    stderr: str = ""
    wall_s: float = 0.012
    truncated: bool = False


def test_success_with_time():
    text = format_result(Result(stdout="3367\n"), max_chars=100, show_time=True)
    assert text == "Tool call success\n3367\n\nExecution time: 0.01s"


def test_success_without_time():
    text = format_result(Result(stdout="42\n"), max_chars=100, show_time=False)
    assert text == "Tool call success\n42\n"


def test_success_with_stderr_is_labelled():
    text = format_result(Result(stdout="1", stderr="warn"), max_chars=100, show_time=False)
    assert text == "Tool call success\n1\nstderr:\nwarn"


def test_failure_gives_reason_then_output():
    res = Result(
        status="error", stdout="partial\n", stderr="ZeroDivisionError at line 2: division by zero"
    )
    text = format_result(res, max_chars=200, show_time=True)
    assert (
        text == "Tool call failure\nerror\npartial\nZeroDivisionError at line 2: division by zero"
    )


def test_timeout_failure_has_no_time_line():
    text = format_result(Result(status="timeout", wall_s=5.0), max_chars=100, show_time=True)
    assert text == "Tool call failure\ntimeout\n"


def test_long_output_is_cut_with_marker():
    text = format_result(Result(stdout="x" * 50), max_chars=10, show_time=False)
    assert text == "Tool call success\n" + "x" * 10 + TRUNCATED_MARKER


def test_output_cut_by_sandbox_is_marked():
    text = format_result(Result(stdout="abc", truncated=True), max_chars=10, show_time=False)
    assert text.endswith("abc" + TRUNCATED_MARKER)


def test_bad_max_chars_is_rejected():
    with pytest.raises(ValueError, match="max_chars"):
        format_result(Result(), max_chars=0, show_time=False)


def test_malformed():
    assert format_malformed('missing "name"') == 'Tool call failure\nmissing "name"'
