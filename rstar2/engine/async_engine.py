"""AsyncEngine: the `Engine` protocol on anyio (asyncio or trio) around a synchronous EngineCore.

One loop task (`serve`) owns the core. Callers never touch it: `generate`, `abort` and
`update_weights` put an operation in an inbox and wake the loop; the loop runs the core in a
worker thread (`anyio.to_thread.run_sync`), so the event loop stays free for the agent loop,
tool calls and many concurrent `generate` callers while the model computes. In the thread it
applies the inbox and runs `core.step()`, again and again (the inbox read before each step),
until a step finishes a request, an operation completes, or `MAX_STEPS_PER_HOP` steps or
`MAX_HOP_S` seconds have run: a hop between the threads costs about as much as a small model's
whole step on the host (0.3 ms on a 2-core CPU), and finished outputs still go back at once.
They are handed to their waiting callers on the event loop thread. A weight update is applied
between two steps: requests already running continue with the new weights (their cached K/V
were computed with the old ones, as in vLLM).

A caller whose `generate` is cancelled aborts its request. If the loop stops (engine closed or
a bug in a step), every pending caller gets `EngineClosedError`.

What it does not do: run the model in another process (the actor layer does that).
"""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import msgspec
import torch
from anyio.abc import TaskStatus
from torch import nn

from rstar2.engine.config import EngineConfig
from rstar2.engine.core import EngineCore, load_causal_lm
from rstar2.engine.protocol import GenerationOutput, SamplingParams
from rstar2.wire import EngineLoad


class EngineClosedError(RuntimeError):
    """The engine loop is not running (closed, or it failed); the request did not complete."""


@dataclass(eq=False)
class _Waiter:
    done: anyio.Event = field(default_factory=anyio.Event)
    output: GenerationOutput | None = None
    error: BaseException | None = None


@dataclass
class _Add:
    request_id: str
    prompt_ids: list[int]
    params: SamplingParams
    waiter: _Waiter


@dataclass
class _Abort:
    request_id: str


@dataclass
class _Weights:
    state_dict: dict[str, torch.Tensor]
    waiter: _Waiter


_Op = _Add | _Abort | _Weights

MAX_STEPS_PER_HOP = 32
MAX_HOP_S = 0.05
"""Most engine steps, and seconds, the worker thread runs before handing back to the event loop
when no step finished anything: closing the engine waits for the thread, so a hop of a large
model's slow CPU steps stays one or two steps long."""


@dataclass
class _StepResult:
    """What one step produced, each output paired with the caller that added its request."""

    outputs: list[tuple[_Waiter, GenerationOutput]] = field(default_factory=list)
    errors: list[tuple[str, _Waiter, BaseException]] = field(default_factory=list)
    weights_done: list[_Waiter] = field(default_factory=list)

    def __bool__(self) -> bool:
        """Whether a caller has something to be handed."""
        return bool(self.outputs or self.errors or self.weights_done)


class AsyncEngine:
    def __init__(self, core: EngineCore) -> None:
        self.core = core
        self._lock = threading.Lock()
        self._inbox: list[_Op] = []
        self._waiters: dict[str, _Waiter] = {}  # event loop side: the callers waiting
        # Worker-thread side: the caller of each request in the core. An output goes to the
        # waiter that added its request, never to a later caller that reused the id while the
        # output was on its way (a cancelled request's abort, or its last step, in flight).
        self._in_core: dict[str, _Waiter] = {}
        self._wakeup: anyio.Event | None = None  # created by `serve`, inside the event loop
        self._running = False
        self.hops = 0
        """Hand-overs to the worker thread so far (each runs one or more steps)."""

    async def generate(
        self, request_id: str, prompt_ids: list[int], params: SamplingParams
    ) -> GenerationOutput:
        self.core.check_request(request_id, prompt_ids, params)
        if not self._running:
            raise EngineClosedError("the engine loop is not running (use open_engine)")
        if request_id in self._waiters:
            raise ValueError(f"request id {request_id!r} is already in the engine")
        waiter = _Waiter()
        self._waiters[request_id] = waiter
        self._post(_Add(request_id, list(prompt_ids), params, waiter))
        try:
            await waiter.done.wait()
        finally:
            if not waiter.done.is_set():  # cancelled by the caller: free the engine's work
                self._waiters.pop(request_id, None)
                self._post(_Abort(request_id))
        if waiter.error is not None:
            raise waiter.error
        assert waiter.output is not None
        return waiter.output

    async def abort(self, request_id: str) -> None:
        if request_id in self._waiters:
            self._post(_Abort(request_id))

    async def update_weights(self, state_dict: dict[str, torch.Tensor]) -> None:
        if not self._running:
            raise EngineClosedError("the engine loop is not running (use open_engine)")
        waiter = _Waiter()
        self._post(_Weights(state_dict, waiter))
        await waiter.done.wait()
        if waiter.error is not None:
            raise waiter.error

    def stats(self) -> EngineLoad:
        """The core's stats, with requests posted but not yet handed to it counted as waiting."""
        stats = self.core.stats()
        with self._lock:
            posted = sum(isinstance(op, _Add) for op in self._inbox)
        return msgspec.structs.replace(stats, waiting=stats.waiting + posted)

    async def serve(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Run the step loop until cancelled."""
        self._wakeup = anyio.Event()
        self._running = True
        task_status.started()
        try:
            while True:
                if not (self._inbox or self.core.has_unfinished()):
                    await self._wakeup.wait()
                    self._wakeup = anyio.Event()
                    continue
                self.hops += 1
                self._deliver(await anyio.to_thread.run_sync(self._steps))
        finally:
            self._running = False
            self._fail_all(EngineClosedError("the engine loop stopped"))

    def _post(self, op: _Op) -> None:
        with self._lock:
            self._inbox.append(op)
        if self._wakeup is not None:
            self._wakeup.set()

    def _steps(self) -> _StepResult:
        """Worker thread: queued operations and engine steps until a caller has something to
        be handed, the core has nothing left, or `MAX_STEPS_PER_HOP` steps or `MAX_HOP_S`
        seconds have run."""
        result = _StepResult()
        deadline = time.perf_counter() + MAX_HOP_S
        for _ in range(MAX_STEPS_PER_HOP):
            self._step(result)
            if result or not self.core.has_unfinished() or time.perf_counter() > deadline:
                break
        return result

    def _step(self, result: _StepResult) -> None:
        """Worker thread: apply queued operations, then one engine step."""
        with self._lock:
            inbox, self._inbox = self._inbox, []
        for op in inbox:
            if isinstance(op, _Add):
                try:
                    self.core.add_request(op.request_id, op.prompt_ids, op.params, checked=True)
                except (TypeError, ValueError) as e:
                    result.errors.append((op.request_id, op.waiter, e))
                else:
                    self._in_core[op.request_id] = op.waiter
            elif isinstance(op, _Abort):
                out = self.core.abort(op.request_id)
                if out is not None:
                    result.outputs.append((self._in_core.pop(op.request_id), out))
            else:
                try:
                    self.core.load_state_dict(op.state_dict)
                except (TypeError, ValueError) as e:
                    op.waiter.error = e
                result.weights_done.append(op.waiter)
        if self.core.has_unfinished():
            for out in self.core.step():
                result.outputs.append((self._in_core.pop(out.request_id), out))

    def _deliver(self, result: _StepResult) -> None:
        for waiter, out in result.outputs:
            if self._take(out.request_id, waiter):
                waiter.output = out
                waiter.done.set()
        for request_id, waiter, error in result.errors:
            if self._take(request_id, waiter):
                waiter.error = error
                waiter.done.set()
        for waiter in result.weights_done:
            waiter.done.set()

    def _take(self, request_id: str, waiter: _Waiter) -> bool:
        """Remove `waiter` from the callers waiting if it still waits for `request_id`."""
        if self._waiters.get(request_id) is not waiter:
            return False  # its caller was cancelled; the id may be in use by a later request
        del self._waiters[request_id]
        return True

    def _fail_all(self, error: BaseException) -> None:
        waiters = list(self._waiters.values())
        self._waiters.clear()
        with self._lock:
            waiters += [op.waiter for op in self._inbox if isinstance(op, _Weights)]
            self._inbox.clear()
        for waiter in waiters:
            waiter.error = error
            waiter.done.set()


@asynccontextmanager
async def open_engine(
    model: nn.Module | str | Path,
    cfg: EngineConfig | None = None,
    *,
    seed: int = 0,
    device: torch.device | None = None,
) -> AsyncIterator[AsyncEngine]:
    """An `AsyncEngine` whose step loop runs for the duration of the `async with` block.

    `model` is a loaded HF causal LM (its parameters are shared, not copied, and moved to the
    engine's device) or a local model directory. `device` defaults to `cfg.device` resolved
    on this machine.
    """
    module = model if isinstance(model, nn.Module) else load_causal_lm(model)
    engine = AsyncEngine(EngineCore(module, cfg, seed=seed, device=device))
    async with anyio.create_task_group() as tg:
        await tg.start(engine.serve)
        try:
            yield engine
        finally:
            tg.cancel_scope.cancel()
