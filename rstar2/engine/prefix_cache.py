"""KV blocks of finished requests, kept for a continuation that extends their tokens.

The agent loop sends each assistant turn as a new request whose prompt is the previous
request's prompt + its output + the tool response. When a request finishes, its blocks (whose
K/V cover all its tokens but the last sampled one) are parked here instead of being freed; a
new request whose prompt starts with exactly those tokens takes them over and only prefills
the rest. Parked blocks are free memory for every other purpose: the scheduler evicts the
least recently parked entry whenever the pool runs short, before preempting anyone.

Finding the entry is a lookup, not a scan of every entry (the engine thread ran it for each
new turn, up to 256 entries each time: 10% of its Python in a tool-calling run): each entry is
indexed by how many whole `STRIDE`-token strides its tokens have and the hash of the last
of them, and a lookup hashes the prompt's strides once and looks up one bucket per stride,
so its work grows with the prompt's length over `STRIDE`, not with the number of entries.
The index only narrows the search: a candidate is compared token by token, so entries that
share a stride, or a hash collision, cost a comparison, never a wrong match.

What it does not do: share blocks between live requests (an entry is taken whole by one
request), or match anything but a whole parked sequence as a prompt prefix.
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
        self._index: dict[tuple[int, int], dict[int, None]] = {}
        """(whole strides m, hash of the m-th stride) -> the keys of the entries whose tokens
        have m whole strides, the last with that hash, in the order they were parked."""
        self._where: dict[int, tuple[int, int]] = {}
        """Each entry's key in `_index`."""
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
        key = self._next_key
        self._next_key += 1
        self._entries[key] = PrefixEntry(tokens, blocks)
        where = _index_key(tokens)
        self._where[key] = where
        self._index.setdefault(where, {})[key] = None
        self.num_blocks += len(blocks)
        freed: list[int] = []
        while len(self._entries) > self.max_entries:
            freed.extend(self.evict())
        return freed

    def take(self, prompt: list[int]) -> PrefixEntry | None:
        """Remove and return the longest entry that is a strict prefix of `prompt` (of equal
        lengths, the one parked first)."""
        if not self._entries:
            return None
        limit = len(prompt)
        top = (limit - 1) // STRIDE  # a strict prefix has at most this many whole strides
        hashes = stride_hashes(prompt, top)
        for m in range(top, -1, -1):  # longer prefixes have more whole strides
            bucket = self._index.get((m, hashes[m - 1] if m else 0))
            if bucket is None:
                continue
            best_key, best_len = None, 0
            for key in bucket:
                tokens = self._entries[key].tokens
                n = len(tokens)
                if best_len < n < limit and prompt[:n] == tokens:
                    best_key, best_len = key, n
            if best_key is not None:
                entry = self._pop(best_key)
                self.hits += 1
                self.reused_tokens += best_len
                return entry
        return None

    def evict(self) -> list[int]:
        """Drop the oldest entry; its blocks (empty list when there is none)."""
        if not self._entries:
            return []
        return self._pop(next(iter(self._entries))).blocks

    def _pop(self, key: int) -> PrefixEntry:
        entry = self._entries.pop(key)
        where = self._where.pop(key)
        bucket = self._index[where]
        del bucket[key]
        if not bucket:
            del self._index[where]
        self.num_blocks -= len(entry.blocks)
        return entry


STRIDE = 16
"""Tokens per stride of the index: a lookup hashes the prompt's whole strides once and then
looks up one bucket per stride, longest first."""


def stride_hashes(tokens: list[int], count: int) -> list[int]:
    """The hashes of `tokens`' first `count` whole strides, each on its own."""
    return [
        hash(tuple(tokens[start : start + STRIDE])) for start in range(0, count * STRIDE, STRIDE)
    ]


def _index_key(tokens: list[int]) -> tuple[int, int]:
    """Where an entry of `tokens` is indexed: its whole strides and the hash of the last one."""
    m = len(tokens) // STRIDE
    return m, hash(tuple(tokens[(m - 1) * STRIDE : m * STRIDE])) if m else 0
