"""Block accounting: allocation is all-or-nothing and freed blocks are reused."""

from __future__ import annotations

import pytest

from rstar2.engine.block_pool import BlockPool, blocks_needed


def test_blocks_needed_rounds_up() -> None:
    assert [blocks_needed(n, 16) for n in (0, 1, 16, 17, 32, 33)] == [0, 1, 1, 2, 2, 3]


def test_allocate_takes_all_or_nothing() -> None:
    pool = BlockPool(4)
    first = pool.allocate(3)
    assert first is not None and len(set(first)) == 3
    assert pool.allocate(2) is None
    assert pool.num_free == 1
    pool.free(first)
    assert pool.num_free == 4
    assert sorted(pool.allocate(4) or []) == [0, 1, 2, 3]


def test_freed_blocks_are_reused_last() -> None:
    pool = BlockPool(3)
    a = pool.allocate(1)
    assert a is not None
    pool.free(a)
    assert pool.allocate(3) == [1, 2, a[0]]


def test_bad_sizes_are_rejected() -> None:
    with pytest.raises(ValueError):
        BlockPool(0)
    with pytest.raises(ValueError):
        BlockPool(2).allocate(-1)
