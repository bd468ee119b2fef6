"""The learner's weight push: one class per strategy, each returning its statistics.

After each update the learner pushes the policy to every rollout worker and waits for their
acks (the next rollout samples from the new policy). Three strategies, one interface
(`WeightPush.push(source, version) -> PushStats`):

- `BusPush` (the embedded engine, or `cluster.weight_sync = "file"`): the policy a bucket of
  about `bucket_bytes` at a time, each gathered (in a thread: the event loop keeps serving)
  and flattened (`flat_codec.py`) into a `WeightUpdate` sent to every worker's "weights" port
  at once; the next bucket is gathered only once every worker acked (one bucket in memory).
  Synchronous RL marks every bucket final (each loads as it comes: the engines are idle);
  asynchronous RL (`atomic`: the engines keep generating) marks none, then sends an empty
  final bucket, so each worker loads the whole version at once (`update_receiver.py`);
- `GroupPush` (vLLM engines, `cluster.weight_sync = "broadcast"`): once through the
  learner's weight group (`learner_group.py`): the bus carries only the manifest;
- `SharedPush` (embedded engines in the learner's process, `cluster.share_weights`): the
  engines already compute with the learner's tensors (`shared_policy.py`), so only an empty
  final `WeightUpdate` goes to each worker: the version bump.

`PushStats.metrics()` are the step's `weights_*` metrics: `weights_broadcast_bytes` (through
the group, once), `weights_bus_bytes` (over the bus, all workers together), `weights_buckets`
and `weights_bucket_max_bytes` (a group push counts as one bucket of the whole policy).

`open_push` opens the strategy the cluster settings choose (a group push joins every engine
first and leaves the group on exit). `ask_every_engine` sends one request to every worker and
checks each reply (the bus push's buckets; the learner's sleep and wake messages).

What it does not do: decide when to push (the controller), gather the policy (the source:
`RunState.weight_buckets`), or load anything (the rollout workers).
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import AbstractContextManager, asynccontextmanager, nullcontext
from dataclasses import dataclass
from typing import Protocol

import anyio
import numpy as np
import torch

from rstar2.frames import frames_size, to_frames
from rstar2.weights.buckets import WeightManifest
from rstar2.weights.flat_codec import flatten_weights
from rstar2.weights.learner_group import GroupLayout, LearnerWeightGroup, Request
from rstar2.wire import Message, WeightAck, WeightUpdate

log = logging.getLogger(__name__)

Span = Callable[[], AbstractContextManager[None]]
"""A block of the learner's own work, for the profiler (`handling(ctx, "weights")`)."""

ACK_TIMEOUT_S = 300.0
"""How long each worker may take to answer one request of `ask_every_engine`."""


class WeightSource(Protocol):
    """The policy as a push reads it (`rstar2.train.run_state.RunState`)."""

    def weight_buckets(self, bucket_bytes: int) -> Iterator[dict[str, torch.Tensor]]:
        """The full tensors, a bucket of about `bucket_bytes` at a time (run it to its end)."""
        ...

    def weight_manifest(self) -> WeightManifest:
        """Names, dtypes and shapes of the tensors `weight_buckets` yields, in order."""
        ...


@dataclass(frozen=True)
class PushStats:
    """What one push moved (see the module docstring for the metrics)."""

    broadcast_bytes: int
    """Sent once through the learner's weight group."""
    bus_bytes: int
    """Sent over the bus, all workers together."""
    buckets: int
    """Buckets of tensors (a group push: 1)."""
    bucket_max_bytes: int
    """Tensor bytes of the largest bucket."""
    seconds: float

    def metrics(self) -> dict[str, float]:
        return {
            "weights_broadcast_bytes": float(self.broadcast_bytes),
            "weights_bus_bytes": float(self.bus_bytes),
            "weights_buckets": float(self.buckets),
            "weights_bucket_max_bytes": float(self.bucket_max_bytes),
        }


class WeightPush(Protocol):
    async def push(self, source: WeightSource, version: int) -> PushStats: ...


async def ask_every_engine(
    request: Request,
    engines: int,
    msg: Message,
    accepted: Callable[[Message], bool],
    wanted: str,
    timeout_s: float = ACK_TIMEOUT_S,
) -> None:
    """Send `msg` to rollout workers 0 .. `engines` - 1 at once; each must answer with a reply
    `accepted` takes (else RuntimeError naming the engine and what was `wanted`)."""

    async def one(peer: int) -> None:
        reply = await request(peer, msg, timeout_s)
        if not accepted(reply):
            raise RuntimeError(f"engine {peer} answered {reply!r}, not {wanted}")

    async with anyio.create_task_group() as tg:
        for peer in range(engines):
            tg.start_soon(one, peer)


class BusPush:
    """Buckets of flat tensors to every worker over the bus (see the module docstring)."""

    def __init__(
        self,
        request: Request,
        engines: int,
        bucket_bytes: int,
        atomic: bool,
        span: Span = nullcontext,
    ) -> None:
        if bucket_bytes < 1:
            raise ValueError(f"bucket_bytes must be >= 1, got {bucket_bytes}")
        self.request = request
        self.engines = engines
        self.bucket_bytes = bucket_bytes
        self.atomic = atomic
        """Stage every bucket and load the version at once on an empty final one."""
        self.span = span

    async def push(self, source: WeightSource, version: int) -> PushStats:
        start = time.perf_counter()
        buckets = source.weight_buckets(self.bucket_bytes)
        sent = largest = parts = 0
        while True:
            with self.span():  # the gather and the flattening
                bucket = await anyio.to_thread.run_sync(next, buckets, None)
                if bucket is None:
                    break
                names, shapes, flat = flatten_weights(bucket)
            largest = max(largest, _tensor_bytes(bucket))
            del bucket  # gathered tensors: only the flat copy is needed while it is sent
            update = WeightUpdate(
                version, names, shapes, flat.numpy(), final=not self.atomic, bucket=parts
            )
            sent += await self._send(update)
            parts += 1
        if self.atomic:
            empty = np.zeros(0, dtype=np.float32)
            sent += await self._send(WeightUpdate(version, [], [], empty, True, bucket=parts))
        return PushStats(0, sent, parts, largest, time.perf_counter() - start)

    async def _send(self, update: WeightUpdate) -> int:
        return await send_update(self.request, self.engines, update)


async def send_update(request: Request, engines: int, update: WeightUpdate) -> int:
    """Send `update` to every worker and wait for their acks; returns the bytes sent."""

    def acked(reply: Message) -> bool:
        return isinstance(reply, WeightAck) and reply.version == update.version

    wanted = f"a WeightAck of version {update.version}"
    await ask_every_engine(request, engines, update, acked, wanted)
    return frames_size(to_frames(update)) * engines


class SharedPush:
    """The engines compute with the learner's own tensors (`cluster.share_weights`,
    `shared_policy.py`): a push is one empty final `WeightUpdate` per worker, the version
    bump their weight gates apply."""

    def __init__(self, request: Request, engines: int) -> None:
        self.request = request
        self.engines = engines

    async def push(self, source: WeightSource, version: int) -> PushStats:
        start = time.perf_counter()
        empty = np.zeros(0, dtype=np.float32)
        update = WeightUpdate(version, [], [], empty, final=True, bucket=0)
        sent = await send_update(self.request, self.engines, update)
        return PushStats(0, sent, 0, 0, time.perf_counter() - start)


class GroupPush:
    """The policy broadcast once through the learner's weight group (a joined group)."""

    def __init__(self, group: LearnerWeightGroup, bucket_bytes: int, span: Span = nullcontext):
        self.group = group
        self.bucket_bytes = bucket_bytes
        self.span = span

    async def push(self, source: WeightSource, version: int) -> PushStats:
        with self.span():
            # gathered a bucket at a time as the broadcast (in its thread) needs them
            buckets = source.weight_buckets(self.bucket_bytes)
            tensors = (t for b in buckets for t in b.values())
            stats = await self.group.push_stream(source.weight_manifest(), tensors, version)
        log.info(
            "weights v%d: %.1f MiB broadcast once through the learner's group to %d engine(s), "
            "%d B of manifests over the bus, %.3fs",
            version,
            stats.broadcast_bytes / 2**20,
            self.group.layout.engines,
            stats.bus_bytes,
            stats.seconds,
        )
        whole = stats.broadcast_bytes
        return PushStats(whole, stats.bus_bytes, 1, whole, stats.seconds)


@dataclass(frozen=True)
class PushPlan:
    """How the learner pushes (from the cluster and RL settings)."""

    layout: GroupLayout | None
    """The weight group's ranks (`learner_group.layout_for`), or None: over the bus."""
    engines: int
    """Rollout workers."""
    bucket_bytes: int
    atomic: bool
    """Asynchronous RL (`rl.max_staleness > 0`): a bus push loads each version at once."""
    host: str = "127.0.0.1"
    """Address of the learner's process that every engine's workers reach (the group)."""
    shared: bool = False
    """The engines share the learner's tensors (`cluster.share_weights`): `SharedPush`."""


@asynccontextmanager
async def open_push(
    plan: PushPlan, weights: Request, report: Request, span: Span = nullcontext
) -> AsyncIterator[WeightPush]:
    """The push `plan` chooses, over the workers' "weights" port (`weights`); a group push
    first checks every worker serves (their "report" port, `report`) and joins them, and
    leaves the group on exit."""
    if plan.shared:
        yield SharedPush(weights, plan.engines)
        return
    if plan.layout is None:
        yield BusPush(weights, plan.engines, plan.bucket_bytes, plan.atomic, span)
        return
    group = LearnerWeightGroup.open(plan.host, plan.layout, weights, ready=report)
    try:
        await group.join()
        yield GroupPush(group, plan.bucket_bytes, span)
    finally:
        group.close()


def _tensor_bytes(bucket: Mapping[str, torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in bucket.values())
