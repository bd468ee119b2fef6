"""Fixed-shape prefill: a step's short prefills run through static buffers, captured as CUDA
graphs on a GPU.

In multi-turn RL every new turn after a tool response is a continuation: a few dozen new
tokens after a cached context. On the fixed path (`decode_graphs.py`) the decodes of a step
replay a graph, but its prefills ran the dynamic forward (`Transformer.forward` over a
`StepBatch`): index tensors built on the host and a launch per operation per layer, bound by
Python on a GPU, in every step that admits a turn. With `engine.prefill_graph_tokens` N > 0
the prefills of at most N new tokens (continuations and short prompts alike) are padded to a
row bucket, a token bucket (query slots per row, from `MIN_TOKENS`) and a width bucket (KV
blocks a row gathers), their inputs copied into that shape's static buffers, and one function
computes them (`Transformer.prefill_fixed`: the new tokens' K/V written to their blocks, then
one batched attention call per layer over each row's gathered blocks, a slot attending up to
its own position) and samples each row's next token (`sampler.sample_fixed`, as the decodes
and the dynamic prefills of the fixed path are sampled). On CUDA each (rows, tokens, width,
top-p) shape is captured as a CUDA graph the first time a step needs it, in the decode graphs'
memory pool; elsewhere it runs eagerly (the CPU tests check it against the dynamic path).
Longer prefills keep the dynamic forward.

A padding slot of a real row repeats the row's last token and position (the same query and
mask: finite, and dropped) and writes its K/V to the scratch block; a padding row does the
same at position 0 and reads the pad block.

What it does not do: split long prompts into chunks, or run prefills in rounds.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass

import torch

from rstar2.engine.kv_cache import KVCache, token_slots
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

MIN_TOKENS = 8
"""The smallest token bucket: a prefill of 2 to 8 new tokens pads to 8 query slots."""
# rows of the int64 per-token buffer, and of the per-row one
_IDS, _POS, _SLOT = range(3)
_LAST, _SEED_LO, _SEED_HI, _COUNTER = range(4)


@dataclass(frozen=True)
class PrefillShape:
    rows: int
    tokens: int
    """Query slots per row."""
    blocks: int
    nucleus: bool


@dataclass
class _Buffers(Graphed):
    tokens: torch.Tensor
    """int64 `[3, rows * tokens]`: ids, positions, write slots, row after row."""
    rows: torch.Tensor
    """int64 `[4, rows]`: each row's last real slot (flat index), seed halves, counters."""
    table: torch.Tensor
    """int64 `[rows, blocks]`: each row's KV blocks, padded with the pad block."""
    floats: torch.Tensor
    """float32 `[2, rows]`: temperatures and top-p."""


class FixedPrefill(ShapeGraphs[PrefillShape, _Buffers]):
    def __init__(
        self,
        transformer: Transformer,
        cache: KVCache,
        max_num_seqs: int,
        max_model_len: int,
        max_tokens: int,
        graphs: bool,
        pool: tuple[int, int] | None = None,
    ) -> None:
        """Prefills of 2 to `max_tokens` new tokens; `pool` is the CUDA graph memory pool
        to share (the decode graphs')."""
        if max_tokens < 2:
            raise ValueError(f"prefill graphs need max_tokens >= 2, got {max_tokens}")
        super().__init__(cache.device, graphs, pool)
        self.transformer = transformer
        self.cache = cache
        self.max_tokens = max_tokens
        self.row_sizes = buckets(max_num_seqs)
        self.token_sizes = [t for t in buckets(max_tokens) if t >= MIN_TOKENS] or [max_tokens]
        self.width_sizes = width_buckets(max_model_len, cache.block_size)

    def takes(self, new_tokens: int) -> bool:
        """Whether a prefill of `new_tokens` new tokens runs here."""
        return 2 <= new_tokens <= self.max_tokens

    def shape(self, rows: list[tuple[Request, int]]) -> PrefillShape:
        bs = self.cache.block_size
        need = -(-max(r.num_computed + n for r, n in rows) // bs)
        return PrefillShape(
            bucket(len(rows), self.row_sizes),
            bucket(max(n for _, n in rows), self.token_sizes),
            bucket(need, self.width_sizes),
            keeps_nucleus([r for r, _ in rows]),
        )

    @torch.inference_mode()
    def prefill(self, rows: list[tuple[Request, int]], seeds: list[int]) -> torch.Tensor:
        """float64 `[2, len(rows)]` on the device: the token each of `rows` (a request and its
        new tokens this step, their K/V slots allocated) draws next and its log-prob."""
        for req, n in rows:
            if not self.takes(n):
                raise ValueError(
                    f"request {req.request_id!r}: {n} new tokens, not 2..{self.max_tokens}"
                )
        shape = self.shape(rows)
        buf = self.buffers_for(shape)
        self._fill(buf, shape, rows, seeds)
        return self.run(buf, shape)[:, : len(rows)]

    def inputs(self, buf: _Buffers) -> list[torch.Tensor]:
        return [buf.tokens, buf.rows, buf.table, buf.floats]

    def allocate(self, shape: PrefillShape) -> _Buffers:
        dev, cache = self.device, self.cache
        tokens = torch.zeros(3, shape.rows * shape.tokens, dtype=torch.int64, device=dev)
        tokens[_SLOT] = cache.scratch_block * cache.block_size
        rows = torch.zeros(4, shape.rows, dtype=torch.int64, device=dev)
        rows[_LAST] = torch.arange(shape.rows, device=dev) * shape.tokens
        table = torch.full((shape.rows, shape.blocks), cache.pad_block, device=dev)
        floats = torch.zeros(2, shape.rows, dtype=torch.float32, device=dev)
        floats[1] = 1.0
        return _Buffers(tokens, rows, table, floats)

    def _fill(
        self,
        buf: _Buffers,
        shape: PrefillShape,
        rows: list[tuple[Request, int]],
        seeds: list[int],
    ) -> None:
        """Copy the rows' inputs into the buffers (padding slots and rows as the module's
        docstring says)."""
        bs, width, slots_per_row = self.cache.block_size, shape.blocks, shape.tokens
        scratch = self.cache.scratch_block * bs
        ids: list[int] = []
        pos: list[int] = []
        slots: list[int] = []
        last: list[int] = []
        for i, (req, n) in enumerate(rows):
            first, pad = req.num_computed, slots_per_row - n
            new = req.token_slice(first, first + n)
            ids += new + [new[-1]] * pad
            pos += [*range(first, first + n)] + [first + n - 1] * pad
            slots += token_slots(req.blocks, bs, first, n)
            slots += [scratch] * pad
            last.append(i * slots_per_row + n - 1)
        n, padding = len(rows), shape.rows - len(rows)
        ids += [0] * (padding * slots_per_row)
        pos += [0] * (padding * slots_per_row)
        slots += [scratch] * (padding * slots_per_row)
        last += [(n + i) * slots_per_row for i in range(padding)]
        requests = [r for r, _ in rows]
        sampling, floats = sampling_inputs(requests, seeds, padding)
        table = block_table(requests, width, self.cache.pad_block)
        table.extend([self.cache.pad_block] * (padding * width))  # the padding rows
        tokens = array("q", ids + pos + slots)
        buf.tokens.copy_(host_view(tokens, torch.int64).view(3, -1), non_blocking=True)
        buf.rows.copy_(host_view(array("q", last + sampling), torch.int64).view(4, -1),
                       non_blocking=True)  # fmt: skip
        buf.table.copy_(host_view(table, torch.int64).view(shape.rows, width), non_blocking=True)
        buf.floats.copy_(host_view(floats, torch.float32).view(2, -1), non_blocking=True)

    def step(self, buf: _Buffers, shape: PrefillShape) -> torch.Tensor:
        cache, tokens, rows = self.cache, buf.tokens, buf.rows
        width = shape.blocks * cache.block_size
        keys = torch.arange(width, device=self.device).view(1, 1, -1)
        mask = keys <= tokens[_POS].view(shape.rows, shape.tokens, 1)
        logits = self.transformer.prefill_fixed(
            tokens[_IDS],
            tokens[_POS],
            cache.write_rows(tokens[_SLOT]),
            rows[_LAST],
            cache.table_rows(buf.table),
            mask,
            cache,
        )
        return sample_fixed(
            logits,
            buf.floats[0],
            buf.floats[1],
            rows[_SEED_LO],
            rows[_SEED_HI],
            rows[_COUNTER],
            shape.nucleus,
        )
