"""The KV cache storage: one flat tensor per layer for K and one for V, addressed by token slot.

Layout, per layer: `[num_kv_heads * (num_slots + 1), head_dim]`, head-major, so that gathering
the rows `h * (num_slots + 1) + slot` for a batch of sequences yields `[batch, heads, len, dim]`
with no transpose (ready for batched matmul). Slot `b * block_size + i` is position `i` of
block `b`; the extra last slot of every head is kept at zero and used as padding, so padded
positions read finite values (they are masked out of the softmax).

Memory is allocated with `torch.empty`: pages are only committed as slots are first written,
so a large budget costs address space, not RAM, until it is used.

What it does not do: decide which slots a request owns (the block pool and scheduler do).
"""

from __future__ import annotations

import torch


class KVCache:
    def __init__(
        self,
        num_layers: int,
        num_kv_heads: int,
        head_dim: int,
        num_blocks: int,
        block_size: int,
        dtype: torch.dtype,
    ) -> None:
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.block_size = block_size
        self.num_slots = num_blocks * block_size
        self.pad_slot = self.num_slots
        rows = num_kv_heads * (self.num_slots + 1)
        self.k = [torch.empty(rows, head_dim, dtype=dtype) for _ in range(num_layers)]
        self.v = [torch.empty(rows, head_dim, dtype=dtype) for _ in range(num_layers)]
        pad_rows = self.head_offsets() + self.pad_slot
        for t in self.k + self.v:
            t[pad_rows] = 0.0
        self._head_offsets = self.head_offsets()

    def head_offsets(self) -> torch.Tensor:
        return torch.arange(self.num_kv_heads) * (self.num_slots + 1)

    def rows(self, slots: torch.Tensor) -> torch.Tensor:
        """Flat row indices for `slots` of any shape: shape `slots.shape[:-1] + (heads, len)`."""
        return slots.unsqueeze(-2) + self._head_offsets.view(-1, 1)

    def write_rows(self, slots: torch.Tensor) -> torch.Tensor:
        """Row indices to write K/V of tokens at `slots` ([N]), in `[N, heads]` order."""
        return (slots.view(-1, 1) + self._head_offsets.view(1, -1)).reshape(-1)

    def write(self, layer: int, rows: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store K/V of shape [N, heads, dim] at `rows` from `write_rows`."""
        self.k[layer].index_copy_(0, rows, k.reshape(-1, self.head_dim))
        self.v[layer].index_copy_(0, rows, v.reshape(-1, self.head_dim))

    def gather(
        self, layer: int, rows: torch.Tensor, shape: tuple[int, int, int]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """K and V at flat `rows` from `rows()`, shaped `[batch, heads, len, dim]`."""
        batch, heads, length = shape
        k = self.k[layer].index_select(0, rows).view(batch, heads, length, self.head_dim)
        v = self.v[layer].index_select(0, rows).view(batch, heads, length, self.head_dim)
        return k, v

    def slots(self, blocks: list[list[int]], lengths: list[int], width: int) -> torch.Tensor:
        """Slot of every position `< width` of each sequence, `pad_slot` past its length."""
        bs = self.block_size
        n_blk = -(-width // bs)
        table = torch.tensor([b[:n_blk] + [0] * (n_blk - len(b[:n_blk])) for b in blocks])
        pos = torch.arange(width)
        slots = table[:, pos // bs] * bs + pos % bs
        valid = pos.view(1, -1) < torch.tensor(lengths).view(-1, 1)
        return torch.where(valid, slots, self.pad_slot)
