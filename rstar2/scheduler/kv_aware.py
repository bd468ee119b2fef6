"""rStar2's KV-cache-aware dynamic scheduler: admit a trajectory only where its KV fits.

Ledger. Each trajectory is charged a reservation R against one engine's KV capacity (from the
engine's `kv_capacity_tokens` report), held until `on_finish`:

    R = prompt + max response                  (reservation 'max': the rStar2 rule)
    R = prompt + scale x predicted response    (reservation 'predicted', capped at the max)

An engine e can take a new trajectory when ``capacity_e - reserved_e >= R`` and, for
'predicted', when its last report also shows the KV free right now (`is_saturated`: free KV
covers R for this request and for each one already waiting there). The first check is the
plan, the second verifies it against the engine's actual blocks.

Placement. A new trajectory tries, in order, and takes the first engine that can take it:

1. its planned engine: `prepare` splits the step's batch into contiguous equal chunks, one per
   engine (the static split's rule, `contiguous_engine`), so whole prompt groups share an
   engine and its prefix cache;
2. the engine that took its last sibling (same prompt id), for the same prefix-cache reason;
3. the engine with the most unreserved capacity (ties: lowest id), which balances by free KV.

If none can, the request is held (``None``) and the caller asks again after a finish. A later
turn goes to the trajectory's engine (prefix cache; tool calls are dispatched asynchronously
by the caller, the reservation stays while the tool runs), except with 'predicted' when that
engine is

- saturated (`is_saturated`: its free KV does not cover the turn's context for it and for
  every request already waiting there), or
- overloaded: ``used_e > overload_factor * min_f used_f + capacity_e / 50`` (factor 1.3 by
  default), with ``used = capacity - free`` from the last reports: KV in use tracks the step
  cost ``c * context`` that dominates decode, so an engine holding much more than the lightest
  one runs slower steps and finishes last; as engines drain, the lightest pulls turns from the
  others. The 2% slack keeps small differences from paying a re-prefill,

and another engine can take its reservation (and `move_turns`, the default, is on): the turn
then moves to the engine with the most
unreserved capacity and the trajectory sticks there. It pays one re-prefill of its context on
the new engine; in exchange a heavy-tailed step rebalances at turn grain (as the SGLang
router's imbalance fall-back does) and a saturated engine cannot be locked into thrash.

Why this order. When the whole step's reservations fit, rule 1 places every trajectory where
the static split would and starts all of them at once: with lengths unknown, an even split
that starts everything is the best start a policy can make (holding a trajectory back only
delays it, and one that turns out long then finishes late), so kv_aware starts exactly as the
static split does and differs only by the turn moves above. When they do not fit (long responses: the regime rStar2 built this
for), rules 2-3 fill every engine up to its KV and hand each freed reservation to the next
queued trajectory, where the static split would over-admit and preempt.

Guarantees. With 'max' nothing ever moves: the worst-case lengths on an engine sum to at most
its KV, so it never runs out of blocks and never preempts, and stickiness cannot thrash. The price is that KV
reserved for lengths never reached stays idle (a 12K budget and a 4K mean idle two thirds).
'predicted' over-commits on purpose (lengths vary, so their sum concentrates near the mean);
the live check and a raise of a trajectory's reservation when it outgrows it at a turn
boundary (to ``context + (R0 - prompt) / 2``, capped at the max) keep engines out of
preemption in practice, not by proof.
"""

from __future__ import annotations

from collections.abc import Sequence

from rstar2.scheduler.policy import EngineLoad, Policy, TurnRequest, is_saturated
from rstar2.scheduler.static_split import contiguous_engine


class KVAware(Policy):
    name = "kv_aware"

    def __init__(
        self,
        num_engines: int,
        reservation: str = "max",
        predicted_scale: float = 0.5,
        name: str | None = None,
        move_turns: bool = True,
        overload_factor: float = 1.3,
    ) -> None:
        super().__init__(num_engines)
        if reservation not in ("max", "predicted"):
            raise ValueError(f"reservation must be 'max' or 'predicted', got {reservation!r}")
        if not overload_factor >= 1.0:
            raise ValueError(f"overload_factor must be >= 1.0, got {overload_factor!r}")
        self.name = name or ("kv_aware_max" if reservation == "max" else "kv_aware")
        self.reservation = reservation
        self.predicted_scale = predicted_scale
        self.move_turns = move_turns
        self.overload_factor = overload_factor
        self.capacity = [0] * num_engines
        self.reserved = [0] * num_engines
        self._held: dict[str, tuple[int, int, int]] = {}  # traj -> (engine, reserved, first)
        self._planned: dict[str, int] = {}  # traj -> engine of its contiguous chunk
        self._sibling: dict[str, int] = {}  # prompt id -> engine of its last placed rollout
        self.moved = 0
        """Turns moved off a saturated engine ('predicted' only; observable for tests)."""

    def prepare(self, batch: Sequence[TurnRequest]) -> None:
        """Plan the step as the static split would (rule 1 of the module docstring)."""
        n = len(batch)
        for i, req in enumerate(batch):
            self._planned[req.traj_id] = contiguous_engine(i, n, self.num_engines)

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
            return self._continue(req, *held)
        need = self.reservation_for(req)
        engine = self._place(req, need)
        if engine is None:
            return None
        self.reserved[engine] += need
        self._held[req.traj_id] = (engine, need, need)
        self._planned.pop(req.traj_id, None)
        self._sibling[req.prompt_id] = engine
        return engine

    def on_finish(self, traj_id: str) -> None:
        held = self._held.pop(traj_id, None)
        if held is not None:
            self.reserved[held[0]] -= held[1]

    def _continue(self, req: TurnRequest, engine: int, tokens: int, first: int) -> int:
        """A later turn: its engine, unless that engine is saturated and another has room."""
        want = tokens
        if req.context_tokens >= tokens:  # outgrew a predicted reservation: raise it
            want = min(req.max_total_tokens, req.context_tokens + (first - req.prompt_tokens) // 2)
        self.reserved[engine] -= tokens
        if (
            self.move_turns
            and self.reservation == "predicted"
            and (is_saturated(self.stats[engine], req.context_tokens) or self._overloaded(engine))
        ):
            moved = self._most_room(want, exclude=engine)
            if moved is not None:
                engine = moved
                self.moved += 1
        self.reserved[engine] += want
        self._held[req.traj_id] = (engine, want, first)
        return engine

    def _place(self, req: TurnRequest, need: int) -> int | None:
        """Rules 1-3 of the module docstring: the first engine that can take `need` tokens."""
        for preferred in (self._planned.get(req.traj_id), self._sibling.get(req.prompt_id)):
            if preferred is not None and self._can_take(preferred, need):
                return preferred
        return self._most_room(need)

    def _most_room(self, need: int, exclude: int = -1) -> int | None:
        """The engine with the most unreserved capacity that can take `need` (ties: lowest id)."""
        best, best_room = None, -1
        for e in range(self.num_engines):
            room = self.capacity[e] - self.reserved[e]
            if e != exclude and room > best_room and self._can_take(e, need):
                best, best_room = e, room
        return best

    def _overloaded(self, engine: int) -> bool:
        """KV in use on `engine` exceeds `overload_factor` times the least-used engine's, plus 2%
        of its capacity."""
        used = [0 if st is None else st.kv_capacity_tokens - st.kv_free_tokens for st in self.stats]
        return used[engine] > self.overload_factor * min(used) + self.capacity[engine] // 50

    def _can_take(self, engine: int, need: int) -> bool:
        """The ledger has `need` unreserved tokens on `engine` and ('predicted') its last report
        shows them free (see is_saturated)."""
        if self.capacity[engine] - self.reserved[engine] < need:
            return False
        return self.reservation == "max" or not is_saturated(self.stats[engine], need)
