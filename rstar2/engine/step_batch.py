"""One engine step's inputs, flattened: every scheduled token in one row of one forward pass.

Linear layers run once over all tokens of the step (decode tokens and whole prompts alike, no
padding). Attention needs each request's own context, so the batch also carries:
- decode buckets: requests computing one token, sorted by context length and grouped by
  power-of-two length, so one batched attention per bucket pads to at most twice the real
  context (heavy-tailed lengths would otherwise pay for the longest sequence in every row);
- prefill segments: one per request computing several tokens (a new or recomputed prompt),
  causal attention over its own tokens and, when part of its context is already cached (a
  continuation), over those too.
Rows are ordered decode buckets first, then prefill segments, and `requests` lists the
requests in that order, so sampled tokens map back by position.

What it does not do: run anything; it only builds index tensors (on the KV cache's device).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rstar2.engine.kv_cache import KVCache
from rstar2.engine.request import Request

MIN_BUCKET_LEN = 64


@dataclass
class DecodeBucket:
    start: int
    end: int
    rows: torch.Tensor
    """KV cache block rows to gather (`KVCache.block_rows`)."""
    mask: torch.Tensor | None
    """Bool `[n, 1, 1, blocks * block_size]`, True where attended; None when nothing is padded."""


@dataclass
class PrefillSegment:
    start: int
    end: int
    context: int
    """Context length after this step (cached tokens + new ones)."""
    rows: torch.Tensor | None
    """KV block rows of the whole context when some was cached before; None for a fresh prompt."""
    mask: torch.Tensor | None
    """Bool `[new, blocks * block_size]` causal mask for a continuation; None when fresh."""


@dataclass
class StepBatch:
    requests: list[tuple[Request, int]]
    input_ids: torch.Tensor
    positions: torch.Tensor
    write_rows: torch.Tensor
    last_index: torch.Tensor
    """Row of each request's last token (where its next token is sampled)."""
    decode: list[DecodeBucket]
    prefill: list[PrefillSegment]


def _bucket_key(length: int) -> int:
    return max(length - 1, MIN_BUCKET_LEN - 1).bit_length()


def build_step_batch(scheduled: list[tuple[Request, int]], cache: KVCache) -> StepBatch:
    if not scheduled:
        raise ValueError("an engine step needs at least one scheduled request")
    decode = sorted((s for s in scheduled if s[1] == 1), key=lambda s: s[0].num_computed)
    prefill = [s for s in scheduled if s[1] != 1]
    ordered = decode + prefill
    bs = cache.block_size
    ids: list[int] = []
    positions: list[int] = []
    slots: list[int] = []
    last: list[int] = []
    for req, n in ordered:
        start = req.num_computed
        ids.extend(req.token_slice(start, start + n))
        positions.extend(range(start, start + n))
        slots.extend(req.blocks[p // bs] * bs + p % bs for p in range(start, start + n))
        last.append(len(ids) - 1)
    dev = cache.device
    return StepBatch(
        requests=ordered,
        input_ids=torch.tensor(ids, device=dev),
        positions=torch.tensor(positions, device=dev),
        write_rows=cache.write_rows(torch.tensor(slots, device=dev)),
        last_index=torch.tensor(last, device=dev),
        decode=_decode_buckets(decode, cache),
        prefill=_prefill_segments(prefill, len(decode), cache),
    )


def _decode_buckets(decode: list[tuple[Request, int]], cache: KVCache) -> list[DecodeBucket]:
    buckets = []
    start = 0
    while start < len(decode):
        key = _bucket_key(decode[start][0].num_computed + 1)
        end = start
        while end < len(decode) and _bucket_key(decode[end][0].num_computed + 1) == key:
            end += 1
        reqs = [r for r, _ in decode[start:end]]
        lengths = [r.num_computed + 1 for r in reqs]
        num_blocks = -(-lengths[-1] // cache.block_size)
        width = num_blocks * cache.block_size
        mask = None
        if lengths[0] != width:
            ends = torch.tensor(lengths, device=cache.device).view(-1, 1)
            valid = torch.arange(width, device=cache.device).view(1, -1) < ends
            mask = valid.view(len(reqs), 1, 1, width)
        rows = cache.block_rows([r.blocks for r in reqs], num_blocks)
        buckets.append(DecodeBucket(start, end, rows, mask))
        start = end
    return buckets


def _prefill_segments(
    prefill: list[tuple[Request, int]], offset: int, cache: KVCache
) -> list[PrefillSegment]:
    segments = []
    start = offset
    for req, n in prefill:
        context = req.num_computed + n
        rows = mask = None
        if req.num_computed > 0:
            num_blocks = -(-context // cache.block_size)
            rows = cache.block_rows([req.blocks], num_blocks)
            q_pos = torch.arange(req.num_computed, context, device=cache.device).view(-1, 1)
            width = num_blocks * cache.block_size
            mask = torch.arange(width, device=cache.device).view(1, -1) <= q_pos
        segments.append(PrefillSegment(start, start + n, context, rows, mask))
        start += n
    return segments
