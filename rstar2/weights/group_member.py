"""A rollout worker's side of the learner's weight group: its engine's workers as members.

With `cluster.weight_sync = "broadcast"` on vLLM engines the learner is rank 0 of one group
whose other ranks are the workers of every rollout engine (`rstar2.weights.learner_group`).
A rollout worker answers the learner's two control messages with these functions:

- `join_group(engine, msg, index)` for `WeightGroupJoin`: checks the message (`check_join`: a
  consistent rank range that holds exactly this engine's workers), has the engine's workers
  join the group at host:port, and answers `WeightGroupJoined` once they are in;
- `receive_broadcast(engine, msg, index)` for `WeightBroadcast`: rebuilds the manifest and has
  the engine receive and load the tensors the learner is broadcasting; answers `WeightAck`.

The engine must be a `GroupEngine` (the vLLM backend with weight_sync "external"); any other
engine is refused with a TypeError naming what to configure.

What it does not do: move bytes (the engine's workers, `rstar2.weights.vllm_worker`), or decide
ranks (the learner's `GroupLayout`; this side only checks them).
"""

from __future__ import annotations

import time
from typing import Protocol, runtime_checkable

from rstar2.weights.buckets import WeightManifest
from rstar2.weights.gloo_group import GroupPlace
from rstar2.wire import WeightAck, WeightBroadcast, WeightGroupJoin, WeightGroupJoined


@runtime_checkable
class GroupEngine(Protocol):
    """An engine whose workers can join a weight group rooted in another process."""

    @property
    def weight_workers(self) -> int:
        """How many ranks the engine's workers take in the group (tensor x pipeline parallel)."""
        ...

    async def join_weight_group(self, place: GroupPlace) -> None:
        """Have every worker join at `place` (returns once the whole group has formed)."""
        ...

    async def receive_weights(self, manifest: WeightManifest) -> None:
        """Receive the tensors of `manifest` by broadcast and load them (returns once loaded)."""
        ...


def check_join(msg: WeightGroupJoin, workers: int) -> GroupPlace:
    """Where `msg` places an engine of `workers` workers, or a ValueError saying why it cannot."""
    if msg.workers != workers:
        raise ValueError(
            f"the learner expects {msg.workers} worker(s) per engine, this engine has {workers} "
            "(cluster.tp and the engine's tensor_parallel_size disagree)"
        )
    place = GroupPlace(
        msg.host, msg.port, msg.world_size, msg.first_rank, msg.bucket_bytes, msg.timeout_s
    )
    place.check(workers)
    return place


def group_engine(engine: object) -> GroupEngine:
    """`engine` as a group member, or a TypeError saying why it cannot be one."""
    if not isinstance(engine, GroupEngine):
        raise TypeError(
            f"a {type(engine).__name__} cannot join the learner's weight group: it needs "
            'cluster.engine_backend = "vllm" (the rollout workers\' engines open with '
            'weight_sync "external")'
        )
    return engine


async def join_group(engine: object, msg: WeightGroupJoin, index: int) -> WeightGroupJoined:
    """Answer a `WeightGroupJoin`: the engine's workers join the learner's group."""
    member = group_engine(engine)
    place = check_join(msg, member.weight_workers)
    start = time.perf_counter()
    await member.join_weight_group(place)
    return WeightGroupJoined(
        engine=index,
        first_rank=msg.first_rank,
        workers=msg.workers,
        join_s=time.perf_counter() - start,
    )


async def receive_broadcast(engine: object, msg: WeightBroadcast, index: int) -> WeightAck:
    """Answer a `WeightBroadcast`: receive and load the update the learner broadcasts."""
    member = group_engine(engine)
    manifest = WeightManifest.from_payload(msg.names, msg.dtype_names, msg.shapes)
    start = time.perf_counter()
    await member.receive_weights(manifest)
    return WeightAck(version=msg.version, engine=index, load_s=time.perf_counter() - start)
