"""Models and tokenizers: the embedded default (built locally) and any local HF checkpoint."""

from typing import TYPE_CHECKING

from rstar2.lazy_names import lazy_names

if TYPE_CHECKING:  # what type checkers and editors see; at run time `__getattr__` below
    from rstar2.model.chat_format import (
        TOOL_RESPONSE_CLOSE,
        TOOL_RESPONSE_OPEN,
        encode_conversation,
        render_prompt,
        tool_response_ids,
    )
    from rstar2.model.chat_template import CHAT_TEMPLATE, DEFAULT_SYSTEM_PROMPT
    from rstar2.model.loader import ModelFileError, load_model, load_tokenizer
    from rstar2.model.tiny import build_model, init_model, tokenizer_corpus
    from rstar2.model.tiny_config import TinyModelConfig
    from rstar2.model.tokenizer import (
        SPECIAL_TOKENS,
        SpecialTokens,
        special_token_ids,
        train_tokenizer,
    )

__all__ = [
    "CHAT_TEMPLATE",
    "DEFAULT_SYSTEM_PROMPT",
    "ModelFileError",
    "SPECIAL_TOKENS",
    "TOOL_RESPONSE_CLOSE",
    "TOOL_RESPONSE_OPEN",
    "SpecialTokens",
    "TinyModelConfig",
    "build_model",
    "encode_conversation",
    "init_model",
    "load_model",
    "load_tokenizer",
    "render_prompt",
    "special_token_ids",
    "tokenizer_corpus",
    "tool_response_ids",
    "train_tokenizer",
]

__getattr__ = lazy_names(
    __name__,
    {
        "CHAT_TEMPLATE": "rstar2.model.chat_template",
        "DEFAULT_SYSTEM_PROMPT": "rstar2.model.chat_template",
        "ModelFileError": "rstar2.model.loader",
        "SPECIAL_TOKENS": "rstar2.model.tokenizer",
        "SpecialTokens": "rstar2.model.tokenizer",
        "TOOL_RESPONSE_CLOSE": "rstar2.model.chat_format",
        "TOOL_RESPONSE_OPEN": "rstar2.model.chat_format",
        "TinyModelConfig": "rstar2.model.tiny_config",
        "build_model": "rstar2.model.tiny",
        "encode_conversation": "rstar2.model.chat_format",
        "init_model": "rstar2.model.tiny",
        "load_model": "rstar2.model.loader",
        "load_tokenizer": "rstar2.model.loader",
        "render_prompt": "rstar2.model.chat_format",
        "special_token_ids": "rstar2.model.tokenizer",
        "tokenizer_corpus": "rstar2.model.tiny",
        "tool_response_ids": "rstar2.model.chat_format",
        "train_tokenizer": "rstar2.model.tokenizer",
    },
)
