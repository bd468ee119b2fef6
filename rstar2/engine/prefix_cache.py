"""KV blocks of finished requests, kept for a continuation that extends their tokens.

The agent loop sends each assistant turn as a new request whose prompt is the previous
request's prompt + its output + the tool response. When a request finishes, its blocks (whose
K/V cover all its tokens but the last sampled one) are parked here instead of being freed; a
new request whose prompt starts with exactly those tokens takes them over and only prefills
the rest. Parked blocks are free memory for every other purpose: the scheduler evicts the
least recently parked entry whenever the pool runs short, before preempting anyone.

What it does not do: share blocks between live requests (an entry is taken whole by one
request), hash blocks, or match anything but a whole parked sequence as a prompt prefix.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass


@dataclass
class PrefixEntry:
    tokens: list[int]
    """Tokens whose K/V the blocks hold, in position order."""
    blocks: list[int]


class PrefixCache:
    def __init__(self, max_entries: int) -> None:
        if max_entries < 0:
            raise ValueError(f"max_entries must be >= 0, got {max_entries}")
        self.max_entries = max_entries
        self._entries: OrderedDict[int, PrefixEntry] = OrderedDict()
        self._next_key = 0
        self.num_blocks = 0
        self.hits = 0
        self.reused_tokens = 0

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, tokens: list[int], blocks: list[int]) -> list[int]:
        """Park `blocks` holding `tokens`; returns blocks evicted to respect max_entries."""
        if not tokens or self.max_entries == 0:
            return blocks
        self._entries[self._next_key] = PrefixEntry(tokens, blocks)
        self._next_key += 1
        self.num_blocks += len(blocks)
        freed: list[int] = []
        while len(self._entries) > self.max_entries:
            freed.extend(self.evict())
        return freed

    def take(self, prompt: list[int]) -> PrefixEntry | None:
        """Remove and return the longest entry that is a strict prefix of `prompt`."""
        best_key, best_len = None, 0
        for key, entry in self._entries.items():
            n = len(entry.tokens)
            if best_len < n < len(prompt) and prompt[:n] == entry.tokens:
                best_key, best_len = key, n
        if best_key is None:
            return None
        entry = self._entries.pop(best_key)
        self.num_blocks -= len(entry.blocks)
        self.hits += 1
        self.reused_tokens += best_len
        return entry

    def evict(self) -> list[int]:
        """Drop the oldest entry; its blocks (empty list when there is none)."""
        if not self._entries:
            return []
        _, entry = self._entries.popitem(last=False)
        self.num_blocks -= len(entry.blocks)
        return entry.blocks
