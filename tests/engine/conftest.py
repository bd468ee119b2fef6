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


ROUND_PATHS = ("rounds", "prefill-graphs")
"""The decode paths that run rounds of `ROUND_STEPS`."""
PREFILL_TOKENS = 12
"""The most new tokens of a fixed-shape prefill on the "prefill-graphs" path (so the tests'
prompts and continuations take both the fixed shapes and the dynamic forward)."""


@pytest.fixture(params=["dynamic", "fixed", "rounds", "prefill-graphs"])
def decode_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a test on every decode path: every engine built in it takes `request.param`
    (`EngineConfig.decode`; "rounds" is the fixed path with `decode_steps` = `ROUND_STEPS`;
    "prefill-graphs" the same with prefills of up to `PREFILL_TOKENS` new tokens on fixed
    shapes, `engine.prefill_graph_tokens`), whatever its config says."""
    from rstar2.engine.config import EngineConfig

    fixed = request.param != "dynamic"
    steps = ROUND_STEPS if request.param in ROUND_PATHS else 1
    prefill = PREFILL_TOKENS if request.param == "prefill-graphs" else 0
    monkeypatch.setattr(EngineConfig, "fixed_decode", lambda self, device: fixed)
    monkeypatch.setattr(EngineConfig, "round_steps", lambda self, device: steps)
    monkeypatch.setattr(EngineConfig, "prefill_tokens", lambda self, device: prefill)
    return request.param
