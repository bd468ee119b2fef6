"""Parsing one hermes tool call out of an assistant turn, into a call or an error text.

The model writes `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` (docs/format.md).
Everything the model can get wrong (bad JSON, a missing or mistyped field, an unknown tool)
becomes a `MalformedCall` whose `error` is the plain description the model reads back; nothing
here raises on model output. Raw newlines inside JSON strings are accepted (`strict=False`)
because models write code that way; extra argument keys are ignored.

What it does not do: run the code, or format the executor's result (see tool_response.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from rstar2.format_markers import TOOL_CALL, TOOL_CALL_END

TOOL_NAME = "execute_python_code_with_standard_io"
"""The paper's tool name, the one the loop advertises."""

TOOL_ALIASES = frozenset({TOOL_NAME, "python_code_with_standard_io"})
"""Names accepted for the tool (the released rStar2 config calls it by the second)."""

TOOL_SCHEMA: dict[str, object] = {
    "type": "function",
    "function": {
        "name": TOOL_NAME,
        "description": "Run Python 3 code; stdin is `input`. Returns stdout, stderr and errors.",
        "parameters": {
            "type": "object",
            "properties": {
                "code": {"type": "string", "description": "the Python program"},
                "input": {"type": "string", "description": "standard input, default empty"},
            },
            "required": ["code"],
        },
    },
}
"""The JSON schema of the tool, for system prompts that list tools."""


@dataclass(frozen=True)
class ToolCall:
    """A well-formed call of the code tool."""

    code: str
    stdin: str = ""


@dataclass(frozen=True)
class MalformedCall:
    """A call the model got wrong; `error` is the text it reads back (no `Tool call failure`)."""

    error: str


def extract_call_body(turn_text: str) -> str | None:
    """The text between the last `<tool_call>` and the `</tool_call>` that ends the turn.

    Returns None when the turn contains no `</tool_call>` at all (a turn without a call).
    A `</tool_call>` with no opener yields the text before it, which then fails to parse.
    """
    end = turn_text.rfind(TOOL_CALL_END)
    if end < 0:
        return None
    start = turn_text.rfind(TOOL_CALL, 0, end)
    start = 0 if start < 0 else start + len(TOOL_CALL)
    return turn_text[start:end]


def parse_tool_call(body: str) -> ToolCall | MalformedCall:
    """Validate the JSON body of one call; every way it can be wrong gets its own message."""
    try:
        obj = json.loads(body, strict=False)
    except json.JSONDecodeError as e:
        return MalformedCall(f"invalid JSON: {e}")
    except RecursionError:
        return MalformedCall("invalid JSON: nested too deeply")
    if not isinstance(obj, dict):
        return MalformedCall(f"a tool call must be a JSON object, got {_json_type(obj)}")
    if "name" not in obj:
        return MalformedCall('missing "name"')
    name = obj["name"]
    if not isinstance(name, str):
        return MalformedCall(f'"name" must be a string, got {_json_type(name)}')
    if name not in TOOL_ALIASES:
        return MalformedCall(f'unknown tool "{_clip(name)}" (available: {TOOL_NAME})')
    if "arguments" not in obj:
        return MalformedCall('missing "arguments"')
    args = obj["arguments"]
    if not isinstance(args, dict):
        return MalformedCall(f'"arguments" must be an object, got {_json_type(args)}')
    return _parse_arguments(args)


def _parse_arguments(args: dict[str, object]) -> ToolCall | MalformedCall:
    if "code" not in args:
        return MalformedCall('missing argument "code"')
    code = args["code"]
    if not isinstance(code, str):
        return MalformedCall(f'argument "code" must be a string, got {_json_type(code)}')
    stdin = args.get("input", "")
    if not isinstance(stdin, str):
        return MalformedCall(f'argument "input" must be a string, got {_json_type(stdin)}')
    return ToolCall(code=code, stdin=stdin)


def _json_type(value: object) -> str:
    """The JSON name of a decoded value's type, for error texts the model can act on."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _clip(text: str, limit: int = 64) -> str:
    return text if len(text) <= limit else text[:limit] + "..."
