"""Graph temp folders: named with their owner's pid, and swept when that process is dead."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from rstar2.actors.graph import run_graph_blocking
from rstar2.actors.graph_config import graph_config
from rstar2.actors.graph_dirs import (
    IPC_PATH_MAX,
    LEGACY_GRACE_S,
    LONGEST_SOCKET,
    TMP_PREFIX,
    graph_dirs,
    make_graph_dir,
    parse_graph_dir,
    sweep_stale_dirs,
)
from rstar2.config import UsageError


def dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def folder(tmp: Path, name: str, age_s: float = 0.0) -> Path:
    path = tmp / f"{TMP_PREFIX}{name}"
    path.mkdir()
    (path / "0.sock").write_bytes(b"")  # stands for a socket file left behind
    if age_s:
        t = time.time() - age_s
        os.utime(path, (t, t))
    return path


def test_only_folders_whose_owner_is_dead_are_swept(tmp_path: Path) -> None:
    stale = folder(tmp_path, f"train-{dead_pid()}-abc123")
    mine = folder(tmp_path, f"train-{os.getpid()}-def456")
    old_legacy = folder(tmp_path, "demo-x1y2z3", age_s=LEGACY_GRACE_S + 10)
    new_legacy = folder(tmp_path, "demo-q1w2e3")
    removed = sweep_stale_dirs(str(tmp_path))
    assert sorted(removed) == sorted([str(stale), str(old_legacy)])
    assert mine.exists() and new_legacy.exists()
    assert not stale.exists() and not old_legacy.exists()


def test_a_legacy_folder_with_a_listener_is_kept(short_tmp: Path) -> None:
    live = folder(short_tmp, "demo-a1b2c3", age_s=LEGACY_GRACE_S + 10)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        server.bind(str(live / "stats.sock"))
        server.listen()
        os.utime(live, (time.time() - LEGACY_GRACE_S - 10,) * 2)
        assert sweep_stale_dirs(str(short_tmp)) == []
    finally:
        server.close()
    assert sweep_stale_dirs(str(short_tmp)) == [str(live)]  # nothing listens any more


def test_folder_names_and_owners() -> None:
    d = parse_graph_dir("/tmp/rstar2-graph-synthetic-sandbox-4242-k2_j3")
    assert (d.name, d.pid) == ("synthetic-sandbox", 4242)
    d = parse_graph_dir("/tmp/rstar2-graph-synthetic-sandbox-k2j3")
    assert (d.name, d.pid) == ("synthetic-sandbox", None)


GRAPH = {
    "name": "gd",
    "edges": ["source.out -> sink.in"],
    "actors": [
        {"name": "source", "cls": "rstar2.actors.demo:Source", "params": {"n": 5}},
        {"name": "sink", "cls": "rstar2.actors.demo:Sink", "params": {"n": 5}},
    ],
}


def test_a_graph_sweeps_stale_folders_at_start_and_removes_its_own(
    short_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tmp = short_tmp  # ipc socket paths are limited to ~100 characters
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    stale = folder(tmp, f"gd-{dead_pid()}-abc123")
    result = run_graph_blocking(graph_config(GRAPH), handle_signals=False, run_dir="runs/gd")
    assert result.ok
    assert not stale.exists()
    assert os.listdir(tmp) == []  # its own folder is gone too


@pytest.mark.parametrize("over", [0, 1])
def test_a_temp_directory_too_long_for_the_sockets_is_a_clear_error(
    short_tmp: Path, monkeypatch: pytest.MonkeyPatch, over: int
) -> None:
    # a temp directory of the longest length the graph's sockets allow runs the graph (zmq
    # binds them), one character more stops it before any folder is made, naming TMPDIR
    folder_and_socket = len(f"/{TMP_PREFIX}gd-{os.getpid()}-12345678/{LONGEST_SOCKET}")
    room = IPC_PATH_MAX - folder_and_socket - len(str(short_tmp)) - 1  # -1: the "/" before it
    tmp = short_tmp / ("d" * (room + over))
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    if over:
        with pytest.raises(UsageError, match=r"too long for the graph's ipc sockets.*TMPDIR"):
            run_graph_blocking(graph_config(GRAPH), handle_signals=False)
    else:
        assert run_graph_blocking(graph_config(GRAPH), handle_signals=False).ok
    assert os.listdir(tmp) == []


def test_a_new_folder_names_its_owner(short_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(short_tmp))
    d = parse_graph_dir(make_graph_dir("demo-x", run_dir="runs/r1"))
    assert (d.name, d.pid, d.run_dir) == ("demo-x", os.getpid(), "runs/r1")
    assert d.owner["argv"] == sys.argv and graph_dirs(str(short_tmp)) == [d]
    assert sweep_stale_dirs(str(short_tmp)) == []  # its owner (this process) is alive
