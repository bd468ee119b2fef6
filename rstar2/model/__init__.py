"""Models and tokenizers: the embedded default (built locally) and any local HF checkpoint."""

from rstar2.model.chat_format import (
    TOOL_RESPONSE_CLOSE,
    TOOL_RESPONSE_OPEN,
    encode_conversation,
    render_prompt,
    tool_response_ids,
)
from rstar2.model.chat_template import CHAT_TEMPLATE, DEFAULT_SYSTEM_PROMPT
from rstar2.model.loader import ModelFileError, load_model, load_tokenizer
from rstar2.model.tiny import TinyModelConfig, build_model, init_model, tokenizer_corpus
from rstar2.model.tokenizer import SPECIAL_TOKENS, SpecialTokens, special_token_ids, train_tokenizer

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
