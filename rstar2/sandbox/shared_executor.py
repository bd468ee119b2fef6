"""`execute_code(code, stdin, timeout_s)`: the synchronous convenience over the executor.

One shared executor with the default `SandboxConfig` is started on first use (again after a
fork) in a background event-loop thread and closed at exit; calls from any thread wait for
their one result.

What it does not do: take a config, or bound anything beyond what the executor does (its
admission answers `rejected` as usual).
"""

from __future__ import annotations

import atexit
import os
import threading
from contextlib import AbstractContextManager

from anyio.from_thread import BlockingPortal, start_blocking_portal

from rstar2.sandbox.config import SandboxConfig
from rstar2.sandbox.executor import open_executor
from rstar2.wire import ExecRequest, ExecResult


class _SharedExecutor:
    """One executor in a background event-loop thread, for `execute_code`."""

    def __init__(self, cfg: SandboxConfig) -> None:
        self._portal_cm: AbstractContextManager[BlockingPortal] = start_blocking_portal()
        self.portal = self._portal_cm.__enter__()
        self._ex_cm = self.portal.wrap_async_context_manager(open_executor(cfg))
        self.executor = self._ex_cm.__enter__()

    def close(self) -> None:
        self._ex_cm.__exit__(None, None, None)
        self._portal_cm.__exit__(None, None, None)


_shared: _SharedExecutor | None = None
_shared_lock = threading.Lock()
_shared_pid = 0


def execute_code(code: str, stdin: str = "", timeout_s: float = 5.0) -> ExecResult:
    """Run `code` in the shared default executor and wait for its result (thread-safe)."""
    global _shared, _shared_pid
    with _shared_lock:
        if _shared is None or _shared_pid != os.getpid():
            _shared = _SharedExecutor(SandboxConfig())
            _shared_pid = os.getpid()
            atexit.register(_shared.close)
        shared = _shared
    request = ExecRequest(id="execute_code", code=code, stdin=stdin, timeout_s=timeout_s)
    return shared.portal.call(shared.executor.run, request)
