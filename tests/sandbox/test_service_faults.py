"""The HTTP sandbox service as a process under faults (issue 35): zygote and child kills while
requests flow (`rstar2 sandbox soak` in miniature), and SIGTERM / SIGINT with requests in flight."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import anyio
import httpx2
import pytest

from rstar2.sandbox.config import SandboxConfig
from rstar2.sandbox.proctree import running
from rstar2.sandbox.soak import (
    ServedProcess,
    SoakConfig,
    classify,
    passed,
    run_soak,
    zygote_in,
)

LIGHT = SandboxConfig(concurrency=8, preload=[], warmup=False, timeout_s=30.0)


def test_an_answer_is_checked_against_its_own_marker() -> None:
    m = "soak-1-abcdef"
    ok = {"stdout": f"{m}\n", "run_success": True, "reason": ""}
    assert classify(m, "/run", 200, ok) == "correct"
    assert classify(m, "/run", 200, {**ok, "stdout": "soak-2-abcdef\n"}) == "crossed"
    assert classify(m, "/run", 200, {**ok, "stdout": "x\n"}) == "wrong"
    died = {"stdout": "", "run_success": False, "reason": "internal_error"}
    assert classify(m, "/run", 200, died) == "internal_error"
    killed = {"stdout": "", "run_success": False, "reason": ""}
    assert classify(m, "/run", 200, killed) == "run_failed"
    run = {"stdout": f"{m}\n", "stderr": ""}
    assert classify(m, "/run_code", 200, {"status": "Success", "run_result": run}) == "correct"
    fusion_err = {"status": "SandboxError", "run_result": {"stdout": "", "stderr": "x"}}
    assert classify(m, "/run_code", 200, fusion_err) == "SandboxError"
    assert classify(m, "/run", 500, None) == "http_500"


def test_a_killed_zygotes_orphans_are_not_taken_for_its_replacement() -> None:
    # service 10 -> bubblewrap 11 -> zygote 12 -> children 13, 14; zygote 12 killed: its
    # children sit under bubblewrap 11 for a moment, while bubblewrap 20 starts zygote 21
    before = {11: (10, False), 12: (11, True), 13: (12, True), 14: (12, True)}
    assert zygote_in(before, 10, None, None) == (12, 11)
    orphans = {11: (10, False), 13: (11, True), 14: (11, True)}
    assert zygote_in(orphans, 10, None, None) == (13, 11)  # what a plain look would take
    assert zygote_in(orphans, 10, 12, 11) is None
    assert zygote_in({**orphans, 20: (10, False), 21: (20, True)}, 10, 12, 11) == (21, 20)
    # without bubblewrap the zygote is the service's child, and orphans leave the tree
    assert zygote_in({12: (10, True), 13: (12, True)}, 10, None, None) == (12, 10)
    assert zygote_in({12: (10, True)}, 10, 12, 10) is None
    assert zygote_in({21: (10, True), 22: (21, True)}, 10, 12, 10) == (21, 10)


def test_a_miniature_soak_with_zygote_kills_during_start_up_passes() -> None:
    soak = SoakConfig(
        requests=240,
        in_flight=16,
        zygote_kill_every_s=0.6,
        double_kill_share=1.0,
        child_kill_every_s=0.2,
        deadline_s=30,
        drain_s=2,
        seed=3,
    )
    report = anyio.run(run_soak, LIGHT, soak, lambda line: None)
    assert passed(report), report
    assert report["answered"] == report["requests"] == 240
    assert report["zygote_kills"] >= 2 and report["kills_during_start"] >= 1, report
    assert report["child_kills"] >= 1 and report["correct"] > 0
    assert report["tracebacks_logged"] == 0


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_drains_requests_in_flight_and_exits_0(
    signum: signal.Signals, tmp_path: Path
) -> None:
    # Four requests finish inside the 1.5 s drain and get their answers; two would run for
    # 20 s and are answered with each API's retry status at the end of the drain: no dropped
    # connection, no empty 500; then the service exits 0 and leaves no process behind.
    served = ServedProcess(LIGHT, 1.5, tmp_path)
    try:
        base = f"http://127.0.0.1:{served.port()}"
        answers: dict[str, httpx2.Response] = {}

        async def post(name: str, path: str, body: dict[str, object]) -> None:
            async with httpx2.AsyncClient(base_url=base, timeout=30) as client:
                answers[name] = await client.post(path, json=body)

        async def main() -> list[int]:
            async with anyio.create_task_group() as tg:
                for i in range(2):
                    quick = f"import time; time.sleep(0.5); print({i})"
                    tg.start_soon(
                        post, f"quick-cj-{i}", "/run", {"type": "python", "solution": quick}
                    )
                    body = {"code": quick, "language": "python"}
                    tg.start_soon(post, f"quick-sf-{i}", "/run_code", body)
                slow = "import time; time.sleep(20)"
                tg.start_soon(post, "slow-cj", "/run", {"type": "python", "solution": slow})
                body = {"code": slow, "language": "python", "run_timeout": 25}
                tg.start_soon(post, "slow-sf", "/run_code", body)
                async with httpx2.AsyncClient(base_url=base) as client:
                    with anyio.fail_after(10):
                        while (await client.get("/status")).json()["queue"] < 6:
                            await anyio.sleep(0.02)
                pids = served.descendants()
                served.proc.send_signal(signum)
            return pids

        pids = anyio.run(main)
        assert served.proc.wait(15) == 0, "\n".join(served.log[-20:])
    finally:
        if served.proc.poll() is None:
            served.proc.kill()
    for i in range(2):
        cj, sf = answers[f"quick-cj-{i}"], answers[f"quick-sf-{i}"]
        assert (cj.status_code, cj.json()["stdout"]) == (200, f"{i}\n")
        assert (sf.status_code, sf.json()["run_result"]["stdout"]) == (200, f"{i}\n")
    for name, status in (("slow-cj", 503), ("slow-sf", 504)):
        got = answers[name]
        assert got.status_code == status and got.headers["retry-after"] == "1", got.text
        assert "shutting down" in got.json()["detail"]
    assert not [p for p in pids if running(p)]
    log = "\n".join(served.log)
    assert signal.Signals(signum).name in log and "Traceback" not in log
    assert "CancelledError" not in log


def test_a_port_in_use_is_one_line_and_exit_code_2(tmp_path: Path) -> None:
    import socket
    import sys

    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "rstar2.cli", "-q", "sandbox", "serve", "--preload", "",
             "--http", f"127.0.0.1:{port}"],
            capture_output=True, text=True, timeout=60, cwd=tmp_path,
        )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().count("\n") == 0, done.stderr
    # http_gate.bind_socket's wording, the same as rstar2 view's (it had its own copy)
    assert f"--http: cannot listen on 127.0.0.1:{port}: Address already in use" in done.stderr
    assert "(another server there? --http picks another)" in done.stderr
