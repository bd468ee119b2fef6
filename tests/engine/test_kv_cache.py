"""KV storage addressing: what is written at a slot is gathered back at that position."""

from __future__ import annotations

import torch

from rstar2.engine.kv_cache import KVCache, token_slot, token_slots


def test_written_tokens_come_back_in_position_order_and_padding_is_zero() -> None:
    cache = KVCache(1, num_kv_heads=2, head_dim=3, num_blocks=4, block_size=2, dtype=torch.float32)
    blocks = [3, 1]  # positions 0-1 in block 3, positions 2-3 in block 1
    slots = torch.tensor([3 * 2 + 0, 3 * 2 + 1, 1 * 2 + 0])  # three tokens written
    k = torch.arange(3 * 2 * 3, dtype=torch.float32).view(3, 2, 3) + 1
    cache.write(0, cache.write_rows(slots), k, -k)
    got_k, got_v = cache.gather(0, cache.block_rows([blocks], 3), 1)  # 3rd block is padding
    assert got_k.shape == (1, 2, 6, 3)
    assert torch.equal(got_k[0, :, :3], k.transpose(0, 1))
    assert torch.equal(got_v[0, :, :3], -k.transpose(0, 1))
    assert torch.count_nonzero(got_k[0, :, 3:]) == 0  # unwritten tail and pad block


def test_a_tokens_slot_is_its_blocks_row_plus_its_offset() -> None:
    """Position 5 of a sequence holding blocks [7, 2] of 4 tokens is offset 1 of block 2:
    slot 9; a prefill's run of slots is the same formula position by position."""
    assert token_slot([7, 2], 4, 5) == 2 * 4 + 1
    assert token_slot([7, 2], 4, 3) == 7 * 4 + 3
    assert token_slots([7, 2], 4, 2, 5) == [token_slot([7, 2], 4, p) for p in range(2, 7)]
    assert token_slots([7, 2], 4, 2, 5) == [30, 31, 8, 9, 10]
