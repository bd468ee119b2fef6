"""A rollout worker's weights port (`EngineLoader`): bus buckets staged until the final one and
loaded under the weight gate, versions, and which messages run as tasks of their own."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest
import torch

from rstar2.rollout.weight_gate import WeightGate
from rstar2.weights.engine_loader import EngineLoader
from rstar2.wire import WeightAck, WeightBroadcast, WeightGroupJoin, WeightUpdate

pytestmark = pytest.mark.anyio


class Engine:
    def __init__(self) -> None:
        self.loads: list[dict[str, list[float]]] = []

    async def update_weights(self, state_dict: dict[str, torch.Tensor]) -> None:
        self.loads.append({k: v.flatten().tolist() for k, v in state_dict.items()})


def bucket(version: int, index: int, name: str, value: float, final: bool) -> WeightUpdate:
    flat = np.full(2, value, dtype=np.float32)
    return WeightUpdate(version, [name], [[2]], flat, final=final, bucket=index)


def loader(engine: Engine) -> EngineLoader:
    return EngineLoader(engine, index=2, gate=WeightGate())


async def test_synchronous_buckets_load_as_they_come() -> None:
    engine = Engine()
    w = loader(engine)
    for index, (name, value) in enumerate((("a", 1.0), ("b", 2.0))):
        ack = await w.handle(bucket(1, index, name, value, final=True))
        assert ack == WeightAck(version=1, engine=2, load_s=ack.load_s)  # type: ignore[union-attr]
    assert engine.loads == [{"a": [1.0, 1.0]}, {"b": [2.0, 2.0]}]
    assert w.gate.version == 1  # type: ignore[attr-defined]


async def test_asynchronous_buckets_load_at_once_on_the_final_one() -> None:
    engine = Engine()
    w = loader(engine)
    await w.handle(bucket(3, 0, "a", 1.0, final=False))
    await w.handle(bucket(3, 1, "b", 2.0, final=False))
    assert engine.loads == [] and w.gate.version == -1  # type: ignore[attr-defined]
    empty = WeightUpdate(3, [], [], np.zeros(0, dtype=np.float32), final=True, bucket=2)
    await w.handle(empty)
    assert engine.loads == [{"a": [1.0, 1.0], "b": [2.0, 2.0]}]
    assert w.gate.version == 3  # type: ignore[attr-defined]


async def test_buckets_of_an_abandoned_push_are_not_loaded_with_the_next_version() -> None:
    engine = Engine()
    w = loader(engine)
    await w.handle(bucket(3, 0, "a", 1.0, final=False))
    await w.handle(bucket(4, 0, "b", 2.0, final=True))
    assert engine.loads == [{"b": [2.0, 2.0]}] and w.gate.version == 4  # type: ignore[attr-defined]


async def test_a_bucket_out_of_order_fails_and_loads_nothing() -> None:
    engine = Engine()
    w = loader(engine)
    await w.handle(bucket(3, 0, "a", 1.0, final=False))
    with pytest.raises(ValueError, match="out of order"):
        await w.handle(bucket(3, 2, "b", 2.0, final=True))
    assert engine.loads == [] and w.gate.version == -1  # type: ignore[attr-defined]


async def test_group_messages_run_as_tasks_in_a_span_and_bus_updates_inline() -> None:
    spans: list[str] = []

    @contextmanager
    def span() -> Iterator[None]:
        spans.append("weights")
        yield

    w = EngineLoader(Engine(), index=0, gate=WeightGate(), span=span)
    join = WeightGroupJoin("127.0.0.1", 1, 2, 1, 1, 1024, 5.0)
    assert w.concurrent(join) and w.concurrent(WeightBroadcast(1, [], [], []))
    assert not w.concurrent(bucket(1, 0, "a", 1.0, final=True))
    with pytest.raises(TypeError, match="cannot join the learner's weight group"):
        await w.handle(join)  # the in-memory engine is no group member
    assert spans == ["weights"]
