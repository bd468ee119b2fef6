"""Sampling and selection seeds derived from a run's seed: `derive_seed(seed, kind, step, ...)`.

Every random choice of an RL run (a trajectory's sampling seed, RoC's selection RNG) is seeded
from its parts, so it never depends on timing or on which process draws it. What it does not
do: hold or advance any RNG.
"""

from __future__ import annotations

import hashlib


def derive_seed(*parts: object) -> int:
    """A 31-bit seed from any parts (stable across processes and Python versions)."""
    text = ":".join(str(p) for p in parts).encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=4).digest(), "little") & 0x7FFFFFFF
