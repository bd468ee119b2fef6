"""Tool-call parsing: every malformed case yields an error text, never an exception."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rstar2.rollout.tool_call import (
    TOOL_NAME,
    MalformedCall,
    ToolCall,
    extract_call_body,
    parse_tool_call,
)


def call_json(name: object = TOOL_NAME, **arguments: object) -> str:
    return json.dumps({"name": name, "arguments": arguments})


def test_well_formed_call():
    assert parse_tool_call(call_json(code="print(1)", input="5\n")) == ToolCall("print(1)", "5\n")


def test_input_defaults_to_empty():
    assert parse_tool_call(call_json(code="print(1)")) == ToolCall("print(1)", "")


def test_released_alias_is_accepted():
    body = call_json("python_code_with_standard_io", code="x=1")
    assert parse_tool_call(body) == ToolCall("x=1", "")


def test_raw_newlines_inside_strings_are_accepted():
    body = '{"name": "NAME", "arguments": {"code": "a = 1\nprint(a)"}}'.replace("NAME", TOOL_NAME)
    assert parse_tool_call(body) == ToolCall("a = 1\nprint(a)", "")


def test_extra_arguments_are_ignored():
    assert parse_tool_call(call_json(code="1", lang="py")) == ToolCall("1", "")


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ('{"name": ', "invalid JSON: "),
        ("{'name': 'x'}", "invalid JSON: Expecting property name"),
        ("", "invalid JSON: "),
        ('["a"]', "a tool call must be a JSON object, got an array"),
        ('{"arguments": {"code": "1"}}', 'missing "name"'),
        ('{"name": 3, "arguments": {}}', '"name" must be a string, got a number'),
        (f'{{"name": "{TOOL_NAME}"}}', 'missing "arguments"'),
        (
            f'{{"name": "{TOOL_NAME}", "arguments": "print(1)"}}',
            '"arguments" must be an object, got a string',
        ),
        (
            f'{{"name": "{TOOL_NAME}", "arguments": null}}',
            '"arguments" must be an object, got null',
        ),
        (f'{{"name": "{TOOL_NAME}", "arguments": {{}}}}', 'missing argument "code"'),
        (call_json(code=5), 'argument "code" must be a string, got a number'),
        (call_json(code=["x"]), 'argument "code" must be a string, got an array'),
        (call_json(code="1", input=3), 'argument "input" must be a string, got a number'),
        (call_json(code="1", input=None), 'argument "input" must be a string, got null'),
        (call_json("foo", code="1"), f'unknown tool "foo" (available: {TOOL_NAME})'),
    ],
)
def test_malformed_calls_get_an_error_text(body: str, error: str):
    result = parse_tool_call(body)
    assert isinstance(result, MalformedCall)
    assert result.error.startswith(error)


def test_unknown_name_is_reported_before_missing_arguments():
    assert parse_tool_call('{"name": "search"}') == MalformedCall(
        f'unknown tool "search" (available: {TOOL_NAME})'
    )


def test_very_long_unknown_name_is_clipped():
    result = parse_tool_call(call_json("x" * 1000, code="1"))
    assert isinstance(result, MalformedCall)
    assert len(result.error) < 200


def test_deep_nesting_is_an_error_not_a_crash():
    result = parse_tool_call("[" * 100_000 + "]" * 100_000)
    assert isinstance(result, MalformedCall)


@given(st.text(max_size=200))
def test_arbitrary_text_never_raises(body: str):
    assert isinstance(parse_tool_call(body), ToolCall | MalformedCall)


def test_extract_body_takes_the_last_opener_before_the_close():
    text = 'think <tool_call>{"a": 1}</tool_call> more <tool_call>{"b": 2}</tool_call>'
    assert extract_call_body(text) == '{"b": 2}'


def test_extract_body_without_close_is_none():
    assert extract_call_body('<tool_call>{"name": "x"') is None


def test_extract_body_without_opener_is_the_text_before_close():
    assert extract_call_body("garbage</tool_call>") == "garbage"
