"""The engines' KV use as the profiler's counters, one sample per scored trajectory.

With `rstar2 profile` the learner keeps, for each trajectory it receives, its engine's KV use
just before the trajectory released its blocks (track "rollout.<engine>/engine", stamped when
the learner received it):

- "kv_used": the used fraction the engine reported after the release plus the trajectory's own
  blocks, `min(1, (capacity - free + own) / capacity)` with `own` its tokens rounded up to
  whole blocks (the KV-aware scheduler holds back work that does not fit, so the engine's
  own waiting queue stays short);
- "kv_room": how many more sequences of its length still fitted beside it,
  `max(0, (free - own) / own)` (below 1: the KV cache could not hold a second one);
- "waiting": the engine's waiting requests.

What it does not do: read the engines (the stats come with each `TrajectoryResult`) or draw
anything (`rstar2.profile`).
"""

from __future__ import annotations

from typing import Any

from rstar2.wire import TrajectoryResult


def engine_kv_samples(msg: TrajectoryResult, block_size: int, now: float) -> list[list[Any]]:
    """[track, counter, time, value] rows of `msg`'s engine (none without its stats)."""
    load = msg.load
    if msg.engine < 0 or load is None or load.kv_capacity_tokens <= 0:
        return []
    track = f"rollout.{msg.engine}/engine"
    own = -(-len(msg.trajectory.token_ids) // block_size) * block_size
    capacity, free = load.kv_capacity_tokens, load.kv_free_tokens
    used = min(1.0, (capacity - free + own) / capacity)
    room = (free - own) / own if own else 0.0
    return [
        [track, "kv_used", now, used],
        [track, "kv_room", now, max(0.0, room)],
        [track, "waiting", now, float(load.waiting)],
    ]
