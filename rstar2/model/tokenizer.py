"""The embedded tokenizer: a byte-level BPE trained locally, plus the special-token lookup.

`train_tokenizer(corpus, vocab_size, digit_group)` trains a byte-level BPE with the `tokenizers`
library on text the project generates, with Qwen2's pre-tokenizer except that numbers are cut
into chunks of at most `digit_group` digits; every special token of docs/format.md is a single
added token. The result is a Hugging Face `PreTrainedTokenizerFast` carrying the chat template,
so `apply_chat_template` works and `save_pretrained` writes a directory any HF loader reads.

`special_token_ids(tokenizer)` looks the special tokens up in ANY tokenizer (the embedded one or
a Qwen3 checkpoint's) and fails with a clear error when one is missing or not a single token.

What it does not do: choose the training text (see `rstar2.model.tiny`) or render prompts (see
`rstar2.model.chat_format`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from tokenizers import (
    AddedToken,
    Regex,
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    trainers,
)
from transformers import PreTrainedTokenizerBase, PreTrainedTokenizerFast

from rstar2.format_markers import EOS, FORMAT_MARKERS, MARKER_FIELDS
from rstar2.model.chat_template import CHAT_TEMPLATE

# Qwen2's pre-tokenizer split with `\p{N}` widened to `\p{N}{1,G}`: numbers are cut into
# chunks of at most G digits (G = 1: one digit per token, as Qwen2; G = 3, as Llama 3/GPT-4).
# Why G = 3 for the embedded default: with one digit per token a tiny model copies numbers
# (problem -> code, tool output -> answer) only after a long plateau, because every digit recurs
# and the copy needs a multi-token match; with 3-digit chunks the copy is a one-token lookup
# and SFT learns it in a few hundred steps (see README "Model and task").
_PRETOKENIZE = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,DIGITS}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def pretokenize_regex(digit_group: int) -> str:
    """The pre-tokenizer pattern that cuts numbers into chunks of at most `digit_group` digits."""
    if not 1 <= digit_group <= 9:
        raise ValueError(f"digit_group must be in 1..9, got {digit_group}")
    return _PRETOKENIZE.replace("DIGITS", str(digit_group))


SPECIAL_TOKENS: tuple[str, ...] = FORMAT_MARKERS
"""Every special token of docs/format.md; ids 0..10 in the embedded tokenizer, in this order."""


@dataclass(frozen=True)
class SpecialTokens:
    """Ids of the chat and tool tokens in one tokenizer."""

    im_start: int
    im_end: int
    eos: int
    tool_call: int
    tool_call_end: int
    tool_response: int
    tool_response_end: int
    answer: int
    answer_end: int
    think: int
    think_end: int

    @property
    def stop_ids(self) -> tuple[int, ...]:
        """Tokens that end an assistant turn's generation: `</tool_call>`, `<|im_end|>`, eos."""
        return (self.tool_call_end, self.im_end, self.eos)


_FIELDS = MARKER_FIELDS


def _single_id(tokenizer: PreTrainedTokenizerBase, text: str) -> int:
    ids = tokenizer.encode(text, add_special_tokens=False)
    if len(ids) != 1:
        raise ValueError(f"tokenizer encodes {text!r} as {len(ids)} tokens {ids}, expected one")
    return int(ids[0])


def special_token_ids(tokenizer: PreTrainedTokenizerBase) -> SpecialTokens:
    """The ids of the chat/tool special tokens; ValueError if one is not a single token.

    `eos` is `<|endoftext|>` when the tokenizer has it, else the tokenizer's own eos token.
    """
    ids: dict[str, int] = {}
    for name, text in _FIELDS.items():
        if name == "eos" and text not in tokenizer.get_vocab():
            if tokenizer.eos_token_id is None:
                raise ValueError(f"tokenizer has neither {EOS} nor an eos token")
            ids[name] = int(tokenizer.eos_token_id)
            continue
        ids[name] = _single_id(tokenizer, text)
    return SpecialTokens(**ids)


def _backend(vocab_size: int, corpus: Iterable[str], digit_group: int) -> Tokenizer:
    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(
                Regex(pretokenize_regex(digit_group)), behavior="isolated", invert=False
            ),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        show_progress=False,
        special_tokens=[AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    return tok


def train_tokenizer(
    corpus: Iterable[str], vocab_size: int = 2048, digit_group: int = 3
) -> PreTrainedTokenizerFast:
    """Train the embedded byte-level BPE on `corpus` and wrap it with the chat template."""
    if vocab_size < 256 + len(SPECIAL_TOKENS):
        raise ValueError(f"vocab_size must be at least {256 + len(SPECIAL_TOKENS)}: {vocab_size}")
    backend = _backend(vocab_size, corpus, digit_group)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token=EOS,
        pad_token=EOS,
        additional_special_tokens=list(SPECIAL_TOKENS[1:]),
        clean_up_tokenization_spaces=False,
        model_max_length=4096,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer
