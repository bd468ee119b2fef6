"""Formatting what the model reads inside `<tool_response>`: executor results and call errors.

Texts follow docs/format.md exactly:
- success: `Tool call success\\n` + stdout (+ `\\nstderr:\\n` + stderr) (+ `\\nExecution time: 0.01s`);
- failure: `Tool call failure\\n` + reason (`timeout`, `error`, `memory`, ...) + `\\n` + output;
- malformed call: `Tool call failure\\n` + the parser's description.
The output part (stdout and stderr) is cut to a configured number of characters and marked
`...[truncated]`, also when the sandbox already cut it.

What it does not do: tokenise the text or wrap it in the chat markup (see agent_loop.py).
"""

from __future__ import annotations

from typing import Protocol

TRUNCATED_MARKER = "...[truncated]"
SUCCESS = "Tool call success"
FAILURE = "Tool call failure"


class ExecOutcome(Protocol):
    """The fields of the sandbox's `ExecResult` that the response text uses."""

    status: str
    stdout: str
    stderr: str
    wall_s: float
    truncated: bool


def format_result(result: ExecOutcome, *, max_chars: int, show_time: bool) -> str:
    """The tool response text for one executed call."""
    if max_chars < 1:
        raise ValueError(f"max_chars must be >= 1, got {max_chars}")
    ok = result.status == "ok"
    output = (
        _labelled(result.stdout, result.stderr) if ok else _joined(result.stdout, result.stderr)
    )
    if len(output) > max_chars:
        output = output[:max_chars] + TRUNCATED_MARKER
    elif result.truncated:
        output += TRUNCATED_MARKER
    if ok:
        text = f"{SUCCESS}\n{output}"
        if show_time:
            text += f"\nExecution time: {result.wall_s:.2f}s"
        return text
    return f"{FAILURE}\n{result.status}\n{output}"


def format_malformed(error: str) -> str:
    """The tool response text for a call that could not be parsed or validated."""
    return f"{FAILURE}\n{error}"


def _labelled(stdout: str, stderr: str) -> str:
    """Success: stderr (warnings) is labelled so the model does not read it as output."""
    if not stderr:
        return stdout
    return f"{stdout}\nstderr:\n{stderr}"


def _joined(stdout: str, stderr: str) -> str:
    """Failure: output then the error text (the sandbox's `<Type> at line N: message`)."""
    if not stdout or not stderr or stdout.endswith("\n"):
        return stdout + stderr
    return f"{stdout}\n{stderr}"
