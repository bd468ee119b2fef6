"""One request inside the zygote: its record (`Job`) and its forked child (`run_child`).

The child confines itself (its own process group, fds 0-3 only, a fresh tmpfs, rlimits, the
request's uid, the seccomp filter), runs the cell (`runner.run_cell`), writes one status byte on
fd 3 and exits; a failure while confining is status "setup" and exit 125, never a return into
the zygote.

What it does not do: fork, watch or reap the child, or read its output (`zygote.py`).
Standard library only: it runs inside the sandbox, next to `zygote.py`.
"""

from __future__ import annotations

import fcntl
import math
import os
import signal
import sys
import time
from typing import Any, NoReturn

if __package__:  # imported on the host
    from . import confinement, runner
else:  # imported by zygote.py run as a script inside the sandbox
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import confinement  # type: ignore[no-redef]
    import runner  # type: ignore[no-redef]


class Job:
    """One request from fork to result."""

    __slots__ = (
        "seq", "code", "stdin", "timeout_s", "memory_mb", "pid", "uid", "workdir", "started",
        "deadline", "out", "err", "status", "reason", "wait_status", "truncated", "fds", "wall_s",
    )  # fmt: skip

    def __init__(self, frame: dict[str, Any]) -> None:
        self.seq: int = frame["seq"]
        self.code: str = frame["code"]
        self.stdin: str = frame.get("stdin", "")
        self.timeout_s: float = frame["timeout_s"]
        self.memory_mb: int = frame["memory_mb"]
        self.pid = 0
        self.uid: int | None = None
        self.workdir = ""
        self.started = self.deadline = self.wall_s = 0.0
        self.out = bytearray()
        self.err = bytearray()
        self.status = b""
        self.reason = ""
        self.wait_status: int | None = None
        self.truncated = False
        self.fds: dict[int, str] = {}


def run_child(
    job: Job, stdin_fd: int, writers: list[int], cfg: dict[str, Any], flt: Any
) -> NoReturn:
    """The forked child: confine itself, run the cell, report one status byte, exit."""
    try:
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGPIPE, signal.SIGTERM):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # an oversized write raises EFBIG instead
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.setpgid(0, 0)
        # Move the request's fds out of the way first, then onto 0-3 (a plain dup2 in a row
        # could overwrite a source that happens to sit on one of the targets).
        high = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 64) for fd in [stdin_fd, *writers]]
        for target, fd in enumerate(high):
            os.dup2(fd, target)
        os.closerange(4, 1 << 20)
        if cfg["tmpfs"]:
            confinement.fresh_tmpfs("/tmp", cfg["tmpfs_mb"], job.uid)
        limits = confinement.Limits(
            cpu_s=max(1, math.ceil(job.timeout_s)),
            memory_bytes=confinement.address_space_bytes() + (job.memory_mb << 20),
            file_bytes=cfg["file_size_mb"] << 20,
            open_files=cfg["max_open_files"],
            processes=cfg["max_processes"],
        )
        confinement.apply_limits(limits)
        if job.uid is not None:
            confinement.drop_privileges(job.uid)
        os.chdir(job.workdir or "/tmp")  # as the request's uid: its tmpfs is mode 0700
        if flt is not None:
            flt.load()
    except BaseException as e:  # noqa: BLE001 - the child must never return into the zygote
        try:
            os.write(2, f"sandbox setup failed: {e!r}\n".encode())
            os.write(3, runner.STATUS_SETUP)
        finally:
            os._exit(125)
    exit_code = 1
    try:
        if cfg.get("extra_latency_s", 0.0) > 0:
            time.sleep(cfg["extra_latency_s"])  # what-if profiling: slower tool code
        exit_code = _run_confined(job)
    finally:
        os._exit(exit_code)


def _run_confined(job: Job) -> int:
    code = job.code
    job.code = job.stdin = ""
    sys.stdin = open(0, encoding="utf-8", errors="replace", closefd=False)
    sys.stdout = open(1, "w", encoding="utf-8", errors="backslashreplace", closefd=False)
    sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace", closefd=False)
    sys.stdout.reconfigure(line_buffering=True)
    status, exit_code = runner.run_cell(code)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass  # the cell closed its own stream
    try:
        os.write(3, status)
    except OSError:
        pass  # the cell closed fd 3: the zygote falls back to the exit code
    return exit_code
