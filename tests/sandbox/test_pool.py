"""The multi-service client: least-outstanding dispatch, failover when a service dies."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
import zmq

from rstar2.actors.sockets import CurveKeys
from rstar2.sandbox.config import SandboxConfig
from rstar2.sandbox.pool import Dispatcher, open_pool
from rstar2.sandbox.service import serve_sandbox
from rstar2.wire import ExecRequest, ExecResult


def req(i: int) -> ExecRequest:
    return ExecRequest(id=str(i), code="1")


def test_requests_go_to_the_least_loaded_service() -> None:
    d = Dispatcher(3)
    assert [d.assign(str(i), req(i)) for i in range(6)] == [0, 1, 2, 0, 1, 2]
    d.finish("1")
    assert d.assign("6", req(6)) == 1


def test_dead_service_requests_are_resent_elsewhere() -> None:
    d = Dispatcher(2)
    d.assign("a", req(0))
    d.assign("b", req(1))
    resend, fail = d.service_died(1)
    assert (resend, fail) == ([("b", 0)], [])
    assert d.load == [2, 0] and d.flights["b"].attempts == 2


def test_requests_past_their_resends_are_failed() -> None:
    d = Dispatcher(2, max_resends=0)
    d.assign("a", req(0))
    d.assign("b", req(1))
    assert d.service_died(1) == ([], ["b"])
    assert "b" not in d.flights


def test_no_live_service_means_no_assignment() -> None:
    d = Dispatcher(1)
    d.service_died(0)
    assert d.assign("a", req(0)) is None
    d.service_alive(0)
    assert d.assign("a", req(0)) == 0


def test_a_result_is_taken_once() -> None:
    d = Dispatcher(1)
    d.assign("a", req(0))
    assert d.finish("a") is not None and d.finish("a") is None and d.load == [0]


@pytest.fixture
def two_services(tmp_path: Path) -> Iterator[tuple[list[str], list[subprocess.Popen[bytes]]]]:
    endpoints = [f"ipc://{tmp_path}/{name}.sock" for name in ("a", "b")]
    cmd = [sys.executable, "-m", "rstar2.cli", "-q", "sandbox", "serve", "--preload", ""]
    procs = [subprocess.Popen([*cmd, "--bind", e]) for e in endpoints]
    yield endpoints, procs
    for p in procs:
        p.kill()
        p.wait()


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_killing_one_of_two_services_loses_no_request(two_services) -> None:  # type: ignore[no-untyped-def]
    endpoints, procs = two_services
    snippet = "import time\ntime.sleep(1.0)\nprint({i})"

    async def main() -> list[ExecResult]:
        results: list[ExecResult] = []
        async with open_pool(endpoints, heartbeat_s=0.2, dead_after_s=2.0) as pool:
            while pool.ready_services() != [0, 1]:
                await anyio.sleep(0.2)  # the services are still starting

            async def one(i: int) -> None:
                results.append(await pool.run(ExecRequest(id=str(i), code=snippet.format(i=i))))

            async with anyio.create_task_group() as tg:
                for i in range(8):
                    tg.start_soon(one, i)
                await anyio.sleep(0.3)
                assert pool.dispatcher.load == [4, 4]
                procs[1].send_signal(signal.SIGKILL)
            assert pool.dispatcher.alive == [True, False]  # declared dead, its 4 re-sent
        return results

    results = anyio.run(main)
    assert sorted((r.id, r.status, r.stdout) for r in results) == [
        (str(i), "ok", f"{i}\n") for i in range(8)
    ]


@pytest.mark.timeout(30)
def test_no_service_answers_fail_with_a_status(tmp_path: Path) -> None:
    async def main() -> ExecResult:
        async with open_pool(
            [f"ipc://{tmp_path}/none.sock"], heartbeat_s=0.1, dead_after_s=0.5
        ) as pool:
            return await pool.run(ExecRequest(id="lost", code="1"))

    result = anyio.run(main)
    assert result.id == "lost" and result.status == "killed"
    assert result.infra == "sandbox_died"


@pytest.mark.timeout(60)
def test_service_over_tcp_with_curve() -> None:
    server_public, server_secret = zmq.curve_keypair()
    client_public, client_secret = zmq.curve_keypair()
    keys = CurveKeys(
        *(k.decode() for k in (server_public, server_secret, client_public, client_secret))
    )
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        endpoint = f"tcp://127.0.0.1:{s.getsockname()[1]}"
    cfg = SandboxConfig(concurrency=1, preload=[], warmup=False)

    async def main() -> ExecResult:
        async with anyio.create_task_group() as tg:
            await tg.start(
                lambda task_status: serve_sandbox(
                    cfg, endpoint, curve=keys, task_status=task_status
                )
            )
            async with open_pool([endpoint], curve=keys) as pool:
                result = await pool.run(ExecRequest(id="c", code="print('over curve')"))
            tg.cancel_scope.cancel()
        return result

    result = anyio.run(main)
    assert (result.status, result.stdout) == ("ok", "over curve\n")
