"""One engine step that makes every kind of attention call the engine has, for checking them
against the model's own forward: the CPU test in float64 (`tests/engine/test_prefill_groups.py`)
and `scripts/gpu_figures.py --check-engine` on a GPU in the model's dtype build it here.

The step holds one-token decodes, fresh prompts of lengths that share a prefill group and
lengths that do not, and continuations after short and long contexts (grouped by new tokens
and by context); the contexts the continuations and decodes attend to are put in the cache by
one earlier step.

What it does not do: compare anything (the callers do, each at its own tolerance).
"""

from __future__ import annotations

import torch
from torch import nn

from rstar2.engine.kv_cache import KVCache
from rstar2.engine.protocol import SamplingParams
from rstar2.engine.request import Request
from rstar2.engine.step_batch import StepBatch, build_step_batch
from rstar2.engine.transformer import Transformer

MIXED_SHAPES = {
    "dec-a": (1, 9),
    "dec-b": (1, 30),
    "fresh-5": (5, 0),
    "fresh-7": (7, 0),
    "fresh-40": (40, 0),
    "cont-3": (3, 6),
    "cont-6": (6, 17),
    "cont-25": (25, 2),
    "cont-6-long": (6, 100),
}
"""Request name -> (tokens computed in the step, tokens cached before it)."""


def mixed_step(
    model: nn.Module, block_size: int = 4, seed: int = 1
) -> tuple[Transformer, KVCache, StepBatch]:
    """The engine's forward over `model`, a cache on the model's device holding the requests'
    earlier contexts, and the mixed step's batch (`batch.requests` in the step's row order,
    each request's `prompt_ids` its whole sequence)."""
    t = Transformer(model, 512)
    device = model.model.embed_tokens.weight.device
    cache = KVCache(t.num_layers, t.num_kv_heads, t.head_dim, 256, block_size, t.dtype, device)
    g = torch.Generator().manual_seed(seed)
    vocab = int(model.config.vocab_size)
    reqs, first = [], 0
    for i, (name, (new, cached)) in enumerate(MIXED_SHAPES.items()):
        tokens = torch.randint(0, vocab, (new + cached,), generator=g).tolist()
        req = Request(name, tokens, SamplingParams(4), arrival=i)
        req.blocks = list(range(first, first + -(-len(tokens) // block_size) + 1))
        first += len(req.blocks)
        reqs.append((req, new, cached))
    earlier = [(r, cached) for r, _, cached in reqs if cached]
    t.forward(build_step_batch(earlier, cache), cache)
    for req, cached in earlier:
        req.num_computed = cached
    return t, cache, build_step_batch([(r, new) for r, new, _ in reqs], cache)
