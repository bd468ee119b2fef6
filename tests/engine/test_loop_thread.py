"""The loop thread under asyncio and trio: results, errors, early submission, cancellation."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading

import anyio
import pytest

from rstar2.engine.loop_thread import LoopThread

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return request.param


async def test_call_submit_and_wait_cross_over() -> None:
    lt = LoopThread(name="test-loop")
    try:

        async def on_loop(x: int) -> int:
            assert asyncio.get_running_loop() is lt.loop
            await asyncio.sleep(0.01)
            return x * 2

        async def boom() -> None:
            raise KeyError("there")

        assert await lt.call(on_loop(21)) == 42
        future = lt.submit(on_loop(5))  # under way before anyone waits on it
        await anyio.to_thread.run_sync(future.result)
        assert await lt.wait(future) == 10
        with pytest.raises(KeyError, match="there"):
            await lt.call(boom())
    finally:
        lt.close()


async def test_cancelling_the_caller_cancels_the_call_on_the_loop() -> None:
    lt = LoopThread(name="test-loop")
    cancelled = []

    async def forever() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    try:
        with anyio.move_on_after(0.2):
            await lt.call(forever())
        with anyio.fail_after(10):
            while not cancelled:
                await anyio.sleep(0.01)
    finally:
        lt.close()


async def test_alongside_waits_for_both_halves_and_names_the_likelier_cause() -> None:
    lt = LoopThread(name="test-loop")
    gate = threading.Event()  # the two halves meet, like the ranks of a collective
    started = threading.Event()

    async def receive() -> str:
        started.set()
        await asyncio.to_thread(gate.wait, 10)
        return "received"

    async def refuse() -> None:
        raise ValueError("refused by the workers")

    def send() -> int:
        gate.set()
        return 7

    def time_out() -> int:
        raise TimeoutError("no peer came")

    try:
        receiving = lt.submit(receive())
        assert await lt.alongside(receiving, send) == 7
        assert receiving.result() == "received"

        refused = lt.submit(refuse())
        await anyio.to_thread.run_sync(concurrent.futures.wait, [refused], 10)
        with pytest.raises(ValueError, match="refused") as e:
            await lt.alongside(refused, time_out)
        assert isinstance(e.value.__cause__, TimeoutError)

        gate.clear()
        started.clear()
        pending = lt.submit(receive())
        # cancelled once running (a coroutine cancelled before it starts is never awaited)
        await anyio.to_thread.run_sync(started.wait, 10)
        with pytest.raises(TimeoutError):
            await lt.alongside(pending, time_out)
        assert pending.cancelled()
    finally:
        gate.set()
        lt.close()
