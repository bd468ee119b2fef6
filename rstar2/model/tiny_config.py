"""The embedded default model's size and seed (`TinyModelConfig`) and the named shapes.

Kept apart from `rstar2.model.tiny`, which builds the model with transformers, so that a
training config (`rstar2.train.config`) reads, checks and prints without importing torch:
`rstar2 train --help` and a mistyped `--set` answer at once.

What it does not do: build, train or load a model (`rstar2.model.tiny`, `rstar2.learner.sft`,
`rstar2.model.loader`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from rstar2.config import require


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
