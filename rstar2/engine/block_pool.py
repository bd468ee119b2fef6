"""A pool of fixed-size KV blocks: which block ids are free, nothing about their contents.

Blocks are plain integers `0 .. num_blocks-1`; the KV cache maps block `b` to token slots
`b*block_size .. (b+1)*block_size-1`. Freed blocks go to the back of the free list, so the
ones freed longest ago are reused first (vLLM's LRU order, which matters once prefix reuse
keeps freed blocks' contents around).

What it does not do: reference counting or prefix hashing, and it never evicts: the scheduler
decides who gives blocks back (preemption).
"""

from __future__ import annotations

from collections import deque


def blocks_needed(num_tokens: int, block_size: int) -> int:
    """Blocks that hold `num_tokens` tokens."""
    return -(-num_tokens // block_size)


class BlockPool:
    def __init__(self, num_blocks: int) -> None:
        if num_blocks < 1:
            raise ValueError(f"num_blocks must be >= 1, got {num_blocks}")
        self.num_blocks = num_blocks
        self._free: deque[int] = deque(range(num_blocks))

    @property
    def num_free(self) -> int:
        return len(self._free)

    def allocate(self, n: int) -> list[int] | None:
        """Take `n` blocks, or None (and take nothing) when fewer are free."""
        if n < 0:
            raise ValueError(f"cannot allocate {n} blocks")
        if n > len(self._free):
            return None
        return [self._free.popleft() for _ in range(n)]

    def free(self, blocks: list[int]) -> None:
        """Give blocks back (the caller must not use them afterwards)."""
        self._free.extend(blocks)
