"""One valid `Trajectory` for tests: a rollout of one prompt token and one sampled response
token that answered in its single turn without a tool call; a test passes only the fields it
cares about."""

from __future__ import annotations

from typing import Any

import msgspec

from rstar2.wire import Trajectory


def trajectory(**overrides: Any) -> Trajectory:
    """A finished trajectory with ordinary defaults (finish "answer", no tool calls), any field
    replaced by keyword. `token_ids`, `loss_mask` and `logprobs` must keep one length, and
    `prompt_len` fit them: pass them together when changing the token layout."""
    default = Trajectory(
        prompt_id="p0", sample=0, token_ids=[1, 2], loss_mask=[0, 1], logprobs=[0.0, -1.0],
        prompt_len=1, response_text="", turns=1, tool_calls=0, tool_errors=0, tool_timeouts=0,
        answer_tags=1, finish_reason="answer",
    )  # fmt: skip
    return msgspec.structs.replace(default, **overrides)
