"""The vLLM backend under trio: vLLM's own asyncio loop lives in a thread, calls cross over.

Skipped where vLLM does not import. One engine, one test (starting vLLM takes tens of seconds).
"""

from __future__ import annotations

import os
import tempfile

import pytest

pytest.importorskip("vllm")
for _var in ("VLLM_CACHE_ROOT", "TORCHINDUCTOR_CACHE_DIR"):
    os.environ.setdefault(_var, tempfile.mkdtemp(prefix="rstar2-vllm-"))

import anyio  # noqa: E402

from production.test_vllm_engine import engine_config  # noqa: E402
from rstar2.engine.protocol import SamplingParams  # noqa: E402
from rstar2.engine.vllm_backend import open_vllm_engine  # noqa: E402
from rstar2.model.tiny import init_model  # noqa: E402

pytestmark = [pytest.mark.anyio, pytest.mark.vllm, pytest.mark.slow]


@pytest.fixture
def anyio_backend() -> str:
    return "trio"


async def test_concurrent_generation_and_cancellation_under_trio(tmp_path) -> None:
    model_dir = str(init_model(tmp_path / "model"))
    greedy = SamplingParams(max_tokens=16, temperature=0.0)
    outs: dict[int, list[int]] = {}
    async with open_vllm_engine(engine_config(model_dir)) as engine:

        async def one(i: int) -> None:
            outs[i] = (await engine.generate(f"r{i}", [3, 4, 5, 6], greedy)).token_ids

        async with anyio.create_task_group() as tg:
            for i in range(4):
                tg.start_soon(one, i)
        with anyio.move_on_after(0.5) as scope:
            await engine.generate("slow", [3, 4, 5], SamplingParams(max_tokens=900))
        assert scope.cancelled_caught
        with anyio.fail_after(60):
            while engine.stats().running:
                await anyio.sleep(0.05)
    assert len(outs) == 4 and all(len(t) == 16 for t in outs.values())
    assert all(t == outs[0] for t in outs.values())  # greedy: the same prompt, the same tokens
