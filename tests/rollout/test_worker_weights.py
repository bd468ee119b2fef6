"""The rollout worker's weight loads: bus buckets staged until the final one, versions."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rstar2.rollout.weight_gate import WeightGate
from rstar2.rollout.worker import RolloutWorker, RolloutWorkerParams
from rstar2.wire import WeightAck, WeightUpdate

pytestmark = pytest.mark.anyio


class Engine:
    def __init__(self) -> None:
        self.loads: list[dict[str, list[float]]] = []

    async def update_weights(self, state_dict: dict[str, torch.Tensor]) -> None:
        self.loads.append({k: v.flatten().tolist() for k, v in state_dict.items()})


def bucket(version: int, name: str, value: float, final: bool) -> WeightUpdate:
    flat = np.full(2, value, dtype=np.float32)
    return WeightUpdate(version, [name], [[2]], flat, final=final)


async def worker() -> RolloutWorker:
    w = RolloutWorker(RolloutWorkerParams(model_dir="/m"))
    w.gate = WeightGate()
    return w


async def test_synchronous_buckets_load_as_they_come() -> None:
    w, engine = await worker(), Engine()
    for name, value in (("a", 1.0), ("b", 2.0)):
        ack = await w._weights(None, engine, bucket(1, name, value, final=True))  # type: ignore[arg-type]
        assert ack == WeightAck(version=1, engine=w.index, load_s=ack.load_s)
    assert engine.loads == [{"a": [1.0, 1.0]}, {"b": [2.0, 2.0]}]
    assert w.gate.version == 1


async def test_asynchronous_buckets_load_at_once_on_the_final_one() -> None:
    w, engine = await worker(), Engine()
    await w._weights(None, engine, bucket(3, "a", 1.0, final=False))  # type: ignore[arg-type]
    await w._weights(None, engine, bucket(3, "b", 2.0, final=False))  # type: ignore[arg-type]
    assert engine.loads == [] and w.gate.version == -1  # nothing loaded, version unchanged
    empty = WeightUpdate(3, [], [], np.zeros(0, dtype=np.float32), final=True)
    await w._weights(None, engine, empty)  # type: ignore[arg-type]
    assert engine.loads == [{"a": [1.0, 1.0], "b": [2.0, 2.0]}]
    assert w.gate.version == 3


async def test_buckets_of_an_abandoned_push_are_not_loaded_with_the_next_version() -> None:
    w, engine = await worker(), Engine()
    await w._weights(None, engine, bucket(3, "a", 1.0, final=False))  # type: ignore[arg-type]
    await w._weights(None, engine, bucket(4, "b", 2.0, final=True))  # type: ignore[arg-type]
    assert engine.loads == [{"b": [2.0, 2.0]}] and w.gate.version == 4
