"""Fixtures for engine tests; every anyio test runs on asyncio and trio."""

from __future__ import annotations

import pytest
from transformers import Qwen2ForCausalLM

from tests.engine.factories import tiny_qwen2


@pytest.fixture(scope="module")
def qwen2() -> Qwen2ForCausalLM:
    return tiny_qwen2()


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return request.param


ROUND_STEPS = 3
"""The decode steps a round runs on the "rounds" decode path (odd, so rounds end mid-block)."""


@pytest.fixture(params=["dynamic", "fixed", "rounds"])
def decode_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a test on every decode path: every engine built in it takes `request.param`
    (`EngineConfig.decode`; "rounds" is the fixed path with `decode_steps` = `ROUND_STEPS`),
    whatever its config says."""
    from rstar2.engine.config import EngineConfig

    fixed = request.param != "dynamic"
    steps = ROUND_STEPS if request.param == "rounds" else 1
    monkeypatch.setattr(EngineConfig, "fixed_decode", lambda self, device: fixed)
    monkeypatch.setattr(EngineConfig, "round_steps", lambda self, device: steps)
    return request.param
