"""Commands fed a user-sized count keep their memory bounded by the work in flight (issue 34,
"beyond the rows"): `sandbox exec` and `reward verify` given 10^6 lines on stdin, `sim run
--steps 1000000`.
(`eval --samples 1000000` is in tests/rollout/test_eval_command.py.)"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

LINES = 10**6


def vm_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for {pid}")


def test_sandbox_exec_of_a_million_lines_keeps_its_memory_and_stops_on_ctrl_c() -> None:
    # every line became a waiting task at once: the memory grew ~10 MB/s while stdin was read
    assert_streams_a_million_lines(["sandbox", "exec"], b'{"id": "x", "code": "print(1)"}\n')


def test_reward_verify_of_a_million_lines_keeps_its_memory_and_stops_on_ctrl_c() -> None:
    line = b'{"id": 1, "response": "so \\\\boxed{1,000}", "answer": "1000"}\n'
    assert_streams_a_million_lines(["reward", "verify"], line)


def assert_streams_a_million_lines(command: list[str], line: bytes) -> None:
    """`rstar2 COMMAND` fed `line` 10^6 times on stdin: results come, the RSS stays flat over
    5 s, and one SIGINT ends it within 5 s with exit code 130."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "rstar2.cli", "-q", *command],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None
    results: list[bytes] = []

    def feed() -> None:
        batch = line * 1000
        try:
            for _ in range(LINES // 1000):
                proc.stdin.write(batch)  # type: ignore[union-attr]
        except (BrokenPipeError, ValueError, OSError):
            pass  # stopped

    def drain() -> None:
        results.extend(proc.stdout)  # type: ignore[arg-type]

    threading.Thread(target=feed, daemon=True).start()
    threading.Thread(target=drain, daemon=True).start()
    try:
        deadline = time.monotonic() + 60
        while not results and time.monotonic() < deadline:
            assert proc.poll() is None
            time.sleep(0.1)
        assert results, "no result in 60 s"
        rss = []
        for _ in range(10):  # 5 s of reading and running
            rss.append(vm_rss_mb(proc.pid))
            time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        stopped = time.monotonic()
        proc.wait(timeout=30)
        took = time.monotonic() - stopped
    finally:
        proc.kill()
    assert max(rss) - rss[0] < 10, rss
    assert proc.returncode == 130 and took < 5, (proc.returncode, took)
    assert len(results) < LINES


def test_sim_run_of_a_million_steps_keeps_its_memory_and_stops_on_ctrl_c() -> None:
    # the run built every step's trajectories up front: ~4.7 KB a trajectory, 256 a step here
    proc = subprocess.Popen(
        [sys.executable, "-m", "rstar2.cli", "-q", "sim", "run", "--steps", str(10**6),
         "--prompts", "8", "--no-progress", "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        time.sleep(2)  # past its imports (no torch: well under a second on an idle machine)
        rss = []
        for _ in range(10):  # 5 s of the run
            assert proc.poll() is None, proc.communicate()
            rss.append(vm_rss_mb(proc.pid))
            time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        stopped = time.monotonic()
        _, err = proc.communicate(timeout=30)
        took = time.monotonic() - stopped
    finally:
        proc.kill()
    assert max(rss) - rss[0] < 10, rss
    assert (proc.returncode, "Traceback" in err) == (130, False) and took < 5, (took, err)
