from __future__ import annotations

from pathlib import Path

import pytest

from rstar2.model.loader import load_model, load_tokenizer
from rstar2.model.tiny import tokenizer_corpus
from rstar2.model.tokenizer import SPECIAL_TOKENS, special_token_ids, train_tokenizer
from rstar2.tasks import TOOL_SCHEMA


@pytest.fixture(scope="module")
def tok(tiny_dir: Path):
    return load_tokenizer(tiny_dir)


@pytest.mark.parametrize("text", SPECIAL_TOKENS)
def test_special_token_is_single_token(tok, text: str) -> None:
    ids = tok.encode(text, add_special_tokens=False)
    assert len(ids) == 1
    assert tok.decode(ids) == text


def test_special_tokens_survive_inside_text(tok) -> None:
    ids = tok.encode("ab<tool_call>\n{}</tool_call>cd", add_special_tokens=False)
    special = special_token_ids(tok)
    assert special.tool_call in ids and special.tool_call_end in ids


def test_numbers_are_cut_into_three_digit_chunks(tok) -> None:
    pieces = [tok.decode([i]) for i in tok.encode("x = 9081726354", add_special_tokens=False)]
    digits = [p for p in pieces if p.strip().isdigit()]
    assert "".join(digits) == "9081726354"
    assert all(len(p) <= 3 for p in digits)
    # a chunk never spans the digit-group boundary: 908|172|635|4
    assert len(digits) >= 4


def test_digit_group_one_splits_every_digit() -> None:
    one = train_tokenizer(["12 345 6789 " * 50, "Tool call success"], 300, digit_group=1)
    pieces = [one.decode([i]) for i in one.encode("n=9081", add_special_tokens=False)]
    assert pieces[-4:] == list("9081")
    with pytest.raises(ValueError, match="digit_group"):
        train_tokenizer(["x"], 300, digit_group=0)


def test_decode_inverts_encode(tok) -> None:
    text = 'Héllo {"code": "print(12 * 3)"}\n\ttabs  and <answer>\\boxed{-7}</answer>'
    assert tok.decode(tok.encode(text, add_special_tokens=False)) == text


def test_special_token_ids_fields_are_distinct(tok) -> None:
    special = special_token_ids(tok)
    values = list(vars(special).values())
    assert len(set(values)) == len(values) == len(SPECIAL_TOKENS)
    assert special.stop_ids == (special.tool_call_end, special.im_end, special.eos)


def test_special_token_ids_rejects_tokenizer_without_them(tok) -> None:
    class NoSpecials:
        eos_token_id = 0

        def get_vocab(self) -> dict[str, int]:
            return {}

        def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
            return [1] * len(text)

    with pytest.raises(ValueError, match="<|im_start|>"):
        special_token_ids(NoSpecials())  # type: ignore[arg-type]


def test_template_renders_hermes_tool_schema(tok) -> None:
    text = tok.apply_chat_template(
        [{"role": "user", "content": "hi"}], tools=[TOOL_SCHEMA], tokenize=False
    )
    assert "\n\n# Tools\n<tools>\n{" in text
    assert text.count("execute_python_code_with_standard_io") == 1
    assert "</tools><|im_end|>\n<|im_start|>user\nhi<|im_end|>\n" in text


def test_template_renders_hf_tool_calls_and_merges_tool_turns(tok) -> None:
    messages = [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "U"},
        {
            "role": "assistant",
            "content": "A",
            "tool_calls": [{"function": {"name": "f", "arguments": {"code": "1"}}}],
        },
        {"role": "tool", "content": "one"},
        {"role": "tool", "content": "two"},
    ]
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text == (
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n"
        '<|im_start|>assistant\nA\n<tool_call>\n{"name": "f", "arguments": {"code": "1"}}\n'
        "</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\none\n</tool_response>\n"
        "<tool_response>\ntwo\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    )


def test_load_model_keeps_the_trained_pipeline(tiny_dir: Path, small_cfg) -> None:
    # AutoTokenizer would swap in Qwen2Tokenizer's own pre-tokenizer (one digit per token).
    _, loaded = load_model(tiny_dir)
    trained = train_tokenizer(tokenizer_corpus(small_cfg), small_cfg.vocab_size)
    text = "Compute 4821 * 37 + 905. It's <tool_call>\n done"
    assert loaded.encode(text, add_special_tokens=False) == trained.encode(
        text, add_special_tokens=False
    )
