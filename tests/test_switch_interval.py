"""The interpreter's switch interval held while embedded engines run (`rstar2.switch_interval`),
and the rollout worker that holds it."""

from __future__ import annotations

import sys
from contextlib import asynccontextmanager
from types import SimpleNamespace
from typing import Any

import anyio
import pytest

from rstar2.config import ConfigError
from rstar2.rollout import worker as worker_module
from rstar2.rollout.worker import RolloutWorker, RolloutWorkerParams
from rstar2.switch_interval import switch_interval
from rstar2.train.config import Placement


def test_the_interval_holds_inside_and_the_old_one_comes_back() -> None:
    before = sys.getswitchinterval()
    with switch_interval(0.0005):
        assert sys.getswitchinterval() == pytest.approx(0.0005)
    assert sys.getswitchinterval() == before


def test_overlapping_holders_restore_only_when_the_last_leaves() -> None:
    before = sys.getswitchinterval()
    first, second = switch_interval(0.0005), switch_interval(0.0005)
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)  # the first leaves while the second still runs
    assert sys.getswitchinterval() == pytest.approx(0.0005)
    second.__exit__(None, None, None)
    assert sys.getswitchinterval() == before


def test_a_raising_block_restores_and_a_bad_interval_is_refused() -> None:
    before = sys.getswitchinterval()
    with pytest.raises(RuntimeError), switch_interval(0.0002):
        raise RuntimeError("engine failed")
    assert sys.getswitchinterval() == before
    with pytest.raises(ValueError, match="> 0"):
        with switch_interval(0.0):
            pass
    assert sys.getswitchinterval() == before


def test_the_setting_is_validated() -> None:
    with pytest.raises(ConfigError, match="graph.switch_interval_ms"):
        Placement(switch_interval_ms=0.0).validate()
    with pytest.raises(ConfigError, match="switch_interval_ms"):
        RolloutWorkerParams(model_dir="/m", switch_interval_ms=-1.0).validate()


@pytest.mark.parametrize(("backend", "held"), [("embedded", 0.00025), ("vllm", None)])
def test_the_worker_holds_its_interval_while_its_embedded_engine_serves(
    monkeypatch: pytest.MonkeyPatch, backend: str, held: float | None
) -> None:
    seen: dict[str, float] = {}

    @asynccontextmanager
    async def fake_engine(*args: Any, **kwargs: Any) -> Any:
        seen["opening"] = sys.getswitchinterval()
        yield object(), object(), 64

    async def fake_serve(self: RolloutWorker, *args: Any) -> None:
        seen["serving"] = sys.getswitchinterval()

    monkeypatch.setattr(worker_module, "open_worker_engine", fake_engine)
    monkeypatch.setattr(RolloutWorker, "_serve_engine", fake_serve)
    params = RolloutWorkerParams(model_dir="/m", engine_backend=backend, switch_interval_ms=0.25)
    worker = RolloutWorker(params)
    before = sys.getswitchinterval()
    anyio.run(worker.serve, SimpleNamespace(peers=lambda port: 1))
    expected = before if held is None else pytest.approx(held)
    assert seen == {"opening": expected, "serving": expected}
    assert sys.getswitchinterval() == before
