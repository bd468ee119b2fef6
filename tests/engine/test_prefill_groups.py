"""Batched prefill attention (step_batch's prefill groups): one step mixing one-token decodes,
fresh prompts and continuations of different lengths gives each request the logits of the
model's own forward over its whole sequence."""

from __future__ import annotations

import torch

from rstar2.engine.kv_cache import KVCache
from rstar2.engine.protocol import SamplingParams
from rstar2.engine.request import Request
from rstar2.engine.step_batch import build_step_batch
from rstar2.engine.transformer import Transformer
from tests.engine.factories import VOCAB, tiny_qwen2

BLOCK = 4


def _request(name: str, tokens: list[int], first_block: int) -> Request:
    req = Request(name, tokens, SamplingParams(4), arrival=first_block)
    req.blocks = list(range(first_block, first_block + -(-len(tokens) // BLOCK) + 1))
    return req


def test_a_mixed_prefill_step_gives_every_request_the_models_logits() -> None:
    model = tiny_qwen2()
    t = Transformer(model, 512)
    cache = KVCache(t.num_layers, t.num_kv_heads, t.head_dim, 256, BLOCK, t.dtype)
    g = torch.Generator().manual_seed(1)
    # (new tokens this step, tokens cached before it): decodes, fresh prompts of lengths that
    # share a group and lengths that do not, continuations after short and long contexts
    # (grouped by new tokens and by context)
    shapes = {
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
    reqs, first = {}, 0
    for name, (new, cached) in shapes.items():
        tokens = torch.randint(0, VOCAB, (new + cached,), generator=g).tolist()
        reqs[name] = _request(name, tokens, first)
        first += len(reqs[name].blocks)
    # earlier steps put each cached context in the cache
    earlier = [(r, shapes[n][1]) for n, r in reqs.items() if shapes[n][1] > 0]
    t.forward(build_step_batch(earlier, cache), cache)
    for req, cached in earlier:
        req.num_computed = cached
    step = [(r, shapes[n][0]) for n, r in reqs.items()]
    batch = build_step_batch(step, cache)
    # fresh 5 and 7 / fresh 40 / continuations 3 and 6 / 25 / 6 after a context over 64
    sizes = sorted(group.size for group in batch.prefill)
    assert sizes == [(1, 6), (1, 25), (1, 40), (2, 6), (2, 7)]  # padded slots, lone requests
    logits = t.forward(batch, cache)
    with torch.inference_mode():
        for row, (req, _) in enumerate(batch.requests):
            full = model(torch.tensor([req.prompt_ids])).logits[0, -1]
            torch.testing.assert_close(logits[row], full, rtol=1e-9, atol=1e-9)
