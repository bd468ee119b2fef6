"""Tiny random decoders built in-process for engine tests (no files, no tokenizer)."""

from __future__ import annotations

import torch
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

VOCAB = 256


def tiny_qwen2(seed: int = 0, dtype: torch.dtype = torch.float64) -> Qwen2ForCausalLM:
    """A ~60K-parameter Qwen2 (qkv bias, GQA, tied embeddings). Large init => peaked logits."""
    torch.manual_seed(seed)
    cfg = Qwen2Config(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        rope_theta=500.0,
        tie_word_embeddings=True,
        initializer_range=0.2,
    )
    return Qwen2ForCausalLM(cfg).to(dtype).eval()


def tiny_llama(seed: int = 0) -> LlamaForCausalLM:
    """A tiny Llama (no biases, untied head, MHA) in float64."""
    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=512,
        tie_word_embeddings=False,
        initializer_range=0.2,
    )
    return LlamaForCausalLM(cfg).to(torch.float64).eval()


def random_prompts(n: int, seed: int = 0, low: int = 2, high: int = 24) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(low, high, (n,), generator=g).tolist()
    return [torch.randint(0, VOCAB, (length,), generator=g).tolist() for length in lengths]


def tiny_qwen3(seed: int = 0) -> Qwen3ForCausalLM:
    """A tiny Qwen3 (per-head q/k RMSNorm, explicit head_dim) in float64."""
    torch.manual_seed(seed)
    cfg = Qwen3Config(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=24,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        initializer_range=0.2,
    )
    return Qwen3ForCausalLM(cfg).to(torch.float64).eval()
