"""One engine step's inputs, flattened: every scheduled token in one row of one forward pass.

Linear layers run once over all tokens of the step (decode tokens and whole prompts alike, no
padding). Attention needs each request's own context, so the batch also carries:
- decode buckets: requests computing one token, sorted by context length and grouped by
  power-of-two length, so one batched attention per bucket pads to at most twice the real
  context (heavy-tailed lengths would otherwise pay for the longest sequence in every row);
- prefill groups: the requests computing several tokens (a new or recomputed prompt, a
  continuation whose earlier context is cached), grouped by kind and by power-of-two number of
  new tokens (continuations also by power-of-two context), so one batched attention call per
  group serves all of them (query slots and gathered contexts padded to the group's longest, at
  most twice the real count): a group of fresh prompts attends causally over its own tokens, a
  group of continuations over its contexts gathered from the cache. In multi-turn RL every
  new turn is a continuation, and a call per continuation per layer would make a step's
  launches grow with its turns.
Rows are ordered decode buckets first, then the prefilling requests, and `requests` lists the
requests in that order, so sampled tokens map back by position.

What it does not do: run anything; it only builds index tensors (on the KV cache's device).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rstar2.engine.kv_cache import KVCache, token_slots
from rstar2.engine.request import Request

MIN_BUCKET_LEN = 64
MIN_PREFILL_BUCKET = 16


@dataclass
class DecodeBucket:
    start: int
    end: int
    rows: torch.Tensor
    """KV cache block rows to gather (`KVCache.block_rows`)."""
    mask: torch.Tensor | None
    """Bool `[n, 1, 1, blocks * block_size]`, True where attended; None when nothing is padded."""


@dataclass
class PrefillGroup:
    """S prefilling requests attended in one call, each with its new tokens in L query slots."""

    size: tuple[int, int]
    """(S, L)."""
    rows: torch.Tensor | None
    """KV block rows of each request's whole context (`KVCache.block_rows`, W blocks) for
    continuations; None for fresh prompts (causal attention over their own new tokens)."""
    mask: torch.Tensor | None
    """Bool `[S, 1, L, W * block_size]` for continuations: a slot attends the context up to
    its own position; None for fresh prompts."""
    span: tuple[int, int] | None = None
    """A group of one request: its rows `(start, end)` in the step (no padding; slices serve
    and the index tensors below are None)."""
    slots: torch.Tensor | None = None
    """Long `[S, L]`: each slot's row in the step; a padding slot repeats its request's last
    row (same query, same mask: finite, and dropped)."""
    real: torch.Tensor | None = None
    """Long `[R]`: the real slots, as positions in `slots.view(-1)`."""
    targets: torch.Tensor | None = None
    """Long `[R]`: the real slots' rows in the step (where their outputs go)."""


@dataclass
class StepBatch:
    requests: list[tuple[Request, int]]
    input_ids: torch.Tensor
    positions: torch.Tensor
    write_rows: torch.Tensor
    last_index: torch.Tensor
    """Row of each request's last token (where its next token is sampled)."""
    decode: list[DecodeBucket]
    prefill: list[PrefillGroup]


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
        slots += token_slots(req.blocks, bs, start, n)
        last.append(len(ids) - 1)
    dev = cache.device
    return StepBatch(
        requests=ordered,
        input_ids=torch.tensor(ids, device=dev),
        positions=torch.tensor(positions, device=dev),
        write_rows=cache.write_rows(torch.tensor(slots, device=dev)),
        last_index=torch.tensor(last, device=dev),
        decode=_decode_buckets(decode, cache),
        prefill=_prefill_groups(prefill, len(decode), cache),
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


def _prefill_key(req: Request, n: int) -> tuple[bool, int, int]:
    """Fresh or continuation, the power of two of the new tokens and, for a continuation,
    of its whole context (its K/V gathered and attended are padded to the group's longest)."""
    context = _bucket_key(req.num_computed + n) if req.num_computed > 0 else 0
    return req.num_computed > 0, max(n - 1, MIN_PREFILL_BUCKET - 1).bit_length(), context


def _prefill_groups(
    prefill: list[tuple[Request, int]], offset: int, cache: KVCache
) -> list[PrefillGroup]:
    """The prefilling requests (rows from `offset` on, in this order) grouped by
    `_prefill_key`."""
    members: dict[tuple[bool, int, int], list[tuple[Request, int, int]]] = {}
    start = offset
    for req, n in prefill:
        members.setdefault(_prefill_key(req, n), []).append((req, n, start))
        start += n
    return [_prefill_group(group, key[0], cache) for key, group in members.items()]


def _prefill_group(
    group: list[tuple[Request, int, int]], cached: bool, cache: KVCache
) -> PrefillGroup:
    """One group's tensors; `group` holds (request, new tokens, first row in the step)."""
    width = max(n for _, n, _ in group)
    dev = cache.device
    rows = mask = None
    if cached:
        num_blocks = max(-(-(r.num_computed + n) // cache.block_size) for r, n, _ in group)
        rows = cache.block_rows([r.blocks for r, _, _ in group], num_blocks)
        # slot i of a request with c cached tokens is position c + i (padding: its last)
        ends = torch.tensor([_padded(r.num_computed, n, width) for r, n, _ in group], device=dev)
        keys = torch.arange(num_blocks * cache.block_size, device=dev)
        mask = (keys.view(1, 1, -1) <= ends.unsqueeze(-1)).unsqueeze(1)
    if len(group) == 1:
        start = group[0][2]
        return PrefillGroup((1, width), rows, mask, span=(start, start + width))
    slots = [_padded(start, n, width) for _, n, start in group]
    real = [s * width + i for s, (_, n, _) in enumerate(group) for i in range(n)]
    targets = [start + i for _, n, start in group for i in range(n)]
    return PrefillGroup(
        (len(group), width),
        rows,
        mask,
        slots=torch.tensor(slots, device=dev),
        real=torch.tensor(real, device=dev),
        targets=torch.tensor(targets, device=dev),
    )


def _padded(first: int, n: int, width: int) -> list[int]:
    """`first`, `first + 1`, ... for `n` real slots, then the last of them again up to
    `width` slots (a padding slot repeats its request's last)."""
    return [first + min(i, n - 1) for i in range(width)]
