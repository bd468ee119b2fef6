"""The profiler's KV counters of one trajectory, with exact values."""

from __future__ import annotations

import msgspec

from rstar2.train.kv_samples import engine_kv_samples
from rstar2.wire import EngineLoad, TrajectoryResult
from tests.train.test_rollout_inbox import result, tasks


def scored(tokens: int, capacity: int, free: int, engine: int = 3) -> TrajectoryResult:
    load = EngineLoad(kv_capacity_tokens=capacity, kv_free_tokens=free, running=1, waiting=4)
    base = result(tasks("train", 1, 1)[0])
    trajectory = msgspec.structs.replace(base.trajectory, token_ids=[1] * tokens)
    return msgspec.structs.replace(base, trajectory=trajectory, engine=engine, load=load)


def test_used_counts_the_trajectorys_own_whole_blocks_and_room_the_sequences_beside_it() -> None:
    # 20 tokens = 2 blocks of 16 = 32 tokens; (128 - 64 + 32) / 128 used; (64 - 32) / 32 room
    assert engine_kv_samples(scored(20, 128, 64), 16, 7.0) == [
        ["rollout.3/engine", "kv_used", 7.0, 0.75],
        ["rollout.3/engine", "kv_room", 7.0, 1.0],
        ["rollout.3/engine", "waiting", 7.0, 4.0],
    ]


def test_use_is_capped_at_one_and_room_at_zero() -> None:
    rows = engine_kv_samples(scored(40, 64, 16), 16, 0.0)  # 48 own tokens, 16 free
    assert [row[3] for row in rows] == [1.0, 0.0, 4.0]
    rows = engine_kv_samples(scored(0, 64, 16), 16, 0.0)  # no tokens: no room to speak of
    assert [row[3] for row in rows] == [0.75, 0.0, 4.0]


def test_no_samples_without_an_engine_or_its_stats() -> None:
    assert engine_kv_samples(scored(20, 128, 64, engine=-1), 16, 0.0) == []
    assert engine_kv_samples(scored(20, 0, 0), 16, 0.0) == []
    no_load = msgspec.structs.replace(scored(20, 128, 64), load=None)
    assert engine_kv_samples(no_load, 16, 0.0) == []
