"""Prompt rendering and conversation encoding with loss masks, for any chat tokenizer.

`render_prompt` gives the token ids of a conversation up to `<|im_start|>assistant\\n` through
the tokenizer's own chat template (so it works for the embedded model and for Qwen3 alike).
`encode_conversation` turns a full chat (user, assistant, tool messages) into token ids and a
loss mask the way the agent loop builds a trajectory: the prompt, then per assistant turn the
sampled text (mask 1) up to and including `</tool_call>` or `<|im_end|>`, then the forced
tool-response text (mask 0) of docs/format.md. Encoding segment by segment, like the agent loop,
keeps SFT tokens identical to what the loop would produce for the same text.

What it does not do: parse tool calls or run tools (rollout does), or batch (the SFT trainer does).
"""

from __future__ import annotations

from collections.abc import Sequence

from transformers import PreTrainedTokenizerBase

from rstar2.format_markers import IM_END, RESPONSE_PREFIX, RESPONSE_SUFFIX, TOOL_CALL_END

Message = dict[str, str]

TOOL_RESPONSE_OPEN = RESPONSE_PREFIX
"""Forced text after `</tool_call>`, before the tool output (docs/format.md)."""
TOOL_RESPONSE_CLOSE = RESPONSE_SUFFIX
"""Forced text after the tool output; the model generates the next assistant turn after it."""


def render_prompt(
    tokenizer: PreTrainedTokenizerBase, problem: str, system: str | None = None
) -> list[int]:
    """Token ids of system (template default if None) + user `problem` + assistant header."""
    if not isinstance(problem, str):
        raise TypeError(f"problem must be a str, got {type(problem).__name__}")
    messages: list[Message] = [] if system is None else [{"role": "system", "content": system}]
    messages.append({"role": "user", "content": problem})
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return list(tokenizer.encode(text, add_special_tokens=False))


def tool_response_ids(tokenizer: PreTrainedTokenizerBase, output: str) -> list[int]:
    """The forced (mask 0) ids that follow `</tool_call>`: the response block + next header."""
    return list(
        tokenizer.encode(
            TOOL_RESPONSE_OPEN + output + TOOL_RESPONSE_CLOSE, add_special_tokens=False
        )
    )


def _check_roles(messages: Sequence[Message]) -> None:
    if not messages or messages[0].get("role") not in ("system", "user"):
        raise ValueError("a conversation starts with a system or user message")
    body = messages[1:] if messages[0]["role"] == "user" else messages[2:]
    if messages[0]["role"] == "system" and (len(messages) < 2 or messages[1]["role"] != "user"):
        raise ValueError("a system message must be followed by a user message")
    expected = "assistant"
    for i, m in enumerate(body):
        role = m.get("role")
        if role != expected:
            raise ValueError(f"message {i}: expected role {expected!r}, got {role!r}")
        if not isinstance(m.get("content"), str):
            raise TypeError(f"message {i}: content must be a str")
        expected = "tool" if role == "assistant" else "assistant"


def encode_conversation(
    tokenizer: PreTrainedTokenizerBase, messages: Sequence[Message]
) -> tuple[list[int], list[int]]:
    """Token ids and loss mask (1 on assistant tokens) of a chat, as the agent loop builds it.

    `messages`: optional system, one user, then alternating assistant / tool messages ending
    with an assistant message. An assistant message that calls the tool must end with
    `</tool_call>`; the last one is closed with `<|im_end|>` (mask 1, the model learns to stop).
    """
    _check_roles(messages)
    if messages[-1]["role"] != "assistant":
        raise ValueError("a conversation to encode ends with an assistant message")
    system = messages[0]["content"] if messages[0]["role"] == "system" else None
    start = 1 if system is None else 2
    ids = render_prompt(tokenizer, messages[start - 1]["content"], system)
    mask = [0] * len(ids)
    for m in messages[start:]:
        if m["role"] == "assistant":
            text = m["content"]
            if not text.endswith(TOOL_CALL_END):
                text += IM_END
            seg = tokenizer.encode(text, add_special_tokens=False)
            ids += seg
            mask += [1] * len(seg)
        else:
            seg = tool_response_ids(tokenizer, m["content"])
            ids += seg
            mask += [0] * len(seg)
    return ids, mask
