"""The private temp folders of running graphs: their names, who owns them, and sweeping the
folders that killed runs left behind.

Every graph (every node of a multi-host graph) keeps its ipc socket files in one folder,
`<tmp>/rstar2-graph-<name>-<pid>-<random>`, where `<pid>` is the process that runs the graph.
The folder also holds `owner.json` (pid, start time, working directory, command line, and the
run directory when the graph works for one) for `rstar2 top` to tell graphs apart.

A run that is killed (SIGKILL, a lost machine) cannot remove its folder. Such a folder is
*stale* when its owner process is gone (`os.kill(pid, 0)` fails with ProcessLookupError), or,
for a folder named before the pid was part of the name, when nothing listens on its
`stats.sock` and the folder is older than `LEGACY_GRACE_S`. `sweep_stale_dirs()` removes the
stale folders of this user (graphs call it at start, and `rstar2 top` before it attaches), so
`top` never waits on a socket nobody answers.

What it does not do: touch folders of other users, or a folder whose owner is alive (even if
the pid has been reused by another program: it is left alone, and `top` skips its endpoint
when nothing listens on it).
"""

from __future__ import annotations

import errno
import glob
import json
import logging
import os
import shutil
import socket
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

import zmq

from rstar2.config import UsageError

log = logging.getLogger(__name__)

TMP_PREFIX = "rstar2-graph-"
OWNER_FILE = "owner.json"
STATS_SOCKET = "stats.sock"
LONGEST_SOCKET = "control.sock"
"""The longest socket file name a graph folder holds (the others: `stats.sock`, `<n>.sock`)."""
IPC_PATH_MAX = int(getattr(zmq, "IPC_PATH_MAX_LEN", 0) or 103)
"""The longest ipc socket path (`sockaddr_un.sun_path` less its NUL: 107 on Linux, 103 on
macOS, which is also the fallback where zmq does not say)."""
LEGACY_GRACE_S = 60.0
"""A folder without a pid in its name is only swept this long after it was last changed."""


@dataclass(frozen=True)
class GraphDir:
    """One graph's temp folder, as read from its name and `owner.json`."""

    path: str
    name: str
    """The graph's name (`graph.name`)."""
    pid: int | None
    """The process running the graph (None: a folder named by an older rstar2)."""
    owner: dict[str, Any] = field(default_factory=dict)
    """`owner.json`: pid, started (unix time), cwd, argv, run_dir; empty when unreadable."""

    @property
    def stats_endpoint(self) -> str:
        return f"ipc://{os.path.join(self.path, STATS_SOCKET)}"

    @property
    def run_dir(self) -> str:
        return str(self.owner.get("run_dir") or "")


def make_graph_dir(name: str, run_dir: str = "") -> str:
    """Create this process's folder for graph `name` and write its `owner.json`.

    Raises UsageError when its socket paths would be too long for a unix socket (a long TMPDIR
    or graph name): zmq would otherwise fail at the first bind, deep in the graph's start."""
    prefix = f"{TMP_PREFIX}{name}-{os.getpid()}-"
    check_socket_room(tempfile.gettempdir(), prefix)
    path = tempfile.mkdtemp(prefix=prefix)
    owner = {
        "pid": os.getpid(),
        "started": time.time(),
        "cwd": os.getcwd(),
        "argv": sys.argv,
        "run_dir": run_dir,
    }
    with open(os.path.join(path, OWNER_FILE), "w") as f:
        json.dump(owner, f)
    return path


def check_socket_room(tmp: str, prefix: str) -> None:
    """Raise UsageError unless a graph folder `<tmp>/<prefix><8 random characters>` leaves room
    for its longest socket path."""
    folder = os.path.join(tmp, prefix + "x" * 8)  # mkdtemp's names end in 8 characters
    longest = len(os.path.join(folder, LONGEST_SOCKET).encode())
    if longest > IPC_PATH_MAX:
        raise UsageError(
            f"the temp directory {tmp} is too long for the graph's ipc sockets: their paths "
            f"({folder}/{LONGEST_SOCKET}, {longest} bytes) may have at most {IPC_PATH_MAX} "
            f"bytes; set TMPDIR to a directory at least {longest - IPC_PATH_MAX} characters "
            f"shorter (TMPDIR=/tmp, say), or give the graph a shorter name"
        )


def parse_graph_dir(path: str) -> GraphDir:
    """Name and owner of a graph folder, from its name (`<name>-<pid>-<random>`, or the older
    `<name>-<random>`) and its `owner.json`."""
    folder = os.path.basename(path.rstrip("/")).removeprefix(TMP_PREFIX)
    parts = folder.rsplit("-", 2)
    if len(parts) == 3 and parts[1].isdigit():
        name, pid = parts[0], int(parts[1])
    else:
        name, pid = folder.rsplit("-", 1)[0] if "-" in folder else folder, None
    return GraphDir(path, name, pid, _read_owner(path))


def _read_owner(path: str) -> dict[str, Any]:
    try:
        with open(os.path.join(path, OWNER_FILE)) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def graph_dirs(tmp: str | None = None) -> list[GraphDir]:
    """Every graph folder in the temp directory (running or stale), sorted by path."""
    pattern = os.path.join(tmp or tempfile.gettempdir(), f"{TMP_PREFIX}*")
    return [parse_graph_dir(p) for p in sorted(glob.glob(pattern)) if os.path.isdir(p)]


def process_alive(pid: int) -> bool:
    """True when a process with this pid exists (another user's process counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def listening(sock_path: str) -> bool:
    """True when a process accepts connections on the unix socket file `sock_path` (a socket
    file whose process died refuses at once, where a ZeroMQ connect would wait and retry)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.settimeout(0.5)
        s.connect(sock_path)
    except OSError as e:
        if e.errno not in (errno.ECONNREFUSED, errno.ENOENT, errno.ENOTSOCK, None):
            log.debug("probing %s: %s", sock_path, e)
        return False
    finally:
        s.close()
    return True


def is_stale(d: GraphDir, now: float | None = None) -> bool:
    """The folder's graph is gone (see the module docstring)."""
    if d.pid is not None:
        return not process_alive(d.pid)
    try:
        age = (time.time() if now is None else now) - os.stat(d.path).st_mtime
    except FileNotFoundError:
        return False  # removed meanwhile: nothing to sweep
    return age > LEGACY_GRACE_S and not listening(os.path.join(d.path, STATS_SOCKET))


def sweep_stale_dirs(tmp: str | None = None) -> list[str]:
    """Remove the stale graph folders owned by this user; returns the paths removed."""
    removed = []
    uid = os.getuid()
    for d in graph_dirs(tmp):
        try:
            if os.stat(d.path).st_uid != uid:
                continue
        except FileNotFoundError:
            continue
        if is_stale(d):
            shutil.rmtree(d.path, ignore_errors=True)
            removed.append(d.path)
    if removed:
        log.info("removed %d stale graph folder(s) of killed runs", len(removed))
    return removed


def running_graphs(tmp: str | None = None) -> list[GraphDir]:
    """Graph folders whose stats socket answers (for `rstar2 top`)."""
    return [d for d in graph_dirs(tmp) if listening(os.path.join(d.path, STATS_SOCKET))]
