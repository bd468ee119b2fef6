"""The fixed-shape steps' padding sizes (`shape_graphs.buckets`, `bucket`)."""

from __future__ import annotations

import pytest

from rstar2.engine.shape_graphs import bucket, buckets


def test_buckets_are_powers_of_two_and_their_midpoints_up_to_the_limit() -> None:
    assert buckets(256) == [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256]
    assert buckets(100)[-3:] == [64, 96, 100]
    assert buckets(1) == [1] and buckets(3) == [1, 2, 3] and buckets(4) == [1, 2, 3, 4]


@pytest.mark.parametrize("limit", [1, 5, 77, 128, 1000])
def test_no_count_is_padded_by_a_third_or_more(limit: int) -> None:
    sizes = buckets(limit)
    for n in range(1, limit + 1):
        size = bucket(n, sizes)
        assert n <= size and (size - n) * 3 < size  # 77 rows: 96 (powers of two alone: 128)
    with pytest.raises(ValueError):
        bucket(limit + 1, sizes)
