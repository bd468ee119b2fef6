"""Answer extraction: the final `\\boxed{...}` value of a model response.

Rule (docs/format.md): take the last `\\boxed{...}` inside the last `<answer>...</answer>` block
when that block holds one, else the last `\\boxed{...}` anywhere in the response. An unclosed
last `<answer>` (a response cut at the token budget) counts as running to the end of the text.
Accepted forms: `\\boxed{X}` with nested braces (escaped `\\{`/`\\}` do not count as grouping),
`\\boxed X` (a bare token after whitespace, ended by whitespace or `$`) and `\\fbox{X}`. The
value is returned stripped; an empty or unbalanced box is not an answer.

The scan is linear in the length of the response (brace matching is one pass with a stack), so
an adversarial response of many unclosed boxes cannot stall the caller.

What it does not do: judge the value (see `normalizer` and the verifier worker).
"""

from __future__ import annotations

import re

from rstar2.format_markers import ANSWER, ANSWER_END

_BOX = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")


def extract_answer(response: str) -> str | None:
    """The last boxed value (inside the last `<answer>` block when it has one), or None."""
    if not isinstance(response, str):
        raise TypeError(f"response must be a str, got {type(response).__name__}")
    block = last_answer_block(response)
    if block is not None:
        inside = last_boxed(block)
        if inside is not None:
            return inside
    return last_boxed(response)


def last_answer_block(text: str) -> str | None:
    """Text of the last `<answer>` block (to its `</answer>` or the end), or None."""
    start = text.rfind(ANSWER)
    if start < 0:
        return None
    body_start = start + len(ANSWER)
    end = text.find(ANSWER_END, body_start)
    return text[body_start:] if end < 0 else text[body_start:end]


def last_boxed(text: str) -> str | None:
    """The stripped value of the last well-formed, non-empty box in `text`, or None."""
    matches = _match_braces(text)
    for m in reversed(list(_BOX.finditer(text))):
        value = _box_value(text, m.end(), matches)
        if value:
            return value
    return None


def _box_value(text: str, pos: int, matches: dict[int, int]) -> str | None:
    """The value of a box macro whose name ends at `pos` (None when malformed)."""
    i = pos
    while i < len(text) and text[i] in " \t":
        i += 1
    if i < len(text) and text[i] == "{":
        close = matches.get(i)
        return None if close is None else text[i + 1 : close].strip()
    if i == pos:  # `\boxedX` is another macro name, not a box
        return None
    j = i
    while j < len(text) and not text[j].isspace() and text[j] != "$":
        j += 1
    return text[i:j] or None


def _match_braces(text: str) -> dict[int, int]:
    """Map each balanced `{` position to its `}` in one pass; `\\{` and `\\}` are skipped."""
    matches: dict[int, int] = {}
    stack: list[int] = []
    i = 0
    n = len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c == "{":
            stack.append(i)
        elif c == "}" and stack:
            matches[stack.pop()] = i
        i += 1
    return matches
