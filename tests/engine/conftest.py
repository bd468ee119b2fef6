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
