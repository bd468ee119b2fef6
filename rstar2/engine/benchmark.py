"""The engine benchmark: one fixed workload, run on the embedded engine and on HF `generate`.

Workload: `n` requests with random prompts (16-64 tokens) and heavy-tailed output lengths
(log-normal, median 64 tokens, capped), all submitted at once, sampled at temperature 1 with no
stop tokens, so both sides produce exactly the requested number of tokens. Throughput counts
only those requested tokens.

- Engine: every request goes in at once; continuous batching lets each leave when done.
- HF `model.generate` (batched, KV cache, left padding): requests are sorted by output length
  and cut into batches of `batch_size` (an oracle grouping that favours HF); each batch runs to
  its longest request with `min_new_tokens = max_new_tokens`, so a request that is done keeps
  its row busy until the batch ends (static batching). The sweep over batch sizes reports each
  and the best is the baseline.

Both run on the engine's device (`engine.device`; "auto" picks a GPU when torch sees one).

What it does not do: measure latency, or run anything outside this process.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass

import torch
from torch import nn
from transformers import Qwen2Config, Qwen2ForCausalLM

from rstar2.engine.config import EngineConfig
from rstar2.engine.core import EngineCore
from rstar2.engine.protocol import SamplingParams
from rstar2.model.tiny import TinyModelConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Workload:
    prompts: list[list[int]]
    output_lengths: list[int]

    @property
    def total_tokens(self) -> int:
        return sum(self.output_lengths)


@dataclass
class HFRun:
    batch_size: int
    seconds: float
    computed_tokens: int
    """Tokens HF generated including those past each request's length (static batching)."""
    tok_s: float


def tiny_random_model(seed: int = 0) -> Qwen2ForCausalLM:
    """A random-weight Qwen2 of the embedded default's shape (`TinyModelConfig` defaults)."""
    tiny = TinyModelConfig()
    config = Qwen2Config(
        vocab_size=tiny.vocab_size,
        hidden_size=tiny.hidden_size,
        intermediate_size=tiny.intermediate_size,
        num_hidden_layers=tiny.num_layers,
        num_attention_heads=tiny.num_heads,
        num_key_value_heads=tiny.num_kv_heads,
        max_position_embeddings=tiny.max_position_embeddings,
        rope_theta=tiny.rope_theta,
        tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    return Qwen2ForCausalLM(config).eval()


def make_workload(n: int, vocab_size: int, max_tokens: int, seed: int = 0) -> Workload:
    """`n` random prompts and log-normal output lengths (median 64, sigma 1, in [4, max])."""
    if n < 1 or max_tokens < 4:
        raise ValueError(f"need n >= 1 and max_tokens >= 4, got {n} and {max_tokens}")
    g = torch.Generator().manual_seed(seed)
    prompt_lens = torch.randint(16, 65, (n,), generator=g).tolist()
    prompts = [torch.randint(1, vocab_size, (k,), generator=g).tolist() for k in prompt_lens]
    normal = torch.randn(n, generator=g, dtype=torch.float64)
    lengths = [min(max_tokens, max(4, round(math.exp(math.log(64) + z)))) for z in normal.tolist()]
    return Workload(prompts, lengths)


def run_engine(model: nn.Module, work: Workload, cfg: EngineConfig) -> tuple[float, EngineCore]:
    """Seconds to generate the whole workload on a fresh EngineCore (and the core, for stats)."""
    core = EngineCore(model, cfg)
    core.generate([work.prompts[0]], SamplingParams(4, seed=0))  # warm-up
    params = [SamplingParams(n, temperature=1.0, seed=i) for i, n in enumerate(work.output_lengths)]
    start = time.perf_counter()
    outs = core.generate(work.prompts, params)
    seconds = time.perf_counter() - start
    produced = sum(len(o.token_ids) for o in outs)
    if produced != work.total_tokens:
        raise RuntimeError(f"engine produced {produced} tokens, expected {work.total_tokens}")
    return seconds, core


@torch.inference_mode()
def run_hf(model: nn.Module, work: Workload, batch_size: int, pad_id: int = 0) -> HFRun:
    """HF `generate` over the workload in length-sorted static batches of `batch_size`, on
    the model's device (where `run_engine` left it: the same device as the engine's)."""
    device = next(model.parameters()).device
    order = sorted(range(len(work.prompts)), key=lambda i: -work.output_lengths[i])
    computed = 0
    start = time.perf_counter()
    for b in range(0, len(order), batch_size):
        idx = order[b : b + batch_size]
        width = max(len(work.prompts[i]) for i in idx)
        ids = torch.full((len(idx), width), pad_id)
        mask = torch.zeros((len(idx), width), dtype=torch.long)
        for row, i in enumerate(idx):
            prompt = work.prompts[i]
            ids[row, width - len(prompt) :] = torch.tensor(prompt)
            mask[row, width - len(prompt) :] = 1
        new = max(work.output_lengths[i] for i in idx)
        out = model.generate(
            input_ids=ids.to(device),
            attention_mask=mask.to(device),
            max_new_tokens=new,
            min_new_tokens=new,
            do_sample=True,
            temperature=1.0,
            top_k=0,
            top_p=1.0,
            pad_token_id=pad_id,
            eos_token_id=None,
        )
        if out.shape[1] != width + new:
            raise RuntimeError(f"HF generated {out.shape[1] - width} tokens, expected {new}")
        computed += len(idx) * new
    seconds = time.perf_counter() - start
    return HFRun(batch_size, seconds, computed, work.total_tokens / seconds)
