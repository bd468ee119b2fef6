"""Fixed-shape decode: a step's one-token requests run through static buffers, captured as
CUDA graphs on a GPU.

On a GPU the embedded engine's dynamic step (`Transformer.forward` over a `StepBatch`) spends
its time in Python: a dozen kernel launches per layer, one attention call per length bucket,
index tensors built per step and a host round trip per sampled row. Here the requests of a
step that decode one token each are padded to a batch bucket (powers of two and their
midpoints, 1, 2, 3, 4, 6, 8, 12, ..., up to `max_num_seqs`) and a width bucket (KV blocks per
request in the same sizes, from 64 tokens up to `max_model_len`; every padded row gathers the
whole width, so the padding is paid in memory traffic), their inputs are copied into that
shape's static buffers (three host-to-device copies), and one function computes the logits
(`Transformer.decode_fixed`: one batched attention call per layer over the gathered blocks)
and samples on the device (`sampler.sample_fixed`: temperature, top-p, per-request
counter-based draws, log-probs). On
CUDA that function is captured once per (batch, width, top-p) shape as a CUDA graph, all
graphs in one memory pool, and replayed (`shape_graphs.ShapeGraphs`); elsewhere it runs
eagerly (the CPU tests check it against the dynamic path that way). The result stays on the device until the engine reads the
whole step's tokens with one transfer.

Padding rows write their K/V into the cache's scratch block and read the pad block; their
tokens are dropped. The graphs read the model's parameter tensors where they are: a weight
update must copy into them in place (`EngineCore.load_state_dict` does), never replace them.

A round (`decode_round`, `engine.decode_steps` > 1) replays one shape's step several times
back to back, each step's input tokens copied on the device from the previous step's draws and
its other inputs computed there from the first step's: the host fills the buffers and waits
for the device once per round instead of once per step (vLLM's multi-step scheduling).

What it does not do: prefill (prompts and continuations run in the same step, on the
dynamic path or, short ones with `engine.prefill_graph_tokens`, on `prefill_graphs.py`'s
fixed shapes), or capture ahead of time (a shape is captured when a step first needs it).
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass

import torch

from rstar2.engine.kv_cache import KVCache, token_slot
from rstar2.engine.request import Request
from rstar2.engine.sampler import sample_fixed
from rstar2.engine.shape_graphs import (
    Graphed,
    ShapeGraphs,
    block_table,
    bucket,
    buckets,
    host_view,
    keeps_nucleus,
    sampling_inputs,
    width_buckets,
)
from rstar2.engine.transformer import Transformer

# rows of the int64 input buffer
_IDS, _POS, _SLOT, _CTX, _SEED_LO, _SEED_HI, _COUNTER = range(7)


@dataclass(frozen=True)
class Shape:
    batch: int
    blocks: int
    nucleus: bool


@dataclass
class _Buffers(Graphed):
    ints: torch.Tensor
    """int64 `[7, batch]`: ids, positions, write slots, context lengths, seed halves, counters."""
    table: torch.Tensor
    """int64 `[batch, blocks]`: each row's KV blocks, padded with the pad block."""
    floats: torch.Tensor
    """float32 `[2, batch]`: temperatures and top-p."""


class FixedDecoder(ShapeGraphs[Shape, _Buffers]):
    def __init__(
        self,
        transformer: Transformer,
        cache: KVCache,
        max_num_seqs: int,
        max_model_len: int,
        graphs: bool,
    ) -> None:
        super().__init__(cache.device, graphs)
        self.transformer = transformer
        self.cache = cache
        self.batch_sizes = buckets(max_num_seqs)
        self.width_sizes = width_buckets(max_model_len, cache.block_size)

    def shape(self, rows: list[Request], counts: list[int] | None = None) -> Shape:
        """The buffers' shape for `rows` decoding one token each (`counts[i]` for row i)."""
        bs = self.cache.block_size
        if counts is None:
            end = max(r.num_computed for r in rows) + 1
        else:
            end = max(r.num_computed + c for r, c in zip(rows, counts, strict=True))
        need = -(-end // bs)
        return Shape(
            bucket(len(rows), self.batch_sizes), bucket(need, self.width_sizes), keeps_nucleus(rows)
        )

    @torch.inference_mode()
    def decode(self, rows: list[Request], seeds: list[int]) -> torch.Tensor:
        """float64 `[2, len(rows)]` on the device: the token each of `rows` (one-token decodes
        whose new token's K/V slot is allocated) draws next and its log-prob; `seeds` are the
        requests' sampling seeds."""
        shape = self.shape(rows)
        buf = self.buffers_for(shape)
        self._fill(buf, shape, rows, seeds)
        return self.run(buf, shape)[:, : len(rows)]

    @torch.inference_mode()
    def decode_round(
        self, rows: list[Request], seeds: list[int], counts: list[int]
    ) -> torch.Tensor:
        """float64 `[k, 2, len(rows)]` on the device, k = max(counts): `decode` run k times,
        each step's input tokens taken on the device from the previous step's draws. Row i
        runs `counts[i]` steps (its K/V slots for them allocated); its entries past them are
        garbage (its writes go to the scratch block). The host fills the buffers once: a later
        step's positions, write slots, context lengths and sampling counters are computed on
        the device from the first step's and the block table."""
        k, n = max(counts), len(rows)
        shape = self.shape(rows, counts)
        buf = self.buffers_for(shape)
        self._fill(buf, shape, rows, seeds)
        results = torch.empty(k, 2, shape.batch, dtype=torch.float64, device=self.device)
        results[0].copy_(self.run(buf, shape))
        if k > 1:
            steps = self._round_inputs(buf, counts + [0] * (shape.batch - n), k)
            for j in range(1, k):
                buf.ints.copy_(steps[j])
                buf.ints[_IDS, :n].copy_(results[j - 1, 0, :n])
                results[j].copy_(self.run(buf, shape))
        return results[:, :, :n]

    def _round_inputs(self, buf: _Buffers, counts: list[int], k: int) -> torch.Tensor:
        """int64 `[k, 7, batch]` on the device: the input rows of a round's k steps from the
        first step's (filled in `buf`): position, context length and counter advance by one a
        step up to a row's last step (`counts`, 0 for padding rows), the write slot is the
        position's place in the row's blocks, the scratch block's after its last step."""
        cache, first = self.cache, buf.ints
        bs = cache.block_size
        step = torch.arange(k, device=self.device).view(k, 1)
        count = torch.tensor(counts, dtype=torch.int64).to(self.device, non_blocking=True)
        ahead = torch.minimum(step, count.view(1, -1) - 1).clamp_(min=0)
        pos = first[_POS].view(1, -1) + ahead
        block = buf.table.gather(1, (pos // bs).T.clamp_(max=buf.table.shape[1] - 1)).T
        slot = torch.where(
            step < count.view(1, -1), block * bs + pos % bs, cache.scratch_block * bs
        )
        steps = first.unsqueeze(0).repeat(k, 1, 1)
        steps[:, _POS] = pos
        steps[:, _SLOT] = slot
        steps[:, _CTX] = pos + 1
        steps[:, _COUNTER] = first[_COUNTER].view(1, -1) + ahead
        return steps

    @torch.inference_mode()
    def sample(self, logits: torch.Tensor, rows: list[Request], seeds: list[int]) -> torch.Tensor:
        """`sample_fixed` for rows computed elsewhere (a step's prefills), eagerly."""
        sampling, values = sampling_inputs(rows, seeds, 0)
        ints = host_view(array("q", sampling), torch.int64).view(3, -1)
        ints = ints.to(self.device, non_blocking=True)
        floats = host_view(values, torch.float32).view(2, -1).to(self.device, non_blocking=True)
        return sample_fixed(
            logits, floats[0], floats[1], ints[0], ints[1], ints[2], keeps_nucleus(rows)
        )

    def inputs(self, buf: _Buffers) -> list[torch.Tensor]:
        return [buf.ints, buf.table, buf.floats]

    def allocate(self, shape: Shape) -> _Buffers:
        dev, cache = self.device, self.cache
        ints = torch.zeros(7, shape.batch, dtype=torch.int64, device=dev)
        ints[_SLOT] = cache.scratch_block * cache.block_size
        ints[_CTX] = 1
        table = torch.full((shape.batch, shape.blocks), cache.pad_block, device=dev)
        floats = torch.zeros(2, shape.batch, dtype=torch.float32, device=dev)
        floats[1] = 1.0
        return _Buffers(ints, table, floats)

    def _fill(self, buf: _Buffers, shape: Shape, rows: list[Request], seeds: list[int]) -> None:
        """Copy the rows' inputs into the buffers; the rows past them stay padding.

        The host's share of every decode step, so it is written for speed: one comprehension
        per input row and `array` buffers (a C loop over the ints, about 4x faster than
        `torch.tensor` of a list) viewed as tensors without a copy."""
        bs, n, pad = self.cache.block_size, len(rows), shape.batch - len(rows)
        pad_block, width = self.cache.pad_block, shape.blocks
        pos = [r.num_computed for r in rows]
        zeros = [0] * pad
        sampling, floats = sampling_inputs(rows, seeds, pad)
        ints = array(
            "q",
            [r.token_at(p) for r, p in zip(rows, pos, strict=True)]
            + zeros
            + pos
            + zeros
            + [token_slot(r.blocks, bs, p) for r, p in zip(rows, pos, strict=True)]
            + [self.cache.scratch_block * bs] * pad
            + [p + 1 for p in pos]
            + [1] * pad
            + sampling,
        )
        table = block_table(rows, width, pad_block)
        buf.ints.copy_(host_view(ints, torch.int64).view(7, shape.batch), non_blocking=True)
        buf.table[:n].copy_(host_view(table, torch.int64).view(n, width), non_blocking=True)
        if pad:
            buf.table[n:].fill_(pad_block)
        buf.floats.copy_(host_view(floats, torch.float32).view(2, shape.batch), non_blocking=True)

    def step(self, buf: _Buffers, shape: Shape) -> torch.Tensor:
        cache, ints = self.cache, buf.ints
        width = shape.blocks * cache.block_size
        mask = torch.arange(width, device=self.device).view(1, -1) < ints[_CTX].view(-1, 1)
        logits = self.transformer.decode_fixed(
            ints[_IDS],
            ints[_POS],
            cache.write_rows(ints[_SLOT]),
            cache.table_rows(buf.table),
            mask.view(shape.batch, 1, 1, width),
            cache,
        )
        return sample_fixed(
            logits,
            buf.floats[0],
            buf.floats[1],
            ints[_SEED_LO],
            ints[_SEED_HI],
            ints[_COUNTER],
            shape.nucleus,
        )
