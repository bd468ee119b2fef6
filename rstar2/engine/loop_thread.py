"""An asyncio event loop in a daemon thread, callable from asyncio or trio without blocking.

vLLM's `AsyncLLM` needs an asyncio loop of its own; it lives in a `LoopThread`, and callers on
any event loop cross over:

- `call(coro)` runs `coro` there and waits for it here; cancelling here cancels it there;
- `submit(coro)` starts it there and returns a `concurrent.futures.Future` at once, for work
  that must be under way before the caller does something else; `wait(future)` waits for it
  here like `call`;
- `alongside(future, blocking)` runs a blocking function in a worker thread while a submitted
  coroutine runs on the loop, and waits for both: the two halves of a collective (the engine's
  workers receive through an RPC on the loop, this process sends from the thread).

Completion comes back to the caller's loop with a thread-safe callback, so neither side blocks.

What it does not do: own what runs on the loop (the caller closes that before `close()`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import anyio
import trio

log = logging.getLogger(__name__)

T = TypeVar("T")


def _host_waker() -> Callable[[Callable[[], None]], None]:
    """Schedules a callback on the caller's event loop from another thread, without blocking."""
    try:
        return asyncio.get_running_loop().call_soon_threadsafe
    except RuntimeError:  # not asyncio: the Engine protocol's other backend is trio
        return trio.lowlevel.current_trio_token().run_sync_soon


class LoopThread:
    """An asyncio loop running in a daemon thread."""

    def __init__(self, name: str = "vllm-loop") -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Start `coro` on the loop; returns at once."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    async def wait(self, future: concurrent.futures.Future[T]) -> T:
        """Wait here for a submitted future; cancelling here cancels it."""
        done = anyio.Event()
        wake = _host_waker()

        def notify(_: object) -> None:
            try:
                wake(done.set)
            except (RuntimeError, trio.RunFinishedError):
                log.debug("caller's event loop ended before a call on the loop thread finished")

        future.add_done_callback(notify)
        try:
            await done.wait()
        finally:
            if not future.done():
                future.cancel()
        return future.result()

    async def alongside(
        self, future: concurrent.futures.Future[Any], blocking: Callable[[], T]
    ) -> T:
        """Run `blocking()` in a worker thread while the submitted `future` runs on the loop;
        both must finish. Returns what `blocking` returned.

        If `blocking` fails, the future is cancelled (its peer in the collective will not come),
        unless it already failed: then its error is raised instead, chained to the other, as
        the likelier cause (e.g. the RPC was refused, so the thread timed out waiting)."""
        try:
            result = await anyio.to_thread.run_sync(blocking)
        except BaseException as e:
            if future.done() and not future.cancelled() and future.exception() is not None:
                raise future.exception() from e  # type: ignore[misc]
            future.cancel()
            raise
        await self.wait(future)
        return result

    async def call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run `coro` on the loop and wait for it here; cancelling here cancels it there."""
        return await self.wait(self.submit(coro))

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=30)
        if not self._thread.is_alive():
            self.loop.close()
