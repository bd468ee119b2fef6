from __future__ import annotations

import json
import random

import pytest

from rstar2.tasks import (
    TOOL_NAME,
    TaskConfig,
    build_trace,
    build_traces,
    generate_problems,
    tool_call_text,
)

PROBLEM = generate_problems(TaskConfig(train_size=1), "train")[0]


def _call(message: dict[str, str]) -> dict:
    body = message["content"].split("<tool_call>\n", 1)[1].removesuffix("\n</tool_call>")
    return json.loads(body)


def test_plain_trace_layout() -> None:
    trace = build_trace(PROBLEM, random.Random(0))
    assert [m["role"] for m in trace] == ["user", "assistant", "tool", "assistant"]
    call = _call(trace[1])
    assert call == {
        "name": TOOL_NAME,
        "arguments": {"code": f"print({PROBLEM.expression})", "input": ""},
    }
    assert trace[2]["content"] == f"Tool call success\n{PROBLEM.answer}\n"
    assert trace[3]["content"] == f"<answer>The answer is \\boxed{{{PROBLEM.answer}}}</answer>"


@pytest.mark.parametrize(
    ("mistake", "error"),
    [
        ("name", "NameError at line 1: name 'prnt' is not defined"),
        ("syntax", "SyntaxError at line 1: '(' was never closed"),
    ],
)
def test_mistake_trace_fails_then_fixes(mistake: str, error: str) -> None:
    trace = build_trace(PROBLEM, random.Random(0), mistake)  # type: ignore[arg-type]
    assert [m["role"] for m in trace] == ["user"] + ["assistant", "tool"] * 2 + ["assistant"]
    bad = _call(trace[1])["arguments"]["code"]
    assert trace[2]["content"] == f"Tool call failure\nerror\n{error}\n    {bad}\n"
    # the faulty code really fails that way in Python
    with pytest.raises(NameError if mistake == "name" else SyntaxError):
        exec(compile(bad, "<code>", "exec"), {})
    assert _call(trace[3])["arguments"]["code"] == f"print({PROBLEM.expression})"


def test_mistake_fraction_is_respected() -> None:
    problems = generate_problems(TaskConfig(train_size=400), "train")
    traces = build_traces(problems, seed=3, mistake_fraction=0.25)
    failed = sum(len(t) > 4 for t in traces)
    assert 60 < failed < 140
    assert build_traces(problems, seed=3, mistake_fraction=0.25) == traces
    assert all(len(t) == 4 for t in build_traces(problems, mistake_fraction=0.0))


def test_tool_call_text_escapes_code() -> None:
    text = tool_call_text('print("a\\nb")')
    assert json.loads(text.split("\n")[1])["arguments"]["code"] == 'print("a\\nb")'


def test_bad_mistake_fraction() -> None:
    with pytest.raises(ValueError):
        build_traces([PROBLEM], mistake_fraction=2.0)
