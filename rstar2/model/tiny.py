"""The embedded default model: a ~1M-parameter Qwen2 built locally by `init_model`.

`init_model(path, cfg)` trains the embedded tokenizer on text the project generates (the
arithmetic task's problems and SFT traces rendered with the chat template, the tool schema,
Python error texts and a little generic prose), builds a randomly initialised Qwen2 causal LM
of the configured size (seeded, so the same config gives the same weights), and saves both with
`save_pretrained` (safetensors). Nothing is downloaded.

What it does not do: train the model (see `rstar2.learner.sft`) or load it (see
`rstar2.model.loader`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from transformers import GenerationConfig, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from rstar2.model.tiny_config import TinyModelConfig
from rstar2.model.tokenizer import special_token_ids, train_tokenizer
from rstar2.tasks import TOOL_SCHEMA, TaskConfig, build_traces, generate_problems
from rstar2.whole_file import replacing

log = logging.getLogger(__name__)


_GENERIC_TEXT = (
    "The quick brown fox jumps over the lazy dog.",
    "Let me think step by step about the problem.",
    "First, read the question carefully. Then write the code and check the result.",
    "The total is the sum of the parts. The product of two numbers is their multiplication.",
    "Traceback (most recent call last): NameError, TypeError, ValueError, ZeroDivisionError.",
    "SyntaxError at line 1: invalid syntax",
    "ZeroDivisionError at line 1: division by zero",
    "TypeError at line 1: unsupported operand type(s) for +: 'int' and 'str'",
    "x = int(input())\nfor i in range(10):\n    print(i * x)\n",
    "def solve(a, b):\n    return a + b\n\nprint(solve(3, 4))\n",
    "Tool call failure\ntimeout\n",
    "Hello! How can I help you today? I am a helpful assistant.",
)


def tokenizer_corpus(cfg: TinyModelConfig) -> Iterator[str]:
    """The texts the embedded tokenizer is trained on (deterministic for a given seed).

    SFT traces rendered with the chat template, so the system prompt and the chat scaffolding
    are frequent enough to merge into few tokens, plus the tool schema and generic text.
    Rendering needs only the template, so a throwaway tokenizer renders it.
    """
    renderer = train_tokenizer(_GENERIC_TEXT, 300)
    task = TaskConfig(seed=cfg.seed + 1000, train_size=cfg.corpus_problems)
    problems = generate_problems(task, "train")
    for trace in build_traces(problems, seed=cfg.seed, mistake_fraction=0.2):
        yield renderer.apply_chat_template(trace, tokenize=False)
    tools_prompt = [{"role": "user", "content": "What is 2 + 2?"}]
    yield renderer.apply_chat_template(tools_prompt, tools=[TOOL_SCHEMA], tokenize=False)
    yield from _GENERIC_TEXT


def qwen2_config(cfg: TinyModelConfig, vocab_size: int, **extra: Any) -> Qwen2Config:
    """The Qwen2 architecture of `cfg`'s size (tied embeddings) over `vocab_size` embedding
    rows; `extra`: more `Qwen2Config` fields (special token ids)."""
    return Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_kv_heads,
        max_position_embeddings=cfg.max_position_embeddings,
        rope_theta=cfg.rope_theta,
        tie_word_embeddings=True,
        **extra,
    )


def build_model(cfg: TinyModelConfig, tokenizer: PreTrainedTokenizerFast) -> Qwen2ForCausalLM:
    """A freshly initialised Qwen2 of `cfg`'s size for `tokenizer` (seeded)."""
    special = special_token_ids(tokenizer)
    if 0 < cfg.embedding_rows < len(tokenizer):
        raise ValueError(
            f"embedding_rows {cfg.embedding_rows} is below the tokenizer's {len(tokenizer)} tokens"
        )
    config = qwen2_config(
        cfg,
        max(cfg.embedding_rows, len(tokenizer)),
        bos_token_id=None,
        eos_token_id=[special.im_end, special.eos],
        pad_token_id=special.eos,
    )
    torch.manual_seed(cfg.seed)
    model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(
        eos_token_id=[special.im_end, special.eos], pad_token_id=special.eos
    )
    return model


def init_model(path: str | Path, cfg: TinyModelConfig | None = None) -> Path:
    """Create the embedded default (tokenizer + random-init Qwen2) in directory `path`. The
    files are written under a temporary name and moved in at the end (`rstar2.whole_file`):
    an interrupted or failed call leaves `path` as it was, never a `config.json` without its
    weights (which a run directory's `model-init` would take for a model)."""
    cfg = cfg or TinyModelConfig()
    cfg.validate()
    path = Path(path)
    tokenizer = train_tokenizer(tokenizer_corpus(cfg), cfg.vocab_size, cfg.digit_group)
    model = build_model(cfg, tokenizer)
    path.parent.mkdir(parents=True, exist_ok=True)
    with replacing(path) as tmp:
        tokenizer.save_pretrained(tmp)
        model.save_pretrained(tmp)
    n_params = sum(p.numel() for p in model.parameters())
    log.info("init-model: %s vocab=%d params=%.2fM", path, len(tokenizer), n_params / 1e6)
    return path
