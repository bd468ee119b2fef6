"""The warm zygote: imports the preload modules once, then forks one confined child per request.

Runs as a script inside the sandbox (`python -I -S zygote.py CONFIG_JSON`), talking to its
executor over two private pipes in length-prefixed JSON frames (`framing.py`):
- in:  {"op": "run", "seq", "code", "stdin", "timeout_s", "memory_mb"} and {"op": "cancel", "seq"}
- out: {"op": "ready", "layers", "errors", "pid"} once, then one {"op": "result", "seq", ...}
  per run request, in completion order. End of input kills every child and exits.

One single-threaded selector loop owns everything: request input, each child's stdout/stderr/
status pipes, SIGCHLD (through a wakeup fd) and the wall-clock deadlines. A request finishes
when its first process has exited and every process of its group is gone (the zygote is a child
subreaper, so orphans come back to it and are reaped); only then is its result sent and its uid
slot reused, so no process outlives its request. With `extra_latency_s` in its config (what-if
profiling, see `SandboxConfig`), every child sleeps that long before running its code.

One request's forked child (confining itself and running the cell) is in `request_child.py`;
the zygote's set-up before its loop (preloading and warming modules, probing the confinement
layers) in `zygote_setup.py`.

What it does not do: admission control or queue bounds (the executor admits at most a few
requests more than `concurrency`; extra ones wait here in a FIFO).
Standard library only (plus what the preload list names).
"""

from __future__ import annotations

import collections
import gc
import heapq
import json
import os
import selectors
import shutil
import signal
import sys
import tempfile
import time
from typing import Any

if __package__:  # imported on the host (tests of the pure parts)
    from . import confinement, framing, runner
    from .request_child import Job, run_child
    from .zygote_setup import preload, probe_layers
else:  # run as a script inside the sandbox, next to its sibling modules
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import confinement  # type: ignore[no-redef]
    import framing  # type: ignore[no-redef]
    import runner  # type: ignore[no-redef]
    from request_child import Job, run_child  # type: ignore[no-redef]
    from zygote_setup import preload, probe_layers  # type: ignore[no-redef]

_READ_CHUNK = 65536


def classify(reason: str, status_byte: bytes, wait_status: int) -> tuple[str, int]:
    """Result status and exit code of a finished request (exit code is -N for signal N)."""
    exit_code = os.waitstatus_to_exitcode(wait_status)
    if reason:
        return reason, exit_code
    if status_byte == runner.STATUS_MEMORY:
        return "memory", exit_code
    if exit_code < 0:
        return ("timeout" if -exit_code == signal.SIGXCPU else "killed"), exit_code
    if status_byte in (runner.STATUS_ERROR, runner.STATUS_SETUP) or exit_code != 0:
        return "error", exit_code
    return "ok", exit_code


class Zygote:
    def __init__(self, cfg: dict[str, Any], in_fd: int, out_fd: int, flt: Any) -> None:
        self.cfg = cfg
        self.in_fd, self.out_fd, self.flt = in_fd, out_fd, flt
        self.frames = framing.FrameBuffer()
        self.sel = selectors.DefaultSelector()
        self.pending: collections.deque[Job] = collections.deque()
        self.by_seq: dict[int, Job] = {}
        self.by_pid: dict[int, Job] = {}
        self.draining: list[Job] = []
        self.deadlines: list[tuple[float, int]] = []
        n = cfg["concurrency"]
        base = cfg.get("uid_base")
        self.free_uids: collections.deque[int | None] = collections.deque(
            [base + i for i in range(2 * n)] if base is not None else [None] * n
        )
        self.running = 0
        self.wake_r, wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        # a Ctrl-C reaches the terminal's whole process group; the executor owns stopping us
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        self.sel.register(in_fd, selectors.EVENT_READ, "in")
        self.sel.register(self.wake_r, selectors.EVENT_READ, "wake")

    # -- the loop ------------------------------------------------------------------------

    def serve(self) -> None:
        while True:
            for key, _ in self.sel.select(self._select_timeout()):
                if key.data == "in":
                    if not self._on_input():
                        return
                elif key.data == "wake":
                    self._drain_wakeups()
                else:
                    self._on_output(key.fd, key.data)
            self._reap()
            self._expire(time.monotonic())

    def _select_timeout(self) -> float | None:
        if self.draining:
            return 0.01
        if not self.deadlines:
            return None
        return max(0.0, self.deadlines[0][0] - time.monotonic())

    def _on_input(self) -> bool:
        data = os.read(self.in_fd, 1 << 20)
        if not data:
            return False
        for frame in self.frames.feed(data):
            if frame.get("op") == "run":
                self.pending.append(Job(frame))
            elif frame.get("op") == "cancel":
                self._cancel(frame["seq"])
        self._start_pending()
        return True

    def _drain_wakeups(self) -> None:
        try:
            while os.read(self.wake_r, 4096):
                pass
        except BlockingIOError:
            pass

    def _cancel(self, seq: int) -> None:
        job = self.by_seq.get(seq)
        if job is not None:
            self._kill(job, "killed")
            return
        for queued in self.pending:
            if queued.seq == seq:
                self.pending.remove(queued)
                queued.reason = "killed"
                self._send(queued, "killed", -signal.SIGKILL)
                return

    # -- starting a child ----------------------------------------------------------------

    def _start_pending(self) -> None:
        while self.pending and self.running < self.cfg["concurrency"] and self.free_uids:
            job = self.pending.popleft()
            job.uid = self.free_uids.popleft()
            try:
                self._spawn(job)
            except OSError as e:  # out of fds or processes: the request fails, the loop goes on
                self.free_uids.append(job.uid)
                job.err += f"sandbox could not start the request: {e}".encode()
                self._send(job, "error", -1, infra="spawn_failed")
                continue
            self.running += 1

    def _spawn(self, job: Job) -> None:
        stdin_fd = os.memfd_create("stdin")
        os.write(stdin_fd, job.stdin.encode("utf-8", "surrogateescape"))
        os.lseek(stdin_fd, 0, os.SEEK_SET)
        pipes = [os.pipe() for _ in range(3)]
        if not self.cfg["tmpfs"]:
            job.workdir = tempfile.mkdtemp(prefix="req-", dir="/tmp")
            if job.uid is not None:
                os.chown(job.workdir, job.uid, job.uid)
        job.started = time.monotonic()
        pid = os.fork()
        if pid == 0:
            self._forget_others()
            run_child(job, stdin_fd, [w for _, w in pipes], self.cfg, self.flt)
        try:
            os.setpgid(pid, pid)  # also done by the child: whichever runs first wins the race
        except (ProcessLookupError, PermissionError):
            pass  # the child already exited, or already called setpgid itself
        job.pid = pid
        os.close(stdin_fd)
        for (r, w), name in zip(pipes, ("out", "err", "status"), strict=True):
            os.close(w)
            os.set_blocking(r, False)
            job.fds[r] = name
            self.sel.register(r, selectors.EVENT_READ, job)
        self.by_seq[job.seq] = job
        self.by_pid[pid] = job
        job.deadline = job.started + job.timeout_s
        heapq.heappush(self.deadlines, (job.deadline, job.seq))

    def _forget_others(self) -> None:
        """In a new child: drop every reference to other requests (their code and stdin).

        Their bytes may still sit in freed heap memory until overwritten; the child cannot
        reach them through Python objects.
        """
        self.pending.clear()
        self.by_seq.clear()
        self.by_pid.clear()
        self.draining.clear()
        self.frames = framing.FrameBuffer()

    # -- watching children ---------------------------------------------------------------

    def _on_output(self, fd: int, job: Job) -> bool:
        """Read one chunk from a child's pipe; False when there was nothing to read."""
        try:
            data = os.read(fd, _READ_CHUNK)
        except BlockingIOError:
            return False
        if not data:
            self._close_fd(job, fd)
            return False
        kind = job.fds[fd]
        if kind == "status":
            job.status = job.status or data[:1]
            return True
        room = self.cfg["max_output_bytes"] - len(job.out) - len(job.err)
        (job.out if kind == "out" else job.err).extend(data[: max(room, 0)])
        if len(data) > room:
            job.truncated = True
            self._kill(job, "output_limit")
        return True

    def _close_fd(self, job: Job, fd: int) -> None:
        self.sel.unregister(fd)
        os.close(fd)
        del job.fds[fd]

    def _kill(self, job: Job, reason: str) -> None:
        if job.wait_status is None and not job.reason:
            job.reason = reason
        try:
            os.killpg(job.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def _expire(self, now: float) -> None:
        while self.deadlines and self.deadlines[0][0] <= now:
            _, seq = heapq.heappop(self.deadlines)
            job = self.by_seq.get(seq)
            if job is not None and job.wait_status is None:
                self._kill(job, "timeout")

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            job = self.by_pid.pop(pid, None)
            if job is not None:  # the request's first process; others are reaped orphans
                job.wait_status = status
                job.wall_s = time.monotonic() - job.started
                self.draining.append(job)
        self.draining = [job for job in self.draining if not self._try_finish(job)]

    def _try_finish(self, job: Job) -> bool:
        """Collect the last output and kill leftovers; True once no process of the job remains."""
        for fd in list(job.fds):
            while fd in job.fds and not job.truncated and self._on_output(fd, job):
                pass
        try:
            os.killpg(job.pid, signal.SIGKILL)
            return False  # some process of the group is still alive (or an unreaped zombie)
        except ProcessLookupError:
            pass
        for fd in list(job.fds):
            self._close_fd(job, fd)
        assert job.wait_status is not None
        status, exit_code = classify(job.reason, job.status, job.wait_status)
        self._send(job, status, exit_code)
        del self.by_seq[job.seq]
        self.running -= 1
        if job.workdir:
            shutil.rmtree(job.workdir, ignore_errors=True)
        self.free_uids.append(job.uid)
        self._start_pending()
        return True

    def _send(self, job: Job, status: str, exit_code: int, infra: str = "") -> None:
        """Report one finished request; `infra` names a failure of the sandbox itself (the
        executor copies it into `ExecResult.infra`)."""
        result = {
            "op": "result",
            "seq": job.seq,
            "status": status,
            "stdout": job.out.decode("utf-8", "replace"),
            "stderr": job.err.decode("utf-8", "replace"),
            "exit_code": exit_code,
            "wall_s": round(job.wall_s, 6),
            "truncated": job.truncated,
        }
        if infra:
            result["infra"] = infra
        _write_all(self.out_fd, framing.pack(result))

    def shutdown(self) -> None:
        for job in list(self.by_seq.values()):
            self._kill(job, "killed")


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def main(argv: list[str]) -> int:
    cfg = json.loads(argv[1])
    for path in cfg.get("site_paths", []):
        sys.path.append(path)
    # The frame channel gets private fds; 0 and 1 are pointed away so that nothing a module
    # prints at import, and no child, can ever write into the channel.
    in_fd, out_fd = os.dup(0), os.dup(1)
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    os.dup2(2, 1)
    errors = preload(cfg["preload"], cfg["warmup"])
    seccomp = confinement.load_seccomp() if cfg["seccomp"] else None
    flt = confinement.build_syscall_filter(seccomp) if seccomp is not None else None
    layers = probe_layers(cfg, flt)
    gc.collect()
    gc.freeze()  # keep the warm heap's pages shared with children (no GC writes to them)
    _write_all(out_fd, framing.pack({"op": "ready", "layers": layers, "errors": errors}))
    zygote = Zygote(cfg, in_fd, out_fd, flt)
    try:
        zygote.serve()
    finally:
        zygote.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
