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
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from transformers import GenerationConfig, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from rstar2.config import require
from rstar2.model.tokenizer import special_token_ids, train_tokenizer
from rstar2.tasks import TOOL_SCHEMA, TaskConfig, build_traces, generate_problems
from rstar2.whole_file import replacing

log = logging.getLogger(__name__)


@dataclass
class TinyModelConfig:
    """Size and seed of the embedded default model and its tokenizer."""

    vocab_size: int = 2048
    """Target BPE vocabulary size (the trainer may stop earlier on a small corpus)."""
    digit_group: int = 3
    """Numbers are cut into tokens of at most this many digits (1 = one digit per token)."""
    hidden_size: int = 128
    """Width of the residual stream."""
    num_layers: int = 4
    """Number of transformer blocks."""
    num_heads: int = 4
    """Attention query heads (hidden_size must be divisible by it)."""
    num_kv_heads: int = 2
    """Key/value heads (grouped-query attention; must divide num_heads)."""
    intermediate_size: int = 384
    """Width of the SwiGLU MLP."""
    max_position_embeddings: int = 1024
    """Longest sequence (prompt + all turns) the model accepts."""
    rope_theta: float = 10000.0
    """RoPE base frequency."""
    seed: int = 0
    """Seed of the tokenizer corpus and the weight initialisation."""
    corpus_problems: int = 6000
    """Number of generated task problems whose traces train the tokenizer."""
    embedding_rows: int = 0
    """Rows of the embedding and the tied LM head; 0 = the tokenizer's size. A larger value
    pads them as real checkpoints pad theirs (Qwen2.5: 151,936 rows for 151,665 tokens), to
    build a model of a real checkpoint's shape (`SHAPES`) for measurements of the learner;
    the rows past the tokenizer are never targets, but a random-weight model can sample them."""

    def validate(self) -> None:
        require(self.vocab_size >= 300, "vocab_size", self.vocab_size, "an integer >= 300")
        require(1 <= self.digit_group <= 9, "digit_group", self.digit_group, "an integer in 1..9")
        require(self.hidden_size >= 8, "hidden_size", self.hidden_size, "an integer >= 8")
        require(self.num_layers >= 1, "num_layers", self.num_layers, "a positive integer")
        require(
            self.num_heads >= 1 and self.hidden_size % self.num_heads == 0,
            "num_heads",
            self.num_heads,
            f"a positive divisor of hidden_size {self.hidden_size}",
        )
        require(
            self.num_kv_heads >= 1 and self.num_heads % self.num_kv_heads == 0,
            "num_kv_heads",
            self.num_kv_heads,
            f"a positive divisor of num_heads {self.num_heads}",
        )
        require(self.intermediate_size >= 1, "intermediate_size", self.intermediate_size, ">= 1")
        require(
            self.max_position_embeddings >= 64,
            "max_position_embeddings",
            self.max_position_embeddings,
            ">= 64",
        )
        require(self.rope_theta > 0, "rope_theta", self.rope_theta, "a positive number")
        require(self.corpus_problems >= 10, "corpus_problems", self.corpus_problems, ">= 10")
        require(self.embedding_rows >= 0, "embedding_rows", self.embedding_rows, ">= 0")


SHAPES: dict[str, dict[str, int | float]] = {
    "tiny": {},
    "25m": {
        "hidden_size": 512,
        "num_layers": 8,
        "num_heads": 8,
        "num_kv_heads": 2,
        "intermediate_size": 1536,
    },
    "qwen2.5-0.5b": {
        "hidden_size": 896,
        "num_layers": 24,
        "num_heads": 14,
        "num_kv_heads": 2,
        "intermediate_size": 4864,
        "embedding_rows": 151936,
        "rope_theta": 1000000.0,
        "max_position_embeddings": 32768,
    },
    "qwen2.5-1.5b": {
        "hidden_size": 1536,
        "num_layers": 28,
        "num_heads": 12,
        "num_kv_heads": 2,
        "intermediate_size": 8960,
        "embedding_rows": 151936,
        "rope_theta": 1000000.0,
        "max_position_embeddings": 32768,
    },
}
"""Named model shapes: the `TinyModelConfig` fields that differ from the embedded default.
"tiny" is the default (~1.05M parameters), "25m" a ~25M model where the matrix products
dominate a step, "qwen2.5-0.5b" / "qwen2.5-1.5b" the published shapes of those checkpoints
(layers, widths, heads, padded vocabulary, tied embeddings: 494M / 1.54B parameters) with
random weights and the embedded tokenizer, for measuring the learner and engines at those
sizes (`rstar2 init-model --shape`, `rstar2 bench learner --shape`)."""


def shaped_config(shape: str, **overrides: object) -> TinyModelConfig:
    """The `TinyModelConfig` of the named shape (see `SHAPES`), with `overrides` on top."""
    if shape not in SHAPES:
        raise ValueError(f"model shape must be one of {sorted(SHAPES)}, got {shape!r}")
    cfg = replace(TinyModelConfig(), **SHAPES[shape], **overrides)
    cfg.validate()
    return cfg


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
