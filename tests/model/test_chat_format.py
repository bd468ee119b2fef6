from __future__ import annotations

import random
from pathlib import Path

import pytest

from rstar2.model.chat_format import (
    TOOL_RESPONSE_CLOSE,
    TOOL_RESPONSE_OPEN,
    encode_conversation,
    render_prompt,
)
from rstar2.model.chat_template import DEFAULT_SYSTEM_PROMPT
from rstar2.model.loader import load_model
from rstar2.tasks import TaskConfig, build_trace, generate_problems


@pytest.fixture(scope="module")
def tok(tiny_dir: Path):
    return load_model(tiny_dir)[1]


def test_render_prompt_ends_with_assistant_header_and_uses_default_system(tok) -> None:
    text = tok.decode(render_prompt(tok, "What is 2 + 2?"))
    assert text == (
        f"<|im_start|>system\n{DEFAULT_SYSTEM_PROMPT}<|im_end|>\n"
        "<|im_start|>user\nWhat is 2 + 2?<|im_end|>\n<|im_start|>assistant\n"
    )
    custom = tok.decode(render_prompt(tok, "Q", system="Be brief."))
    assert custom.startswith("<|im_start|>system\nBe brief.<|im_end|>")


def test_render_prompt_rejects_non_string(tok) -> None:
    with pytest.raises(TypeError):
        render_prompt(tok, 42)  # type: ignore[arg-type]


@pytest.mark.parametrize("mistake", ["none", "name", "syntax"])
def test_encoding_matches_template_and_masks_only_assistant(tok, mistake: str) -> None:
    problem = generate_problems(TaskConfig(train_size=3), "train")[2]
    trace = build_trace(problem, random.Random(0), mistake)  # type: ignore[arg-type]
    ids, mask = encode_conversation(tok, trace)
    assert len(ids) == len(mask)
    # Same text as the chat template renders (minus the newline after the last <|im_end|>).
    assert tok.decode(ids) == tok.apply_chat_template(trace, tokenize=False).removesuffix("\n")
    learned = tok.decode([i for i, m in zip(ids, mask, strict=True) if m])
    expected = "".join(m["content"] for m in trace if m["role"] == "assistant") + "<|im_end|>"
    assert learned == expected
    assert mask[: len(render_prompt(tok, problem.problem))] == [0] * len(
        render_prompt(tok, problem.problem)
    )


def test_tool_segments_are_the_agent_loop_text(tok) -> None:
    trace = [
        {"role": "user", "content": "Q"},
        {"role": "assistant", "content": "<tool_call>\nX\n</tool_call>"},
        {"role": "tool", "content": "OUT"},
        {"role": "assistant", "content": "done"},
    ]
    ids, mask = encode_conversation(tok, trace)
    forced = tok.decode([i for i, m in zip(ids, mask, strict=True) if not m])
    assert forced.endswith(TOOL_RESPONSE_OPEN + "OUT" + TOOL_RESPONSE_CLOSE)


@pytest.mark.parametrize(
    "messages",
    [
        [],
        [{"role": "assistant", "content": "x"}],
        [{"role": "user", "content": "q"}, {"role": "tool", "content": "t"}],
        [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}] * 2,
        [{"role": "user", "content": "q"}],
    ],
)
def test_encode_rejects_bad_role_order(tok, messages: list[dict[str, str]]) -> None:
    with pytest.raises(ValueError):
        encode_conversation(tok, messages)
