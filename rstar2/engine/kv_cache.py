"""The KV cache storage: one flat tensor per layer for K and one for V, addressed by block.

Layout, per layer: `[num_kv_heads * (num_blocks + 1) * block_size, head_dim]`, head-major then
block then position. Gathering whole blocks (`block_size * head_dim` contiguous values each) for
a batch of sequences yields `[batch, heads, blocks * block_size, head_dim]` with no transpose,
ready for batched matmul, and copies far fewer, larger pieces than a per-token gather. The
extra block after the pool (`pad_block`) pads short block tables, and one more
(`scratch_block`) takes the writes of a fixed-shape decode step's padding rows
(`decode_graphs.py`), so the pad block is never written. Positions past a sequence's length
(the padding block, the unwritten tail of its last block) are masked out of the softmax, but
their values still enter the matmuls, so the storage starts zeroed: masked scores must be
finite and masked values must not be NaN (0 * NaN is NaN).

The storage and every index tensor it builds live on `device` (the engine's).

What it does not do: decide which blocks a request owns (the block pool and scheduler do).
"""

from __future__ import annotations

import torch


def token_slot(blocks: list[int], block_size: int, position: int) -> int:
    """The flat slot of a sequence's token at `position`, given the sequence's block table
    `blocks`: its block's index times `block_size` plus its offset in the block (the row
    `KVCache.write_rows` turns into one row per head). A round of decode steps computes the
    same on the device (`FixedDecoder.decode_round`)."""
    return blocks[position // block_size] * block_size + position % block_size


def token_slots(blocks: list[int], block_size: int, start: int, n: int) -> list[int]:
    """`token_slot` of positions `start` to `start + n - 1` (the formula inline: a prefill's
    every token goes through it, one call per request rather than per token)."""
    bs = block_size
    return [blocks[p // bs] * bs + p % bs for p in range(start, start + n)]


class KVCache:
    def __init__(
        self,
        num_layers: int,
        num_kv_heads: int,
        head_dim: int,
        num_blocks: int,
        block_size: int,
        dtype: torch.dtype,
        device: torch.device | str = "cpu",
    ) -> None:
        self.device = torch.device(device)
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.block_size = block_size
        self.pad_block = num_blocks
        self.scratch_block = num_blocks + 1
        self._blocks_per_head = num_blocks + 2
        rows = num_kv_heads * self._blocks_per_head * block_size
        dev = self.device
        self.k = [torch.zeros(rows, head_dim, dtype=dtype, device=dev) for _ in range(num_layers)]
        self.v = [torch.zeros(rows, head_dim, dtype=dtype, device=dev) for _ in range(num_layers)]
        self._head_offsets = torch.arange(num_kv_heads, device=dev) * self._blocks_per_head

    def write_rows(self, slots: torch.Tensor) -> torch.Tensor:
        """Rows to write K/V of tokens at `slots` ([N], slot = block * block_size + offset),
        in `[N, heads]` order."""
        head_rows = self._head_offsets * self.block_size
        return (slots.view(-1, 1) + head_rows.view(1, -1)).reshape(-1)

    def write(self, layer: int, rows: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store K/V of shape [N, heads, dim] at `rows` from `write_rows`."""
        self.k[layer].index_copy_(0, rows, k.reshape(-1, self.head_dim))
        self.v[layer].index_copy_(0, rows, v.reshape(-1, self.head_dim))

    def block_rows(self, blocks: list[list[int]], num_blocks: int) -> torch.Tensor:
        """Flat `[batch * heads * num_blocks]` block rows of each sequence's first blocks,
        padded with the zero block; feed to `gather`."""
        table = torch.tensor(
            [b[:num_blocks] + [self.pad_block] * (num_blocks - len(b)) for b in blocks],
            device=self.device,
        )
        return self.table_rows(table)

    def table_rows(self, table: torch.Tensor) -> torch.Tensor:
        """`block_rows` of a block table already on the device (`[batch, num_blocks]`)."""
        return (table.unsqueeze(1) + self._head_offsets.view(1, -1, 1)).reshape(-1)

    def gather(
        self, layer: int, block_rows: torch.Tensor, batch: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """K and V of the blocks in `block_rows`, shaped `[batch, heads, len, dim]`."""
        shape = (batch, self.num_kv_heads, -1, self.head_dim)
        width = self.block_size * self.head_dim
        k = self.k[layer].view(-1, width).index_select(0, block_rows).view(shape)
        v = self.v[layer].view(-1, width).index_select(0, block_rows).view(shape)
        return k, v
