"""scripts/sandbox_call_cost.py: a sandbox call's CPU by process, on a real executor."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.script_module import load_script

sandbox_call_cost = load_script("sandbox_call_cost")


@pytest.mark.slow
def test_the_calls_cpu_is_split_between_caller_zygote_and_children(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """100 calls: all answered, and each side's CPU counted (a child's only once the zygote
    reaped it, which it has by the time the call is answered)."""
    assert sandbox_call_cost.main(["--calls", "100", "--concurrency", "2", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert (got["calls"], got["concurrency"], got["failed"]) == (100, 2, 0)
    assert got["calls_per_s"] > 0 and got["caller_ms"] > 0
    assert got["zygote_ms"] > 0 and got["children_ms"] > 0, got
    assert got["children_faults"] > 0, got  # a child writes at least its stack's pages
    assert any(p["own_ms"] == got["zygote_ms"] for p in got["processes"])


_MEASURED = """
import os, resource, subprocess, sys, time
subprocess.run([sys.executable, "-c",
    "import time\\nt = time.process_time()\\nwhile time.process_time() - t < 0.5: pass"])
t = time.process_time()
while time.process_time() - t < 0.1:
    pass
times = os.times()
own = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
reaped = resource.getrusage(resource.RUSAGE_CHILDREN).ru_minflt
print(times.user + times.system, times.children_user + times.children_system, own, reaped,
      flush=True)
sys.stdin.read()
"""


def test_a_processes_cpu_and_faults_are_read_from_the_right_fields() -> None:
    """`proc_cpu` of an idle process matches what the kernel told that process itself through
    times() and getrusage(): its own CPU, its reaped child's, and both page-fault counts. Its
    child was busy for longer than it was, so the fields read one place off are caught."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _MEASURED], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        told = [float(x) for x in proc.stdout.readline().split()]
        got = sandbox_call_cost.proc_cpu(proc.pid)
    finally:
        proc.communicate("")
    tick = 1 / sandbox_call_cost.TICK
    assert got[0] == pytest.approx(told[0], abs=2 * tick), (got, told)
    assert got[1] == pytest.approx(told[1], abs=2 * tick), (got, told)
    assert told[1] > told[0] + 0.2  # the child's CPU and its own are told apart
    assert told[2] <= got[2] <= told[2] + 50, (got, told)  # printing faults in a few pages
    assert got[3] == told[3], (got, told)


def test_bad_counts_are_refused() -> None:
    with pytest.raises(SystemExit):
        sandbox_call_cost.main(["--calls", "0"])
