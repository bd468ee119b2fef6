"""Least outstanding requests with sticky trajectories: verl's default rollout routing.

A new trajectory goes to the engine with the fewest in-flight turns (ties: lowest id), counted
by the policy itself (+1 on assign, -1 on `on_turn_end`), as verl's server manager does. Later
turns stick to the trajectory's engine so its prefix cache is reused.

Stickiness guard: when the sticky engine is saturated (`is_saturated`: requests waiting for KV,
or too little free KV for the turn's context) and some other engine is not, the turn moves to
the least-loaded unsaturated engine and the trajectory sticks there from then on. Without the
guard (`sticky_guard=False`) a saturated engine keeps receiving its trajectories' turns and
thrashes (preempt, recompute, preempt again), the failure seen with consistent-hash routing.
"""

from __future__ import annotations

from rstar2.scheduler.policy import Policy, TurnRequest, is_saturated


class LeastOutstanding(Policy):
    name = "least_outstanding"

    def __init__(self, num_engines: int, sticky_guard: bool = True) -> None:
        super().__init__(num_engines)
        self.sticky_guard = sticky_guard
        self.outstanding = [0] * num_engines
        self._engine_of: dict[str, int] = {}
        self.moved = 0
        """Turns moved off a saturated sticky engine (observable for tests and reports)."""

    def assign(self, req: TurnRequest) -> int:
        engine = self._engine_of.get(req.traj_id)
        if engine is None:
            engine = self._least_loaded(range(self.num_engines))
        elif self.sticky_guard and is_saturated(self.stats[engine], req.context_tokens):
            free = [
                e
                for e in range(self.num_engines)
                if not is_saturated(self.stats[e], req.context_tokens)
            ]
            if free:
                engine = self._least_loaded(free)
                self.moved += 1
        self._engine_of[req.traj_id] = engine
        self.outstanding[engine] += 1
        return engine

    def on_turn_end(self, traj_id: str) -> None:
        engine = self._engine_of.get(traj_id)
        if engine is not None and self.outstanding[engine] > 0:
            self.outstanding[engine] -= 1

    def on_finish(self, traj_id: str) -> None:
        self._engine_of.pop(traj_id, None)

    def _least_loaded(self, engines: range | list[int]) -> int:
        return min(engines, key=self.outstanding.__getitem__)
