"""Fake rollout workers for the learner's weight-group tests (spawned processes import this).

Each fake worker answers the learner's control messages with the real handlers of
`rstar2.weights.group_member`, over an engine whose one "worker" is a real `WeightReceiver`:
only vLLM is missing. `PipeRequest` is the learner's `Request` over multiprocessing pipes, each
message and reply encoded with the real wire codec.
"""

from __future__ import annotations

import traceback
from multiprocessing.connection import Connection

import anyio
import torch

from rstar2.weights.buckets import WeightManifest
from rstar2.weights.gloo_group import GroupPlace, WeightReceiver
from rstar2.weights.group_member import join_group, receive_broadcast
from rstar2.wire import (
    ActorFailed,
    EngineLoad,
    EngineReport,
    EngineReportRequest,
    Message,
    WeightBroadcast,
    WeightGroupJoin,
    decode,
    encode,
)


class ReceiverEngine:
    """A `GroupEngine` with one worker: a real `WeightReceiver`; keeps every update it got."""

    weight_workers = 1

    def __init__(self, hang_on_join: bool = False) -> None:
        self.hang_on_join = hang_on_join
        self.receiver: WeightReceiver | None = None
        self.updates: list[dict[str, torch.Tensor]] = []

    async def join_weight_group(self, place: GroupPlace) -> None:
        if self.hang_on_join:  # a worker whose engine never comes to the rendezvous
            await anyio.sleep_forever()
        self.receiver = await anyio.to_thread.run_sync(
            lambda: WeightReceiver.connect(
                place.host,
                place.port,
                place.first_rank,
                place.world_size,
                timeout_s=place.timeout_s,
                bucket_bytes=place.bucket_bytes,
            )
        )

    async def receive_weights(self, manifest: WeightManifest) -> None:
        assert self.receiver is not None
        receiver = self.receiver

        def receive() -> dict[str, torch.Tensor]:
            got: dict[str, torch.Tensor] = {}
            for pairs in receiver.receive(manifest):
                got.update((name, t.clone()) for name, t in pairs)
            return got

        self.updates.append(await anyio.to_thread.run_sync(receive))

    def close(self) -> None:
        if self.receiver is not None:
            self.receiver.close()


async def answer(engine: ReceiverEngine, msg: Message, index: int) -> Message:
    """What a rollout worker answers on its "weights" and "report" ports (`RolloutWorker`)."""
    if isinstance(msg, EngineReportRequest):
        return EngineReport(0, EngineLoad(0, 0, 0, 0))
    if isinstance(msg, WeightGroupJoin):
        return await join_group(engine, msg, index)
    assert isinstance(msg, WeightBroadcast)
    return await receive_broadcast(engine, msg, index)


def serve_pipe(conn: Connection, index: int, out: str) -> None:
    """A spawned fake worker: answer messages until an empty one, then save what it received."""
    torch.set_num_threads(1)
    anyio.run(_serve, conn, index, out)


async def _serve(conn: Connection, index: int, out: str) -> None:
    engine = ReceiverEngine()
    try:
        while data := await anyio.to_thread.run_sync(conn.recv_bytes):
            try:
                reply = await answer(engine, decode(data), index)
            except (RuntimeError, ValueError, TypeError):  # what a worker's failure looks like
                reply = ActorFailed(actor=f"rollout.{index}", traceback=traceback.format_exc())
            conn.send_bytes(encode(reply))
    finally:
        engine.close()
        torch.save(engine.updates, out)


class PipeRequest:
    """The learner's `Request` to spawned fake workers, one pipe each."""

    def __init__(self, conns: list[Connection]) -> None:
        self.conns = conns
        self.locks = [anyio.Lock() for _ in conns]

    async def __call__(self, peer: int, msg: Message, timeout: float | None) -> Message:
        conn = self.conns[peer]
        async with self.locks[peer]:
            conn.send_bytes(encode(msg))
            ready = await anyio.to_thread.run_sync(conn.poll, timeout, abandon_on_cancel=True)
            if not ready:
                raise TimeoutError(f"fake worker {peer} did not answer within {timeout}s")
            reply = decode(conn.recv_bytes())
        if isinstance(reply, ActorFailed):
            raise RuntimeError(f"actor {reply.actor} failed on this request:\n{reply.traceback}")
        return reply


class LocalRequest:
    """The learner's `Request` to fake workers in this process."""

    def __init__(self, engines: list[ReceiverEngine]) -> None:
        self.engines = engines

    async def __call__(self, peer: int, msg: Message, timeout: float | None) -> Message:
        with anyio.fail_after(timeout):
            return await answer(self.engines[peer], msg, peer)
