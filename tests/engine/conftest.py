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


@pytest.fixture(params=["dynamic", "fixed"])
def decode_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a test on both decode paths: every engine built in it takes `request.param`
    (`EngineConfig.decode`), whatever its config says."""
    from rstar2.engine.config import EngineConfig

    fixed = request.param == "fixed"
    monkeypatch.setattr(EngineConfig, "fixed_decode", lambda self, device: fixed)
    return request.param
