"""Engines started at once in one process are built one at a time (`vllm_backend._start`).

Building an `AsyncLLM` unregisters vLLM's Prometheus metrics from prometheus_client's global
registry and registers its own; two builds on their own loop threads at once could interleave and
fail with `DuplicateTimeseries` (a two-engine training test did in CI). The build here is a stand-in
that does what vLLM's does, slowly: the test fails without the lock, in seconds rather than the
minute two real engines take.
"""

from __future__ import annotations

import os
import tempfile
import time

import pytest

pytest.importorskip("vllm")
for _var in ("VLLM_CACHE_ROOT", "TORCHINDUCTOR_CACHE_DIR"):
    os.environ.setdefault(_var, tempfile.mkdtemp(prefix="rstar2-vllm-"))

import anyio  # noqa: E402
from prometheus_client import Counter  # noqa: E402
from vllm.v1.metrics.prometheus import unregister_vllm_metrics  # noqa: E402

from rstar2.engine import vllm_backend  # noqa: E402
from rstar2.engine.loop_thread import LoopThread  # noqa: E402
from rstar2.engine.vllm_config import VLLMConfig  # noqa: E402

pytestmark = [pytest.mark.anyio, pytest.mark.vllm]


class _SlowBuild:
    """`AsyncLLM` as far as its metrics go: unregister vLLM's, take a while, register one."""

    @classmethod
    def from_engine_args(cls, engine_args: object, stat_loggers: object) -> _SlowBuild:
        unregister_vllm_metrics()
        time.sleep(0.3)
        Counter("vllm:rstar2_test_builds", "engines built by the test")  # registers globally
        return cls()


async def test_two_engines_started_at_once_are_built_one_at_a_time(monkeypatch) -> None:
    """Both builds finish; interleaved, the second would raise DuplicateTimeseries."""
    monkeypatch.setattr(vllm_backend, "AsyncLLM", _SlowBuild)
    loops = [LoopThread(f"build-{i}") for i in range(2)]
    cfg = VLLMConfig(model="unused")
    try:
        async with anyio.create_task_group() as tg:
            for loop in loops:
                tg.start_soon(loop.call, vllm_backend._start(cfg, vllm_backend._KVTap()))
    finally:
        for loop in loops:
            loop.close()
        unregister_vllm_metrics()
