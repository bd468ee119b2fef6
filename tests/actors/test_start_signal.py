"""Ctrl-C while a multi-process graph starts: the parent reports, the children say nothing.

The Ctrl-C is sent to the whole process group (as a terminal does) as soon as both children
exist, while they still import rstar2 (before `child_main` runs and ignores SIGINT)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.actors.test_shutdown import GRAPH, children_of, wait_for


@pytest.mark.slow
@pytest.mark.parametrize("attempt", [0, 1, 2])
def test_ctrl_c_during_start_up_prints_no_child_traceback(tmp_path: Path, attempt: int) -> None:
    cfg = tmp_path / "graph.toml"
    cfg.write_text(GRAPH.format(name=f"ctrlc{os.getpid()}{attempt}"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "rstar2.cli", "launch", str(cfg)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert wait_for(lambda: len(children_of(proc.pid)) >= 2, 60)
        # Past the parent's few milliseconds with SIGINT ignored around each start (see
        # `start_child`); the children take most of a second to import.
        time.sleep(0.1)
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert proc.returncode == 130 and "signal" in err, err
