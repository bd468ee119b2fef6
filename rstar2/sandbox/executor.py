"""The local executor: admits requests, feeds its zygote, hands each caller exactly one result.

`open_executor(cfg)` starts a zygote (inside bubblewrap when it can; see `isolation.py`) and
yields an `Executor` whose `run(request)` many tasks may await at once (anyio: asyncio or trio).
Admission is a plain synchronous decision (`Executor.admit`): oversized code or stdin, a full
queue (`max_queue` requests or `max_queue_mb` bytes outstanding) or a closed executor answer
`rejected` at once, so memory stays bounded and nothing is dropped silently. At most
2 x `concurrency` requests are handed to the zygote at a time; its results come back in
completion order, so a slow request never holds back others. If the zygote dies, its in-flight
requests get status `killed` and a new zygote is started; a start that fails in any way (the new
zygote killed during its handshake included) is retried with a backoff from 0.05 s doubling to
2 s, for as long as the executor is open, so no number of zygote deaths ends the service. The
death of the process it started counts too when its output stays open: bubblewrap killed during
its setup can leave the zygote running as an orphan, which the executor then closes. While
no zygote is up a request waits for one up to `cfg.restart_wait_s`, then is answered `rejected`
with `infra` "unavailable" (retry later; HTTP: 503 with Retry-After). A caller cancelled while
waiting cancels its request in the zygote.

Results that are the sandbox's fault rather than the code's carry `ExecResult.infra`: a full
queue ("queue_full"), no zygote up within `restart_wait_s` ("unavailable"), a shut-down executor
("shut_down"), a dead zygote ("sandbox_died"), a child that could not be started ("spawn_failed").
"queue_full" and "unavailable" are the two a caller should retry (`RETRY_LATER`). Code or stdin over the size limits is the
caller's own doing: `rejected` without `infra`. With `cfg.fault_rate` > 0 a seeded share of
admitted requests is answered with an injected failure instead of running (`faults.py`): noise
the model must cope with, deliberately NOT flagged as infrastructure.

Starting, handshaking with and stopping the zygote's process is in `zygote_process.py`;
`execute_code(code, stdin, timeout_s)`, the synchronous convenience, in `shared_executor.py`.

What it does not do: talk to other hosts (see `service.py` and `pool.py`).
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.abc

from rstar2.sandbox import framing, proctree
from rstar2.sandbox.config import SandboxConfig
from rstar2.sandbox.faults import injected_fault
from rstar2.sandbox.isolation import (
    IsolationError,
    IsolationReport,
    bwrap_status,
    zygote_argv,
)
from rstar2.sandbox.zygote_process import (
    SandboxStartError,
    handshake,
    kill,
    relay_stderr,
    start_process,
    stop,
)
from rstar2.wire import ExecRequest, ExecResult

log = logging.getLogger(__name__)


RETRY_LATER = frozenset({"queue_full", "unavailable"})
"""`ExecResult.infra` values that mean "not run; the same request may succeed later"."""

RESTART_BACKOFF_S = (0.05, 2.0)
"""First and longest wait between two failed zygote starts (doubling in between)."""

BOOT_ATTEMPTS = 3
"""Starts the first zygote gets before `boot` gives up (a broken set-up fails fast)."""

ORPHAN_GRACE_S = 1.0
"""How long the zygote's output may stay open after the process the executor started exited.
Killed inside bubblewrap's setup (before its --die-with-parent takes hold), bubblewrap can leave
the zygote running as an orphan that holds the pipes: after this grace the executor closes its
input (the zygote exits on that) and counts the zygote as dead."""


@dataclass
class ExecutorStats:
    outstanding: int
    queued_bytes: int
    completed: int
    rejected: int
    zygote_restarts: int
    faults: int = 0
    """Requests answered with an injected fault (`fault_rate`)."""
    failed_starts: int = 0
    """Zygote starts that failed (killed during start-up, or not starting) and were retried."""


@dataclass
class _Waiter:
    event: anyio.Event
    result: dict[str, Any] | None = None


def rejected(request_id: str, message: str, infra: str = "") -> ExecResult:
    return ExecResult(id=request_id, status="rejected", stderr=message, exit_code=-1, infra=infra)


class Executor:
    """A warm zygote and the bookkeeping around it. Build it with `open_executor`."""

    def __init__(self, cfg: SandboxConfig) -> None:
        self.cfg = cfg
        self.isolation = IsolationReport()
        self._proc: anyio.abc.Process | None = None
        self._starting: anyio.abc.Process | None = None
        self._up = anyio.Event()
        self._closed = False
        self._credits = anyio.Semaphore(2 * cfg.concurrency)
        self._write_lock = anyio.Lock()
        self._seq = itertools.count(1)
        self._waiters: dict[int, _Waiter] = {}
        self._outstanding = 0
        self._queued_bytes = 0
        self._completed = 0
        self._rejected = 0
        self._faults = 0
        self._restarts = 0
        self._failed_starts = 0
        self._frames = framing.FrameBuffer()
        self._argv: list[str] = []

    # -- the public surface --------------------------------------------------------------

    def admit(self, request: ExecRequest) -> ExecResult | None:
        """A `rejected` result for a request that cannot be admitted now, else None."""
        if not isinstance(request, ExecRequest):
            raise TypeError(f"expected an ExecRequest, got {type(request).__name__}")
        cfg = self.cfg
        if self._closed:
            return rejected(request.id, "executor is shut down", "shut_down")
        if len(request.code) > cfg.max_code_bytes:
            return rejected(
                request.id, f"code of {len(request.code)} chars exceeds {cfg.max_code_bytes}"
            )
        if len(request.stdin) > cfg.max_stdin_bytes:
            return rejected(
                request.id, f"stdin of {len(request.stdin)} chars exceeds {cfg.max_stdin_bytes}"
            )
        if self._outstanding >= cfg.max_queue:
            message = f"queue full ({self._outstanding} requests outstanding)"
            return rejected(request.id, message, "queue_full")
        if self._queued_bytes + _size(request) > cfg.max_queue_mb << 20:
            message = f"queue full ({self._queued_bytes} bytes outstanding)"
            return rejected(request.id, message, "queue_full")
        return None

    async def run(self, request: ExecRequest) -> ExecResult:
        """Run one request; always returns its one result (failures are statuses)."""
        refusal = self.admit(request)
        if refusal is not None:
            self._rejected += 1
            return refusal
        fault = injected_fault(request, self.cfg.fault_rate)
        if fault is not None:
            self._faults += 1
            return fault
        size = _size(request)
        self._outstanding += 1
        self._queued_bytes += size
        try:
            async with self._credits:
                result = await self._submit(request)
        finally:
            self._outstanding -= 1
            self._queued_bytes -= size
        self._completed += 1
        return result

    def stats(self) -> ExecutorStats:
        return ExecutorStats(
            self._outstanding,
            self._queued_bytes,
            self._completed,
            self._rejected,
            self._restarts,
            self._faults,
            self._failed_starts,
        )

    def process_ids(self) -> list[int]:
        """The zygote's processes (bubblewrap, zygote, children) as seen from the host; while a
        zygote is being started, that one's."""
        proc = self._proc or self._starting
        if proc is None:
            return []
        return [proc.pid, *proctree.descendants(proc.pid)]

    def memory_mb(self) -> float:
        """Proportional memory (PSS) of all the zygote's processes, in MiB."""
        return proctree.pss_bytes(self.process_ids()) / (1 << 20)

    # -- one request ---------------------------------------------------------------------

    async def _ready(self) -> anyio.abc.Process | None:
        """The live zygote, once one is up; None when none came up in `restart_wait_s`."""
        with anyio.move_on_after(self.cfg.restart_wait_s):
            while not self._closed:
                await self._up.wait()
                proc = self._proc
                if proc is not None and proc.stdin is not None:
                    return proc
                # the zygote died between the event and now: wait for its successor
                await anyio.sleep(0.01)
        return None

    async def _submit(self, request: ExecRequest) -> ExecResult:
        proc = await self._ready()
        if self._closed:
            return ExecResult(
                id=request.id, status="killed", stderr="executor is shut down", infra="shut_down"
            )
        if proc is None:
            message = f"sandbox restarting: no zygote up for {self.cfg.restart_wait_s} s, retry"
            return rejected(request.id, message, "unavailable")
        seq = next(self._seq)
        timeout_s, memory_mb = self.cfg.limits_for(request.timeout_s, request.memory_mb)
        frame = {"op": "run", "seq": seq, "code": request.code, "stdin": request.stdin}
        frame.update(timeout_s=timeout_s, memory_mb=memory_mb)
        waiter = _Waiter(anyio.Event())
        self._waiters[seq] = waiter
        try:
            await self._send(proc, framing.pack(frame))
            await waiter.event.wait()
        except anyio.get_cancelled_exc_class():
            if self._waiters.pop(seq, None) is not None:
                with anyio.CancelScope(shield=True):
                    await self._send(proc, framing.pack({"op": "cancel", "seq": seq}))
            raise
        assert waiter.result is not None
        return _result(request.id, waiter.result)

    async def _send(self, proc: anyio.abc.Process, data: bytes) -> None:
        assert proc.stdin is not None
        try:
            async with self._write_lock:
                await proc.stdin.send(data)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            pass  # the zygote is gone; the reader fails every waiter with status killed

    # -- the zygote's life ---------------------------------------------------------------

    async def boot(self) -> None:
        """Start the first zygote and check its isolation; raises instead of degrading silently
        (after `BOOT_ATTEMPTS` failed starts: one killed while starting is tried again)."""
        bwrap_reason = await anyio.to_thread.run_sync(bwrap_status, self.cfg)
        self._argv = zygote_argv(self.cfg, bwrap_reason)
        for attempt in range(1, BOOT_ATTEMPTS + 1):
            try:
                proc, layers = await self._launch()
                break
            except SandboxStartError as e:
                if attempt == BOOT_ATTEMPTS:
                    raise
                self._failed_starts += 1
                log.warning("sandbox zygote failed to start (%s); trying again", e)
                await anyio.sleep(RESTART_BACKOFF_S[0] * 2**attempt)
        self.isolation = _report(bwrap_reason, layers)
        self.isolation.log()
        if self.cfg.require_isolation and self.isolation.missing():
            proc.kill()
            await stop(proc)
            missing = ", ".join(self.isolation.missing())
            raise IsolationError(f"require_isolation is set and these layers are off: {missing}")
        self._proc = proc
        self._up.set()

    async def serve(self) -> None:
        """Pump results from the zygote; restart it whenever it dies, until `aclose`."""
        proc = self._proc
        while proc is not None:
            await self._pump(proc)
            # one synchronous step: no request can pick up the dead zygote after this
            self._up, self._proc = anyio.Event(), None
            self._fail_all("sandbox zygote exited", "sandbox_died")
            await stop(proc)
            if self._closed:
                break
            self._restarts += 1
            log.error("sandbox zygote died (exit %s); starting a new one", proc.returncode)
            proc = await self._relaunch()
            self._proc = proc
            self._up.set()
        self._up.set()

    async def _launch(self) -> tuple[anyio.abc.Process, dict[str, str]]:
        """A started zygote and its isolation layers; any failure, the zygote dying during
        its handshake included, is a `SandboxStartError` and leaves no process behind."""
        proc = await start_process(self._argv)
        self._starting = proc
        try:
            layers, self._frames = await handshake(proc, self.cfg.start_timeout_s)
            return proc, layers
        except BaseException as e:
            kill(proc)
            await stop(proc)
            if isinstance(e, (anyio.EndOfStream, anyio.BrokenResourceError, OSError)):
                raise SandboxStartError(f"sandbox zygote died while starting: {e!r}") from e
            raise
        finally:
            self._starting = None

    async def _relaunch(self) -> anyio.abc.Process | None:
        """A new zygote, retried with backoff until one starts; None once the executor closes."""
        delay, longest = RESTART_BACKOFF_S
        failures = 0
        while not self._closed:
            try:
                proc, _ = await self._launch()
            except SandboxStartError as e:
                failures += 1
                self._failed_starts += 1
                log.error(
                    "sandbox zygote failed to restart (%s); attempt %d, retrying in %.2f s",
                    e, failures, delay,
                )  # fmt: skip
                await anyio.sleep(delay)
                delay = min(2 * delay, longest)
                continue
            if self._closed:  # closed while it started: nobody will use it
                kill(proc)
                await stop(proc)
                return None
            if failures:
                log.warning("sandbox zygote up again after %d failed start(s)", failures)
            return proc
        return None

    async def _pump(self, proc: anyio.abc.Process) -> None:
        """Dispatch results until the zygote's output ends, or until the process it was
        started as has been gone `ORPHAN_GRACE_S`; relay its stderr to the log."""
        assert proc.stdout is not None and proc.stderr is not None
        async with anyio.create_task_group() as tg:
            tg.start_soon(relay_stderr, proc.stderr)
            tg.start_soon(self._watch_exit, proc, tg.cancel_scope)
            while True:
                try:
                    data = await proc.stdout.receive(1 << 20)
                except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
                    break
                for frame in self._frames.feed(data):
                    waiter = self._waiters.pop(frame.get("seq", -1), None)
                    if waiter is not None:
                        waiter.result = frame
                        waiter.event.set()
            tg.cancel_scope.cancel()

    async def _watch_exit(self, proc: anyio.abc.Process, pump: anyio.CancelScope) -> None:
        """End the pump when `proc` has exited but its output stays open (an orphaned zygote
        holds it): close the zygote's input, on which it exits and its output ends; end the
        pump after another grace if it does not (`serve` then closes the pipes)."""
        await proc.wait()
        await anyio.sleep(ORPHAN_GRACE_S)  # its last results are read and the output ends
        log.error("sandbox zygote's process exited but its output is still open: closing it")
        assert proc.stdin is not None
        with anyio.CancelScope(shield=True):
            async with self._write_lock:
                await proc.stdin.aclose()  # an orphaned zygote exits on end of input
        await anyio.sleep(5 * ORPHAN_GRACE_S)
        pump.cancel()

    def _fail_all(self, message: str, infra: str) -> None:
        waiters, self._waiters = self._waiters, {}
        for waiter in waiters.values():
            waiter.result = {"status": "killed", "stderr": message, "exit_code": -9, "infra": infra}
            waiter.event.set()

    async def aclose(self) -> None:
        """Stop admitting, end the zygote (which kills its children), fail what is left."""
        self._closed = True
        proc = self._proc
        with anyio.CancelScope(shield=True):
            if proc is not None and proc.stdin is not None:
                async with self._write_lock:
                    await proc.stdin.aclose()
            if proc is not None:
                await stop(proc)  # also when the caller was cancelled: no zygote outlives us
        self._fail_all("executor is shut down", "shut_down")


def _size(request: ExecRequest) -> int:
    return len(request.code) + len(request.stdin)


def _result(request_id: str, frame: dict[str, Any]) -> ExecResult:
    return ExecResult(
        id=request_id,
        status=frame["status"],
        stdout=frame.get("stdout", ""),
        stderr=frame.get("stderr", ""),
        exit_code=frame.get("exit_code", 0),
        wall_s=frame.get("wall_s", 0.0),
        truncated=frame.get("truncated", False),
        infra=frame.get("infra", ""),
    )


def _report(bwrap_reason: str, zygote_layers: dict[str, str]) -> IsolationReport:
    layers = {"bwrap": bwrap_reason, **zygote_layers, "rlimits": "", "wall_clock_timeout": ""}
    return IsolationReport(layers)


@asynccontextmanager
async def open_executor(cfg: SandboxConfig | None = None) -> AsyncIterator[Executor]:
    """Start a local executor; on exit its zygote and every child are gone."""
    ex = Executor(cfg or SandboxConfig())
    await ex.boot()
    async with anyio.create_task_group() as tg:
        tg.start_soon(ex.serve)
        try:
            yield ex
        finally:
            await ex.aclose()
