"""SFT traces for the embedded task: chat messages that demonstrate the tool-call format.

A trace is a list of chat messages (`{"role": ..., "content": ...}`, roles `user`, `assistant`,
`tool`) in the layout of docs/format.md: the assistant writes one short line and a
`<tool_call>` with `print(<expression>)`, the tool answers `Tool call success\\n<stdout>`, and the
assistant closes with `<answer>The answer is \\boxed{N}</answer>`. A configurable share of traces
first makes a typo (a misspelt `print` -> NameError, or a missing parenthesis -> SyntaxError),
reads the `Tool call failure` response, and fixes the call.

Tool outputs are computed with plain Python from our own expressions, never by running code:
the texts mirror what the sandbox (`rstar2.sandbox.runner.format_error`) + the rollout's tool
formatter produce for the embedded default (no execution-time line). No system message is included; the chat template supplies the default.

What it does not do: tokenization and loss masks (see `rstar2.model.chat_format`).
"""

from __future__ import annotations

import json
import random
from typing import Literal

from rstar2.format_markers import ANSWER, ANSWER_END, TOOL_CALL, TOOL_CALL_END
from rstar2.tasks.arithmetic import ArithmeticProblem

TOOL_NAME = "execute_python_code_with_standard_io"
"""The paper's tool name (docs/format.md)."""

TOOL_SCHEMA: dict[str, object] = {
    "type": "function",
    "function": {
        "name": TOOL_NAME,
        "description": "Run Python code; stdin is given by `input`. Returns stdout and stderr.",
        "parameters": {
            "type": "object",
            "properties": {
                "code": {"type": "string", "description": "Python source to run"},
                "input": {"type": "string", "description": "text on stdin", "default": ""},
            },
            "required": ["code"],
        },
    },
}
"""The tool's JSON schema, as rendered in the system block when tools are shown."""

Message = dict[str, str]
Mistake = Literal["none", "name", "syntax"]

_OPENERS = ("Let me compute this with Python.", "I will use Python.", "Let me run the code.")
_FIXES = ("That was a typo. Let me fix it.", "I made a mistake. Fixing it.")


def tool_call_text(code: str, stdin: str = "") -> str:
    """The `<tool_call>` block for `code`, exactly as docs/format.md writes it."""
    call = json.dumps({"name": TOOL_NAME, "arguments": {"code": code, "input": stdin}})
    return f"{TOOL_CALL}\n{call}\n{TOOL_CALL_END}"


def tool_success_text(stdout: str) -> str:
    """Tool response text of a successful run (no execution-time line, as the embedded default)."""
    return f"Tool call success\n{stdout}"


def tool_error_text(error_type: str, line: int, message: str, source_line: str) -> str:
    """Tool response text of a run that raised, as the sandbox reports it on stderr:
    `<Type> at line N: message` and the offending line, indented by four spaces."""
    return f"Tool call failure\nerror\n{error_type} at line {line}: {message}\n    {source_line}\n"


def answer_text(answer: str) -> str:
    return f"{ANSWER}The answer is \\boxed{{{answer}}}{ANSWER_END}"


def _mistake_call(expression: str, mistake: Mistake) -> tuple[str, str]:
    """A faulty first call and the error text the sandbox returns for it."""
    if mistake == "name":
        code = f"prnt({expression})"
        return code, tool_error_text("NameError", 1, "name 'prnt' is not defined", code)
    if mistake == "syntax":
        code = f"print({expression}"
        return code, tool_error_text("SyntaxError", 1, "'(' was never closed", code)
    raise ValueError(f"unknown mistake kind {mistake!r}")


def build_trace(
    problem: ArithmeticProblem, rng: random.Random, mistake: Mistake = "none"
) -> list[Message]:
    """The chat messages of one worked solution of `problem` (user turn first)."""
    code = f"print({problem.expression})"
    messages: list[Message] = [{"role": "user", "content": problem.problem}]
    opener = rng.choice(_OPENERS)
    if mistake != "none":
        bad_code, error = _mistake_call(problem.expression, mistake)
        messages.append({"role": "assistant", "content": f"{opener}\n{tool_call_text(bad_code)}"})
        messages.append({"role": "tool", "content": error})
        opener = rng.choice(_FIXES)
    messages.append({"role": "assistant", "content": f"{opener}\n{tool_call_text(code)}"})
    messages.append({"role": "tool", "content": tool_success_text(problem.answer + "\n")})
    messages.append({"role": "assistant", "content": answer_text(problem.answer)})
    return messages


def build_traces(
    problems: list[ArithmeticProblem], seed: int = 0, mistake_fraction: float = 0.15
) -> list[list[Message]]:
    """One trace per problem; about `mistake_fraction` of them fix a failed first call."""
    if not 0.0 <= mistake_fraction <= 1.0:
        raise ValueError(f"mistake_fraction must be in [0, 1], got {mistake_fraction}")
    rng = random.Random(seed)
    traces = []
    for problem in problems:
        mistake: Mistake = "none"
        if rng.random() < mistake_fraction:
            mistake = rng.choice(("name", "syntax"))
        traces.append(build_trace(problem, rng, mistake))
    return traces
