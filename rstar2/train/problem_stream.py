"""A reproducible, resumable stream of training problems (the data cursor).

Problems are served in a shuffled order that depends only on the seed and the epoch; the
cursor `(epoch, position)` is saved in checkpoints, so a resumed run sees exactly the problems
an uninterrupted one would have. `restrict(ids)` narrows the pool (stage 3's hard subset) and
starts a fresh epoch over it.

What it does not do: load files (rstar2.data) or generate problems (rstar2.tasks).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from rstar2.problem import Problem


class ProblemStream:
    def __init__(self, problems: Sequence[Problem], seed: int) -> None:
        if not problems:
            raise ValueError("ProblemStream needs at least one problem")
        self.all = list(problems)
        self.pool = list(range(len(self.all)))
        self.seed = seed
        self.epoch = 0
        self.position = 0
        self._order = self._shuffle()

    def _shuffle(self) -> list[int]:
        order = list(self.pool)
        random.Random(f"{self.seed}:{self.epoch}:{len(self.pool)}").shuffle(order)
        return order

    def next_batch(self, n: int) -> list[Problem]:
        if n < 1:
            raise ValueError(f"batch size must be >= 1, got {n}")
        out = []
        while len(out) < n:
            if self.position == len(self._order):
                self.epoch += 1
                self.position = 0
                self._order = self._shuffle()
            out.append(self.all[self._order[self.position]])
            self.position += 1
        return out

    def restrict(self, ids: Sequence[str]) -> None:
        """Serve only these problems from now on (a new epoch over them)."""
        wanted = set(ids)
        pool = [i for i, p in enumerate(self.all) if p.id in wanted]
        if not pool:
            raise ValueError("restrict() would leave no problems")
        self.pool = pool
        self.epoch += 1
        self.position = 0
        self._order = self._shuffle()

    def state(self) -> dict[str, Any]:
        return {"pool": list(self.pool), "epoch": self.epoch, "position": self.position}

    def load_state(self, state: dict[str, Any]) -> None:
        self.pool = list(state["pool"])
        self.epoch = int(state["epoch"])
        self.position = int(state["position"])
        self._order = self._shuffle()
