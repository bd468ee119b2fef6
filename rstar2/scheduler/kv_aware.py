"""rStar2's KV-cache-aware dynamic scheduler: admit a trajectory only where its KV fits.

Each trajectory is charged a reservation R against one engine's KV capacity (from the engine's
`kv_capacity_tokens` report), and the reservation is held until `on_finish`:

    R = prompt + max response                  (reservation 'max': the rStar2 rule)
    R = prompt + scale x predicted response    (reservation 'predicted', capped at the max)

A new trajectory goes to the engine with the most unreserved capacity, ``capacity - reserved``,
provided that covers R (ties: lowest id); if no engine has room the request is held (``None``)
and the caller asks again after a finish. Every later turn goes to the trajectory's engine.

With 'max', the worst-case lengths of everything placed on an engine sum to at most its KV, so
the engine never runs out of blocks, never preempts, and stickiness cannot thrash by
construction; the price is that KV reserved for lengths never reached stays idle (with a 12K
budget and a 4K mean, two thirds of it). With 'predicted' the ledger over-commits on purpose
(lengths vary, so their sum concentrates near the mean), and two checks keep engines out of
preemption in practice though not by proof: a new trajectory also needs the engine's reported
free KV to cover R (`is_saturated`), and a trajectory that outgrows its reservation at a
turn boundary has it raised to ``context + (R0 - prompt) / 2`` (capped at the max).

Tool calls are dispatched asynchronously by the caller the moment a turn ends; the policy only
keeps the engine's share reserved while the tool runs.
"""

from __future__ import annotations

from rstar2.scheduler.policy import EngineLoad, Policy, TurnRequest, is_saturated


class KVAware(Policy):
    name = "kv_aware"

    def __init__(
        self,
        num_engines: int,
        reservation: str = "max",
        predicted_scale: float = 0.7,
        name: str | None = None,
    ) -> None:
        super().__init__(num_engines)
        self.name = name or ("kv_aware_max" if reservation == "max" else "kv_aware")
        if reservation not in ("max", "predicted"):
            raise ValueError(f"reservation must be 'max' or 'predicted', got {reservation!r}")
        self.reservation = reservation
        self.predicted_scale = predicted_scale
        self.capacity = [0] * num_engines
        self.reserved = [0] * num_engines
        self._held: dict[str, tuple[int, int, int]] = {}  # traj -> (engine, reserved, first)

    def on_stats(self, engine_id: int, stats: EngineLoad) -> None:
        super().on_stats(engine_id, stats)
        self.capacity[engine_id] = stats.kv_capacity_tokens

    def reservation_for(self, req: TurnRequest) -> int:
        """Tokens to reserve for a new trajectory (see the module docstring)."""
        if self.reservation == "predicted" and req.predicted_total_tokens is not None:
            predicted = req.prompt_tokens + self.predicted_scale * (
                req.predicted_total_tokens - req.prompt_tokens
            )
            return min(req.max_total_tokens, max(req.context_tokens, int(predicted)))
        return req.max_total_tokens

    def assign(self, req: TurnRequest) -> int | None:
        held = self._held.get(req.traj_id)
        if held is not None:
            engine, tokens, first = held
            if req.context_tokens >= tokens:  # outgrew a predicted reservation
                raised = min(
                    req.max_total_tokens, req.context_tokens + (first - req.prompt_tokens) // 2
                )
                self.reserved[engine] += raised - tokens
                self._held[req.traj_id] = (engine, raised, first)
            return engine
        need = self.reservation_for(req)
        best, best_room = None, -1
        for e in range(self.num_engines):
            room = self.capacity[e] - self.reserved[e]
            if room >= need and room > best_room and self._live_room(e, need):
                best, best_room = e, room
        if best is None:
            return None
        self.reserved[best] += need
        self._held[req.traj_id] = (best, need, need)
        return best

    def _live_room(self, engine: int, need: int) -> bool:
        """'predicted' only: the engine's last report shows free KV for `need` (see is_saturated)."""
        if self.reservation == "max":
            return True
        return not is_saturated(self.stats[engine], need)

    def on_finish(self, traj_id: str) -> None:
        held = self._held.pop(traj_id, None)
        if held is not None:
            self.reserved[held[0]] -= held[1]
