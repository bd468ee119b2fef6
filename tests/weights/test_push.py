"""The learner's weight push, one strategy at a time, against in-memory rollout workers: what
each worker gets, and the statistics each push returns (the step's `weights_*` metrics)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import anyio
import pytest
import torch
from group_workers import LocalRequest, ReceiverEngine

from rstar2.frames import frames_size, to_frames
from rstar2.weights.buckets import WeightManifest, manifest_of
from rstar2.weights.learner_group import BroadcastStats, GroupLayout
from rstar2.weights.push import BusPush, GroupPush, PushPlan, PushStats, open_push
from rstar2.weights.update_receiver import UpdateReceiver
from rstar2.wire import (
    EngineReportRequest,
    EngineSleepAck,
    Message,
    WeightAck,
    WeightUpdate,
)

pytestmark = pytest.mark.anyio

POLICY = {
    "a": torch.arange(4, dtype=torch.float32),
    "b": torch.ones(2, 1),
    "c": torch.full((3,), 2.0),
}


class Source:
    """The policy in two buckets: {a} (16 bytes), then {b, c} (20 bytes)."""

    def __init__(self) -> None:
        self.asked: list[int] = []

    def weight_buckets(self, bucket_bytes: int) -> Iterator[dict[str, torch.Tensor]]:
        self.asked.append(bucket_bytes)
        yield {"a": POLICY["a"]}
        yield {"b": POLICY["b"], "c": POLICY["c"]}

    def weight_manifest(self) -> WeightManifest:
        return manifest_of(POLICY)


class Workers:
    """Rollout workers that stage what they get (`UpdateReceiver`) and ack it."""

    def __init__(self, engines: int, ack: type[Message] = WeightAck) -> None:
        self.receivers = [UpdateReceiver() for _ in range(engines)]
        self.got: list[list[WeightUpdate]] = [[] for _ in range(engines)]
        self.loaded: list[dict[str, torch.Tensor]] = [{} for _ in range(engines)]
        self.ack = ack

    async def __call__(self, peer: int, msg: Message, timeout: float | None) -> Message:
        assert isinstance(msg, WeightUpdate)
        self.got[peer].append(msg)
        state = self.receivers[peer].receive(msg)
        if state is not None:
            self.loaded[peer].update(state)
        if self.ack is WeightAck:
            return WeightAck(msg.version, peer)
        return EngineSleepAck(peer, False)


def bus_bytes(workers: Workers) -> int:
    return sum(frames_size(to_frames(m)) for got in workers.got for m in got)


@pytest.mark.parametrize("atomic", [False, True], ids=["synchronous", "asynchronous"])
async def test_a_bus_push_gives_every_worker_the_policy_and_counts_what_it_sent(
    atomic: bool,
) -> None:
    workers, source = Workers(3), Source()
    stats = await BusPush(workers, 3, bucket_bytes=20, atomic=atomic).push(source, version=7)
    assert source.asked == [20]
    for got, loaded in zip(workers.got, workers.loaded, strict=True):
        assert [(m.version, m.bucket, m.final) for m in got] == (
            [(7, 0, False), (7, 1, False), (7, 2, True)] if atomic else [(7, 0, True), (7, 1, True)]
        )
        assert {k: v.tolist() for k, v in loaded.items()} == {
            k: v.tolist() for k, v in POLICY.items()
        }
    assert stats == PushStats(
        broadcast_bytes=0,
        bus_bytes=bus_bytes(workers),
        buckets=2,
        bucket_max_bytes=20,
        seconds=stats.seconds,
    )
    assert stats.metrics() == {
        "weights_broadcast_bytes": 0.0,
        "weights_bus_bytes": float(bus_bytes(workers)),
        "weights_buckets": 2.0,
        "weights_bucket_max_bytes": 20.0,
    }


async def test_a_bus_push_fails_naming_the_engine_that_did_not_ack() -> None:
    with pytest.raises(ExceptionGroup) as e:
        await BusPush(Workers(2, ack=EngineSleepAck), 2, 20, atomic=False).push(Source(), 1)
    assert any(
        "engine 0 answered" in str(x) and "not a WeightAck of version 1" in str(x)
        for x in e.value.exceptions
    )


async def test_a_bus_push_gathers_inside_the_span() -> None:
    spans: list[str] = []

    @contextmanager
    def span() -> Iterator[None]:
        spans.append("weights")
        yield

    await BusPush(Workers(1), 1, 20, atomic=False, span=span).push(Source(), 1)
    assert spans == ["weights"] * 3  # two buckets, then the end of the iterator


class Group:
    """A joined weight group that consumes the tensors as a broadcast would."""

    layout = GroupLayout(engines=2, workers_per_engine=1)

    def __init__(self) -> None:
        self.pushed: list[tuple[list[str], list[torch.Tensor], int]] = []

    async def push_stream(
        self, manifest: WeightManifest, tensors: Iterator[torch.Tensor], version: int
    ) -> BroadcastStats:
        self.pushed.append((list(manifest.names), list(tensors), version))
        return BroadcastStats(broadcast_bytes=36, bus_bytes=200, seconds=0.5)


async def test_a_group_push_broadcasts_once_and_counts_it_as_one_bucket() -> None:
    group, source = Group(), Source()
    stats = await GroupPush(group, bucket_bytes=20).push(source, version=3)  # type: ignore[arg-type]
    [(names, tensors, version)] = group.pushed
    assert (names, version, source.asked) == (["a", "b", "c"], 3, [20])
    assert [t.tolist() for t in tensors] == [t.tolist() for t in POLICY.values()]
    assert stats == PushStats(36, 200, 1, 36, 0.5)
    assert stats.metrics() == {
        "weights_broadcast_bytes": 36.0,
        "weights_bus_bytes": 200.0,
        "weights_buckets": 1.0,
        "weights_bucket_max_bytes": 36.0,
    }


async def test_open_push_without_a_group_pushes_over_the_bus() -> None:
    plan = PushPlan(layout=None, engines=2, bucket_bytes=20, atomic=False)

    async def report(peer: int, msg: Message, timeout: float | None) -> Message:
        raise AssertionError("a bus push asks no report")

    workers = Workers(2)
    async with open_push(plan, workers, report) as push:
        assert isinstance(push, BusPush)
        stats = await push.push(Source(), 1)
    assert stats.buckets == 2 and len(workers.got[0]) == 2


async def test_open_push_with_a_group_asks_the_report_port_then_broadcasts() -> None:
    engines = [ReceiverEngine(), ReceiverEngine()]
    local = LocalRequest(engines)
    reported: list[int] = []

    async def weights(peer: int, msg: Message, timeout: float | None) -> Message:
        assert not isinstance(msg, EngineReportRequest), "readiness goes to the report port"
        return await local(peer, msg, timeout)

    async def report(peer: int, msg: Message, timeout: float | None) -> Message:
        assert isinstance(msg, EngineReportRequest)
        reported.append(peer)
        return await local(peer, msg, timeout)

    plan = PushPlan(GroupLayout(2, 1), engines=2, bucket_bytes=20, atomic=False)
    try:
        with anyio.fail_after(60):
            async with open_push(plan, weights, report) as push:
                assert isinstance(push, GroupPush) and sorted(reported) == [0, 1]
                stats = await push.push(Source(), 5)
    finally:
        for engine in engines:
            engine.close()
    assert stats.buckets == 1 and stats.bucket_max_bytes == stats.broadcast_bytes >= 36
    for engine in engines:
        [update] = engine.updates
        assert {k: v.tolist() for k, v in update.items()} == {
            k: v.tolist() for k, v in POLICY.items()
        }
