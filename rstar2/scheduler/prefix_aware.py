"""Prefix/cache-aware routing with a load-imbalance fall-back, in the style of the SGLang router.

The SGLang router keeps an approximate radix tree of the prefixes it sent to each worker and
routes as follows (defaults in brackets), which this policy reproduces at trajectory grain:

1. If loads are imbalanced, i.e. ``max - min > balance_abs_threshold`` [32] and
   ``max > min * balance_rel_threshold`` [1.0001], send to the least-loaded engine.
2. Otherwise find the engine with the longest cached prefix. Here the prefix of a later turn is
   the trajectory's own context on the engine that served its previous turn (match rate =
   previous context / current context), and the prefix of a new trajectory is its prompt on any
   engine that already served a rollout of the same prompt (match rate = 1.0; the least loaded
   of those). If the match rate reaches ``cache_threshold`` [0.5], send it there.
3. Otherwise send to the engine with the smallest tree (fewest live context tokens routed).

Load is the number of in-flight turns counted by the policy, as the router does. The stickiness
guard of `least_outstanding` applies to the cache-following choice of step 2 as well.
"""

from __future__ import annotations

from collections.abc import Sequence

from rstar2.scheduler.policy import Policy, TurnRequest, is_saturated


class PrefixAware(Policy):
    name = "prefix_aware"

    def __init__(
        self,
        num_engines: int,
        balance_abs_threshold: int = 32,
        balance_rel_threshold: float = 1.0001,
        cache_threshold: float = 0.5,
        sticky_guard: bool = True,
    ) -> None:
        super().__init__(num_engines)
        self.balance_abs_threshold = balance_abs_threshold
        self.balance_rel_threshold = balance_rel_threshold
        self.cache_threshold = cache_threshold
        self.sticky_guard = sticky_guard
        self.load = [0] * num_engines
        self.tree_tokens = [0] * num_engines
        self._where: dict[str, tuple[int, int]] = {}  # traj -> (engine, context tokens there)
        self._prompt_engines: dict[str, list[int]] = {}

    def prepare(self, batch: Sequence[TurnRequest]) -> None:
        self._prompt_engines.clear()  # a new step brings new prompts; forget the old ones

    def assign(self, req: TurnRequest) -> int:
        engine = self._choose(req)
        previous = self._where.get(req.traj_id)
        if previous is not None:
            self.tree_tokens[previous[0]] -= previous[1]
        self._where[req.traj_id] = (engine, req.context_tokens)
        self.tree_tokens[engine] += req.context_tokens
        engines = self._prompt_engines.setdefault(req.prompt_id, [])
        if engine not in engines:
            engines.append(engine)
        self.load[engine] += 1
        return engine

    def _choose(self, req: TurnRequest) -> int:
        lo, hi = min(self.load), max(self.load)
        if hi - lo > self.balance_abs_threshold and hi > lo * self.balance_rel_threshold:
            return self.load.index(lo)
        cached, rate = self._best_match(req)
        if cached is not None and rate >= self.cache_threshold:
            if not (self.sticky_guard and is_saturated(self.stats[cached], req.context_tokens)):
                return cached
            candidates = [
                e
                for e in range(self.num_engines)
                if not is_saturated(self.stats[e], req.context_tokens)
            ]
            if candidates:
                return min(candidates, key=self.load.__getitem__)
            return cached
        return min(range(self.num_engines), key=self.tree_tokens.__getitem__)

    def _best_match(self, req: TurnRequest) -> tuple[int | None, float]:
        previous = self._where.get(req.traj_id)
        if previous is not None:
            return previous[0], previous[1] / req.context_tokens
        engines = self._prompt_engines.get(req.prompt_id)
        if engines:
            return min(engines, key=self.load.__getitem__), req.prompt_tokens / req.context_tokens
        return None, 0.0

    def on_turn_end(self, traj_id: str) -> None:
        where = self._where.get(traj_id)
        if where is not None and self.load[where[0]] > 0:
            self.load[where[0]] -= 1

    def on_finish(self, traj_id: str) -> None:
        where = self._where.pop(traj_id, None)
        if where is not None:
            self.tree_tokens[where[0]] -= where[1]
