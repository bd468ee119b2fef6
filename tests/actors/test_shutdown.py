"""SIGTERM / SIGINT stop a launched graph cleanly: no process or ipc socket file is left."""

from __future__ import annotations

import glob
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from rstar2.actors.graph import TMP_PREFIX

GRAPH = """
[graph]
name = "{name}"
edges = ["source.out -> sink.in"]

[[graph.actors]]
name = "source"
cls = "rstar2.actors.demo:Source"
params = {{ n = 1000000000 }}
process = "producer"

[[graph.actors]]
name = "sink"
cls = "rstar2.actors.demo:SlowSink"
params = {{ n = 1000000000, delay_s = 0.001 }}
process = "consumer"
"""


def children_of(pid: int) -> set[int]:
    out = set()
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            fields = Path(stat).read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.add(int(Path(stat).parent.name))
    return out


def wait_for(cond, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return False


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signal_stops_graph_and_leaves_nothing_behind(tmp_path: Path, signum: int) -> None:
    name = f"sigtest{os.getpid()}{int(signum)}"
    cfg = tmp_path / "graph.toml"
    cfg.write_text(GRAPH.format(name=name))
    proc = subprocess.Popen(
        [sys.executable, "-m", "rstar2.cli", "launch", str(cfg)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    pattern = os.path.join(tempfile.gettempdir(), f"{TMP_PREFIX}{name}-*")
    try:
        # Running = both graph processes spawned and the ipc sockets bound.
        assert wait_for(
            lambda: len(children_of(proc.pid)) >= 2 and glob.glob(pattern + "/*.sock"), 60
        )
        children = children_of(proc.pid)
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signum, err  # stopped by a signal: 130 or 143, as a shell says
    assert "signal" in err
    assert not glob.glob(pattern), "graph temp dir (ipc socket files) left behind"
    # The graph's processes are joined before launch exits; multiprocessing's resource
    # tracker (also a child) exits when it sees launch gone: give it a moment.
    assert wait_for(lambda: not any(Path(f"/proc/{c}").exists() for c in children), 10), (
        "child process left behind"
    )
