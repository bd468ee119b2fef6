"""The async Engine on asyncio and trio: concurrency, abort, cancellation, weights, closing."""

from __future__ import annotations

import threading
import time

import anyio
import pytest
from transformers import Qwen2ForCausalLM

from rstar2.engine import async_engine
from rstar2.engine.async_engine import (
    MAX_STEPS_PER_HOP,
    AsyncEngine,
    EngineClosedError,
    _Add,
    _Waiter,
    open_engine,
)
from rstar2.engine.config import EngineConfig
from rstar2.engine.core import EngineCore
from rstar2.engine.protocol import Engine, SamplingParams
from tests.engine.factories import random_prompts, tiny_qwen2

pytestmark = pytest.mark.anyio

GREEDY = SamplingParams(max_tokens=10, temperature=0.0)


async def test_concurrent_callers_get_their_own_outputs(qwen2: Qwen2ForCausalLM) -> None:
    prompts = random_prompts(8, seed=11)
    expected = [o.token_ids for o in EngineCore(qwen2).generate(prompts, GREEDY)]
    results: dict[int, list[int]] = {}
    async with open_engine(qwen2, EngineConfig(max_num_seqs=3)) as engine:
        assert isinstance(engine, Engine)

        async def one(i: int) -> None:
            await anyio.sleep(0.001 * i)  # staggered arrivals join a running batch
            out = await engine.generate(f"r{i}", prompts[i], GREEDY)
            assert out.request_id == f"r{i}" and len(out.logprobs) == len(out.token_ids)
            results[i] = out.token_ids

        async with anyio.create_task_group() as tg:
            for i in range(8):
                tg.start_soon(one, i)
        assert engine.stats().generated_tokens == 80
    assert [results[i] for i in range(8)] == expected


async def test_abort_ends_generate_with_abort(qwen2: Qwen2ForCausalLM) -> None:
    async with open_engine(qwen2) as engine:
        outputs = []

        async def long_request() -> None:
            outputs.append(await engine.generate("long", [1, 2], SamplingParams(400, 0.0)))

        async with anyio.create_task_group() as tg:
            tg.start_soon(long_request)
            while engine.stats().generated_tokens < 3:
                await anyio.sleep(0.001)
            await engine.abort("long")
            await engine.abort("unknown")  # no-op
        assert outputs[0].finish_reason == "abort" and 0 < len(outputs[0].token_ids) < 400
        assert engine.stats().running == 0


async def test_cancelled_caller_frees_its_request(qwen2: Qwen2ForCausalLM) -> None:
    async with open_engine(qwen2) as engine:
        with anyio.move_on_after(0.05):
            await engine.generate("c", [1, 2], SamplingParams(400, 0.0))
        while engine.stats().running or engine.stats().waiting:
            await anyio.sleep(0.001)
        out = await engine.generate("c", [3], SamplingParams(2, 0.0))  # the id is free again
        assert len(out.token_ids) == 2


class _HeldAbortCore(EngineCore):
    """A core whose abort, once applied, waits for the test before its output goes back."""

    def __init__(self, model: Qwen2ForCausalLM) -> None:
        super().__init__(model)
        self.aborted, self.proceed = threading.Event(), threading.Event()

    def abort(self, request_id: str):  # type: ignore[no-untyped-def]
        out = super().abort(request_id)
        self.aborted.set()
        self.proceed.wait(10)
        return out


async def test_a_reused_id_never_gets_the_cancelled_requests_output(
    qwen2: Qwen2ForCausalLM,
) -> None:
    # The cancelled request's abort is applied (the core is idle) but its output has not been
    # handed back when a new caller reuses the id: the new caller must get its own output.
    core = _HeldAbortCore(qwen2)
    engine = AsyncEngine(core)
    outputs = []

    async def reuse() -> None:
        outputs.append(await engine.generate("c", [3], SamplingParams(2, 0.0)))

    async with anyio.create_task_group() as tg:
        await tg.start(engine.serve)
        with anyio.move_on_after(0.05):
            await engine.generate("c", [1, 2], SamplingParams(400, 0.0))
        await anyio.to_thread.run_sync(core.aborted.wait, 10)
        assert not core.stats().running
        tg.start_soon(reuse)
        await anyio.sleep(0.01)  # the new caller waits for "c" before the old output arrives
        core.proceed.set()
        while not outputs:
            await anyio.sleep(0.001)
        tg.cancel_scope.cancel()
    assert outputs[0].finish_reason == "length" and len(outputs[0].token_ids) == 2


async def test_update_weights_changes_the_output() -> None:
    model, other = tiny_qwen2(seed=0), tiny_qwen2(seed=1)
    prompt = random_prompts(1, seed=12)[0]
    expected = EngineCore(other).generate([prompt], GREEDY)[0].token_ids
    async with open_engine(model) as engine:
        before = (await engine.generate("a", prompt, GREEDY)).token_ids
        await engine.update_weights(other.state_dict())
        after = (await engine.generate("b", prompt, GREEDY)).token_ids
        with pytest.raises(ValueError):
            await engine.update_weights({"nope": other.model.norm.weight})
    assert after == expected != before


async def test_bad_requests_fail_fast_and_closed_engine_refuses(qwen2: Qwen2ForCausalLM) -> None:
    async with open_engine(qwen2) as engine:
        with pytest.raises(ValueError):
            await engine.generate("x", [], GREEDY)
    with pytest.raises(EngineClosedError):
        await engine.generate("y", [1], GREEDY)


async def test_a_request_is_checked_once_on_the_event_loop(
    qwen2: Qwen2ForCausalLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The whole trajectory is a turn's prompt: `generate` checks it where the caller can get
    the error, and the worker thread does not check it again (it holds the GIL while it does)."""
    checked: list[str] = []
    check = EngineCore.check_request

    def counted(core: EngineCore, request_id: str, *args: object) -> None:
        checked.append(request_id)
        check(core, request_id, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(EngineCore, "check_request", counted)
    async with open_engine(qwen2) as engine:
        out = await engine.generate("a", [1, 2, 3], SamplingParams(3, 0.0))
        with pytest.raises(TypeError, match="must be ints"):
            await engine.generate("b", [1, True], GREEDY)
    assert len(out.token_ids) == 3 and checked == ["a", "b"]


async def test_a_hop_runs_steps_until_a_request_finishes(
    qwen2: Qwen2ForCausalLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker thread's hop (`_steps`, called here directly): steps run back to back until
    one finishes a request, whose output goes back at once, or until `MAX_STEPS_PER_HOP`."""
    monkeypatch.setattr(async_engine, "MAX_HOP_S", 60.0)  # the step cap alone, however slow
    engine = AsyncEngine(EngineCore(qwen2))
    short, long = _Waiter(), _Waiter()
    engine._post(_Add("short", [1, 2, 3], SamplingParams(3, 0.0), short))
    engine._post(_Add("long", [4, 5], SamplingParams(MAX_STEPS_PER_HOP + 8, 0.0), long))
    clock = engine.core.clock
    first = engine._steps()
    assert [(w, o.request_id) for w, o in first.outputs] == [(short, "short")]
    assert clock.steps == 3  # one token a step: the short request's last at step 3
    second = engine._steps()
    assert not second and clock.steps == 3 + MAX_STEPS_PER_HOP  # nothing finished: the cap
    third = engine._steps()
    assert [(w, o.request_id) for w, o in third.outputs] == [(long, "long")]
    assert clock.steps == MAX_STEPS_PER_HOP + 8
    assert not engine._steps() and clock.steps == MAX_STEPS_PER_HOP + 8  # nothing left: no step


async def test_a_hop_of_slow_steps_hands_back_after_its_time(
    qwen2: Qwen2ForCausalLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Steps slower than `MAX_HOP_S` (a large model on a CPU): one step a hop, so closing the
    engine never waits for a long run of them."""
    core = EngineCore(qwen2)
    step = core.step

    def slow_step() -> list:
        time.sleep(0.03)
        return step()

    monkeypatch.setattr(core, "step", slow_step)
    monkeypatch.setattr(async_engine, "MAX_HOP_S", 0.02)
    engine = AsyncEngine(core)
    engine._post(_Add("long", [4, 5], SamplingParams(20, 0.0), _Waiter()))
    assert not engine._steps() and core.clock.steps == 1
