"""Shared sandbox fixtures: one warm executor per test module, driven from sync tests."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal

from rstar2.sandbox.config import SandboxConfig
from rstar2.sandbox.executor import Executor, open_executor
from rstar2.wire import ExecRequest, ExecResult

SECRET = "rstar2-test-secret-3f9a"
MEMORY_SLACK_MB = 64.0


@dataclass
class Sandbox:
    """A running executor plus the baseline a hostile request must leave behind unchanged."""

    portal: BlockingPortal
    executor: Executor
    baseline_pids: set[int]
    baseline_mb: float

    def run(self, code: str, **kw: object) -> ExecResult:
        request = ExecRequest(id="t", code=code, **kw)  # type: ignore[arg-type]
        return self.portal.call(self.executor.run, request)

    def assert_recovered(self) -> None:
        """The next normal request is answered, nothing outlived the last one, memory is back."""
        result = self.run("6 * 7")
        assert (result.status, result.stdout) == ("ok", "42\n"), result
        assert set(self.executor.process_ids()) == self.baseline_pids
        assert self.executor.memory_mb() < self.baseline_mb + MEMORY_SLACK_MB


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    os.environ["RSTAR2_TEST_SECRET"] = SECRET  # in the service's env: must not reach requests
    cfg = SandboxConfig(concurrency=4, timeout_s=5.0, tmpfs_mb=8, file_size_mb=4)
    with start_blocking_portal("asyncio") as portal:
        with portal.wrap_async_context_manager(open_executor(cfg)) as ex:
            for _ in range(3):
                portal.call(ex.run, ExecRequest(id="warm", code="print(1)"))
            yield Sandbox(portal, ex, set(ex.process_ids()), ex.memory_mb())
    os.environ.pop("RSTAR2_TEST_SECRET", None)
