"""Multi-turn prefix reuse: parked blocks, matching, eviction, and exact continuation output."""

from __future__ import annotations

import random

import pytest
import torch
from transformers import Qwen2ForCausalLM

from rstar2.engine import prefix_cache
from rstar2.engine.config import EngineConfig
from rstar2.engine.core import EngineCore
from rstar2.engine.prefix_cache import PrefixCache
from rstar2.engine.protocol import SamplingParams
from tests.engine.factories import random_prompts


def test_take_returns_the_longest_strict_prefix_and_removes_it() -> None:
    cache = PrefixCache(max_entries=8)
    cache.put([1, 2], [10])
    cache.put([1, 2, 3], [11, 12])
    cache.put([1, 2, 3, 4], [13])  # not strict: equal to the prompt below
    entry = cache.take([1, 2, 3, 4])
    assert entry is not None and entry.blocks == [11, 12]
    assert cache.take([9, 9, 9]) is None
    assert len(cache) == 2 and cache.num_blocks == 2


def _reference_take(parked: list[tuple[int, list[int]]], prompt: list[int]) -> int | None:
    """The id of the longest parked sequence that is a strict prefix of `prompt` (the first
    parked of equal lengths): what `take` must find, by a scan of every entry."""
    best, best_len = None, 0
    for block, tokens in parked:
        if best_len < len(tokens) < len(prompt) and prompt[: len(tokens)] == tokens:
            best, best_len = block, len(tokens)
    return best


@pytest.mark.parametrize("collide", [False, True])
def test_take_finds_what_a_scan_of_every_entry_finds(
    collide: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Random parked sequences sharing prompts, lengths on and off the stride's boundaries,
    ties of equal length, the oldest evicted past `max_entries`; `collide` makes every stride
    hash equal, so only the comparison of the tokens tells entries apart."""
    if collide:
        monkeypatch.setattr(prefix_cache, "hash", lambda _: 0, raising=False)
    rng = random.Random(7)
    stride = prefix_cache.STRIDE
    roots = [[rng.randrange(5) for _ in range(rng.randint(1, 3 * stride))] for _ in range(4)]
    for _ in range(300):
        cache = PrefixCache(max_entries=rng.randint(1, 10))
        parked: list[tuple[int, list[int]]] = []  # (its one block, its tokens), oldest first
        for block in range(rng.randint(0, 12)):
            bases = roots + [t for _, t in parked]
            base = rng.choice(bases)
            tokens = base[: rng.randint(1, len(base))] + [
                rng.randrange(5) for _ in range(rng.randint(0, 2 * stride))
            ]
            if parked and rng.random() < 0.2:
                tokens = list(rng.choice(parked)[1])  # a tie: the same tokens parked again
            evicted = cache.put(tokens, [block])
            parked.append((block, tokens))
            expected_evicted = [b for b, _ in parked[: -cache.max_entries]]
            del parked[: -cache.max_entries]
            assert evicted == expected_evicted
        prompt = rng.choice(roots + [t for _, t in parked])
        prompt = prompt + [rng.randrange(5) for _ in range(rng.randint(0, stride + 1))]
        expected = _reference_take(parked, prompt)
        entry = cache.take(prompt)
        assert (entry.blocks[0] if entry is not None else None) == expected
        assert len(cache) == len(parked) - (expected is not None)
        left = [b for b, _ in parked if b != expected]
        assert [cache.evict() for _ in left] == [[b] for b in left] and len(cache) == 0


def test_oldest_entries_are_evicted_first() -> None:
    cache = PrefixCache(max_entries=2)
    assert cache.put([1], [1]) == []
    cache.put([2], [2])
    assert cache.put([3], [3]) == [1]  # over max_entries: the oldest goes
    assert cache.evict() == [2]
    assert cache.evict() == [3]
    assert cache.evict() == []


def test_disabled_cache_hands_blocks_straight_back() -> None:
    assert PrefixCache(0).put([1, 2], [5, 6]) == [5, 6]


@pytest.mark.usefixtures("decode_path")
def test_continuation_reuses_kv_and_matches_a_fresh_prefill(qwen2: Qwen2ForCausalLM) -> None:
    first_prompt, tool = random_prompts(2, seed=13)
    greedy = SamplingParams(20, temperature=0.0)
    core = EngineCore(qwen2)
    first = core.generate([first_prompt], greedy)[0]
    follow_up = first_prompt + first.token_ids + tool  # next turn: previous turn + tool output
    second = core.generate([follow_up], greedy)[0]
    fresh = EngineCore(qwen2).generate([follow_up], greedy)[0]
    assert second.token_ids == fresh.token_ids
    assert torch.allclose(torch.tensor(second.logprobs), torch.tensor(fresh.logprobs), atol=1e-9)
    cache = core.scheduler.prefix_cache
    assert cache.hits == 1
    assert cache.reused_tokens == len(first_prompt) + len(first.token_ids) - 1


@pytest.mark.usefixtures("decode_path")
def test_parked_blocks_are_evicted_before_anyone_is_preempted(qwen2: Qwen2ForCausalLM) -> None:
    core = EngineCore(qwen2, EngineConfig(kv_budget_tokens=256))  # 16 blocks
    core.generate(random_prompts(3, seed=14, low=20, high=30), SamplingParams(10, 0.0))
    assert core.stats().kv_free_tokens == 256  # parked blocks count as free
    parked = core.scheduler.prefix_cache.num_blocks
    assert parked >= 6 and core.scheduler.pool.num_free == 16 - parked
    # two requests of 70-80 tokens need 10 blocks: more than the unparked ones, fewer than all
    core.generate(random_prompts(2, seed=15, low=60, high=70), SamplingParams(10, 0.0))
    assert core.stats().preemptions == 0
    assert len(core.scheduler.prefix_cache) < 5
