"""`TokenCodec`: the agent loop's view of a tokenizer, with the format's fixed token pieces.

Built once from any Hugging Face-style tokenizer that has the chat and tool markers of
docs/format.md as single tokens (the embedded tokenizer and Qwen3's do). It holds the stop
token ids of an assistant turn and encodes the forced text around a tool response.

Tool responses are encoded in one piece (prefix + output + suffix), exactly as
`rstar2.model.chat_format.tool_response_ids` encodes SFT data, so RL and SFT see the same
tokens. Only when the output contains a special-token string (a program printing `<|im_end|>`)
are the pieces encoded apart, the output with special-token strings kept as plain text, so tool
output can never forge chat structure.

A fast tokenizer (one with a `tokenizers.Tokenizer` behind it, as every tokenizer rstar2 loads
is) encodes and decodes through that backend directly: the same token ids and text as the
Hugging Face call, in half its time (about 30 instead of 60 us a tool response, 14 instead of
28 us a decode, on this project's CPU), which the training process's event loop spends once
per turn and tool call (`docs/production.md`, issue 31).

The ids of the last `RESPONSE_CACHE` distinct tool responses are kept: the rollouts of one
problem often run the same code and get the same output (81% of the 1,500 tool responses of
a 10-step tool-policy run repeated an earlier one; a real math workload repeats less), and
inside a training process, between the engine's steps, one encode cost ~270 us of the event
loop's CPU, several times its cost in a loop of encodes (its tables out of the caches).

What it does not do: render prompts (that is `rstar2.model.render_prompt`) or parse calls.
"""

from __future__ import annotations

import functools
from typing import Any, Protocol

from tokenizers import Tokenizer as FastTokenizer

from rstar2.format_markers import (
    EOS,
    FORMAT_MARKERS,
    IM_END,
    RESPONSE_PREFIX,
    RESPONSE_SUFFIX,
    TOOL_CALL_END,
)

RESPONSE_CACHE = 4096
"""Distinct tool responses whose ids a `TokenCodec` keeps (least recently used dropped). With
every output at the default 1,000-character cut it holds ~50 MB (about 12 KB an entry at ~300
tokens, 33 KB at worst: 1,000 random characters, ~900 ids above 256)."""


class Tokenizer(Protocol):
    """The subset of a Hugging Face tokenizer the loop uses."""

    def encode(self, text: str, add_special_tokens: bool = ..., **kwargs: Any) -> list[int]: ...

    def decode(
        self, token_ids: list[int], skip_special_tokens: bool = ..., **kwargs: Any
    ) -> str: ...

    def convert_tokens_to_ids(self, tokens: str) -> Any: ...


class TokenCodec:
    """Encodes and decodes for the agent loop; cheap to build, safe to share between tasks."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer
        backend = getattr(tokenizer, "backend_tokenizer", None)
        self._backend: FastTokenizer | None = (
            backend if isinstance(backend, FastTokenizer) else None
        )
        """The fast tokenizer behind `tokenizer`, called directly (None: a slow tokenizer)."""
        self.call_end_id = _single_token(tokenizer, TOOL_CALL_END)
        turn_end = _single_token(tokenizer, IM_END)
        end_ids = {turn_end}
        eos = _optional_token(tokenizer, EOS)
        if eos is not None:
            end_ids.add(eos)
        tok_eos = getattr(tokenizer, "eos_token_id", None)
        if isinstance(tok_eos, int):
            end_ids.add(tok_eos)
        self.end_ids: frozenset[int] = frozenset(end_ids)
        self.stop_token_ids: tuple[int, ...] = (self.call_end_id, *sorted(self.end_ids))
        self.response_prefix = self.encode_markup(RESPONSE_PREFIX)
        self.response_suffix = self.encode_markup(RESPONSE_SUFFIX)
        specials = getattr(tokenizer, "all_special_tokens", None) or []
        self._markers = tuple({*FORMAT_MARKERS, *(t for t in specials if isinstance(t, str))})
        self._response_ids = functools.lru_cache(maxsize=RESPONSE_CACHE)(self._encode_response)

    def encode_markup(self, text: str) -> list[int]:
        """Encode trusted text: special-token strings become their special tokens."""
        if self._backend is not None:
            return _backend_encode(self._backend, text, split_special_tokens=False)
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def encode_plain(self, text: str) -> list[int]:
        """Encode untrusted text: special-token strings stay plain text."""
        if self._backend is not None:
            return _backend_encode(self._backend, text, split_special_tokens=True)
        return list(
            self.tokenizer.encode(text, add_special_tokens=False, split_special_tokens=True)
        )

    def decode(self, token_ids: list[int]) -> str:
        if self._backend is not None:
            return self._backend.decode(token_ids, skip_special_tokens=False)
        return self.tokenizer.decode(
            token_ids, skip_special_tokens=False, clean_up_tokenization_spaces=False
        )

    def tool_response_ids(self, text: str) -> list[int]:
        """The forced tokens after `</tool_call>`: prefix + tool output text + suffix."""
        return list(self._response_ids(text))

    def _encode_response(self, text: str) -> tuple[int, ...]:
        if not any(m in text for m in self._markers):
            return tuple(self.encode_markup(RESPONSE_PREFIX + text + RESPONSE_SUFFIX))
        return (*self.response_prefix, *self.encode_plain(text), *self.response_suffix)


def _backend_encode(backend: FastTokenizer, text: str, *, split_special_tokens: bool) -> list[int]:
    """`backend`'s ids of `text` without added special tokens, its special-token strings split
    into plain text or not. The flag is the backend's state, which the Hugging Face wrapper also
    sets on each of its calls and leaves as it was asked (an `encode_plain` by the wrapper would
    otherwise split the specials of every later direct call), so it is set here on each call."""
    if backend.encode_special_tokens != split_special_tokens:
        backend.encode_special_tokens = split_special_tokens
    return backend.encode(text, add_special_tokens=False).ids


def _optional_token(tokenizer: Tokenizer, token: str) -> int | None:
    tid = tokenizer.convert_tokens_to_ids(token)
    if not isinstance(tid, int) or tid < 0:
        return None
    if getattr(tokenizer, "unk_token_id", None) == tid and token != "<unk>":
        return None
    return tid


def _single_token(tokenizer: Tokenizer, token: str) -> int:
    tid = _optional_token(tokenizer, token)
    if tid is None:
        raise ValueError(f"tokenizer has no single token for {token!r} (see docs/format.md)")
    return tid
