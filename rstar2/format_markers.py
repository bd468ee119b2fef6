"""The format markers of docs/format.md: the special tokens and the text forced around a tool
response, declared once.

The tokenizer (its special tokens, in id order), the chat format and the rollout's token codec
(the forced tool-response text, the stop tokens), the tool-call parser, the answer extraction
and the reward (tool responses cut from the model's text) all import them from here;
`tests/test_format_markers.py` checks that no other module in `rstar2/` or `sim/` spells one.
The one exception is the Jinja chat template (`model/chat_template.py`), which renders the
same layout for Hugging Face and is checked against these markers by its tests.

What it does not do: know any token id (`model.tokenizer.special_token_ids`) or encode text.
"""

from __future__ import annotations

EOS = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
TOOL_CALL = "<tool_call>"
TOOL_CALL_END = "</tool_call>"
TOOL_RESPONSE = "<tool_response>"
TOOL_RESPONSE_END = "</tool_response>"
ANSWER = "<answer>"
ANSWER_END = "</answer>"
THINK = "<think>"
THINK_END = "</think>"

FORMAT_MARKERS: tuple[str, ...] = (
    EOS,
    IM_START,
    IM_END,
    TOOL_CALL,
    TOOL_CALL_END,
    TOOL_RESPONSE,
    TOOL_RESPONSE_END,
    ANSWER,
    ANSWER_END,
    THINK,
    THINK_END,
)
"""Every special token of docs/format.md; ids 0..10 in the embedded tokenizer, in this order."""

MARKER_FIELDS: dict[str, str] = {
    "im_start": IM_START,
    "im_end": IM_END,
    "eos": EOS,
    "tool_call": TOOL_CALL,
    "tool_call_end": TOOL_CALL_END,
    "tool_response": TOOL_RESPONSE,
    "tool_response_end": TOOL_RESPONSE_END,
    "answer": ANSWER,
    "answer_end": ANSWER_END,
    "think": THINK,
    "think_end": THINK_END,
}
"""The markers by the name of their id in `model.tokenizer.SpecialTokens`."""

RESPONSE_PREFIX = f"{IM_END}\n{IM_START}user\n{TOOL_RESPONSE}\n"
"""Forced after `</tool_call>`: closes the assistant turn and opens the tool response."""
RESPONSE_SUFFIX = f"\n{TOOL_RESPONSE_END}{IM_END}\n{IM_START}assistant\n"
"""Forced after the tool output: closes the response and reopens the assistant turn."""
