"""A rollout's response text as a conversation: assistant turns, their tool calls, tool
responses.

`conversation(response_text)` cuts the decoded response (everything after the prompt, forced
tool-response tokens included: `Trajectory.response_text`) at the forced text around each tool
response (`RESPONSE_PREFIX` ... `RESPONSE_SUFFIX`, docs/format.md) into a list of turns, each a
plain dict (what the trajectory records hold, JSON as it is):

- `{"role": "assistant", "text": ..., "call": ...}`: the model's words before its tool call
  (turn-end markers dropped); `call` is the call's body (the JSON between the call markers, ""
  when the turn made none), `code` and `input` its arguments when the call parses
  (`rollout.tool_call.parse_tool_call`), `call_error` the parser's message when it does not;
- `{"role": "tool", "text": ..., "failed": bool}`: a tool response (`Tool call failure` first:
  failed; a response cut by the token budget is what is there).

`logprob_summary(logprobs, loss_mask)` is the behaviour policy's log-probs of the sampled
tokens in three numbers (`tokens`, `mean`, `min`), what the records keep instead of the list.

What it does not do: tokenise, or judge the answer (`rstar2.reward`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from rstar2.format_markers import EOS, IM_END, RESPONSE_PREFIX, RESPONSE_SUFFIX, TOOL_CALL
from rstar2.rollout.tool_call import MalformedCall, extract_call_body, parse_tool_call
from rstar2.rollout.tool_response import FAILURE

Turn = dict[str, object]


def conversation(response_text: str) -> list[Turn]:
    """The turns of a response (see the module docstring)."""
    pieces = response_text.split(RESPONSE_PREFIX)
    turns: list[Turn] = [assistant_turn(pieces[0])]
    for piece in pieces[1:]:
        output, sep, after = piece.partition(RESPONSE_SUFFIX)
        turns.append({"role": "tool", "text": output, "failed": output.startswith(FAILURE)})
        if sep:
            turns.append(assistant_turn(after))
    if turns[0]["text"] == "" and turns[0]["call"] == "" and len(turns) == 1:
        return []  # no response at all (a prompt too long, an abort before the first token)
    return turns


def assistant_turn(text: str) -> Turn:
    """One assistant turn: its words, and its tool call parsed (see the module docstring)."""
    for end in (IM_END, EOS):
        text = text.replace(end, "")
    body = extract_call_body(text)
    turn: Turn = {"role": "assistant", "text": text, "call": ""}
    if body is None:
        return turn
    start = text.rfind(TOOL_CALL)
    turn["text"] = text[:start] if start >= 0 else ""
    turn["call"] = body.strip()
    parsed = parse_tool_call(body)
    if isinstance(parsed, MalformedCall):
        turn["call_error"] = parsed.error
    else:
        turn["code"], turn["input"] = parsed.code, parsed.stdin
    return turn


def logprob_summary(logprobs: Sequence[float], loss_mask: Sequence[int]) -> dict[str, float]:
    """The sampled tokens' log-probs: how many, their mean and their minimum (0s if none)."""
    sampled = [lp for lp, bit in zip(logprobs, loss_mask, strict=False) if bit]
    if not sampled:
        return {"tokens": 0, "mean": 0.0, "min": 0.0}
    mean = math.fsum(sampled) / len(sampled)
    return {"tokens": len(sampled), "mean": round(mean, 4), "min": round(min(sampled), 4)}
