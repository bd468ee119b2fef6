"""`rstar2 sandbox soak`: the HTTP service under load while its zygote and children are killed.

The soak starts `rstar2 sandbox serve --http 127.0.0.1:0` as its own process (the real service:
its event loop, its signal handling, its exit), then sends `requests` requests with at most
`in_flight` at a time, alternating code-judge's `POST /run` and SandboxFusion's `POST
/run_code`. Each request prints a marker unique to it (some first compute, some first sleep
0.3 s so that children are alive to be killed), so an answer is checked, not just counted:
- correct: the run succeeded and printed exactly its own marker;
- crossed: the output holds another request's marker (an answer delivered to the wrong caller);
- wrong: the run succeeded with any other output;
- an error, by kind: the API's own failure reason (code-judge's `reason`, SandboxFusion's
  `status`), "run_failed" (the child was killed under the run), or `http_<status>`;
- unanswered: no final answer within `deadline_s` (a 503/504 with Retry-After is retried after
  the time it names; a refused or dropped connection is counted and retried too);
  `unanswered_told_to_retry` counts those whose last answer was such a 503/504: the service
  was up but had no zygote (killed faster than it starts), not a lost request.

Meanwhile a fault schedule SIGKILLs, every `zygote_kill_every_s` (jittered), the zygote, and
for a `double_kill_share` of those also its replacement 0-300 ms after it appears (a third
within 50 ms: inside its start-up), and every `child_kill_every_s` a random request child. After
each zygote kill a probe measures the recovery time: until a fresh request is answered
correctly. At the end the service must still answer; then it gets SIGTERM, must drain and exit
0, and no process of its must be left.

`run_soak` returns one JSON-able report; `passed(report)` says whether it shows what the
service promises (0 wrong, crossed or unanswered, up at the end, exit 0, nothing left behind).

What it does not do: measure throughput for comparison (`rstar2 sandbox bench --http` does);
faults slow the service down on purpose.
"""

from __future__ import annotations

import json
import logging
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx2

from rstar2.config import to_dict
from rstar2.sandbox import proctree
from rstar2.sandbox.config import SandboxConfig

LISTENING = re.compile(r"listening on http://[^:]+:(\d+)")
MARKER = re.compile(r"soak-\d+-[0-9a-f]{6}")


@dataclass
class SoakConfig:
    requests: int = 2000
    """Requests to send (each answered, retried while the service says "retry")."""

    in_flight: int = 50
    """Requests outstanding at once."""

    zygote_kill_every_s: float = 3.0
    """Mean time between two zygote kills (0: never)."""

    double_kill_share: float = 0.5
    """Share of zygote kills whose replacement is killed again while it starts."""

    child_kill_every_s: float = 0.5
    """Mean time between two kills of a random request child (0: never)."""

    deadline_s: float = 60.0
    """How long one request may take, retries included, before it counts as unanswered."""

    drain_s: float = 5.0
    """The served process's `--drain-s`, checked by the SIGTERM at the end."""

    seed: int = 0


@dataclass
class _Tally:
    outcomes: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    retried: int = 0
    connection_errors: int = 0
    recovery_s: list[float] = field(default_factory=list)
    zygote_kills: int = 0
    start_kills: int = 0
    start_kills_within_50ms: int = 0
    child_kills: int = 0


class ServedProcess:
    """`rstar2 sandbox serve --http 127.0.0.1:0` in its own process; its log kept in memory."""

    def __init__(self, cfg: SandboxConfig, drain_s: float, workdir: Path) -> None:
        config = workdir / "sandbox.yaml"  # JSON is YAML: no TOML writer needed
        config.write_text(json.dumps({"sandbox": to_dict(cfg)}))
        argv = [sys.executable, "-m", "rstar2.cli", "sandbox", "serve", "--config", str(config)]
        argv += ["--http", "127.0.0.1:0", "--drain-s", str(drain_s)]
        self.proc = subprocess.Popen(
            argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=workdir
        )
        self.log: list[str] = []
        self._port: int | None = None
        self._ready = threading.Event()
        threading.Thread(target=self._read_log, daemon=True).start()

    def _read_log(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.log.append(line.rstrip("\n"))
            found = LISTENING.search(line)
            if found and self._port is None:
                self._port = int(found.group(1))
                self._ready.set()
        self._ready.set()  # it exited

    def port(self, timeout_s: float = 120.0) -> int:
        """The bound port, once the service listens; raises if it exits or takes too long."""
        self._ready.wait(timeout_s)
        if self._port is None:
            tail = "\n".join(self.log[-20:])
            raise RuntimeError(f"the sandbox service did not start:\n{tail}")
        return self._port

    def zygote(self, replacing: tuple[int, int] | None = None) -> tuple[int, int] | None:
        """The zygote's pid and parent; with `replacing`, those of a zygote killed before,
        its replacement only (`zygote_in`)."""
        old, old_parent = replacing if replacing is not None else (None, None)
        return zygote_in(_tree(self.proc.pid), self.proc.pid, old, old_parent)

    def children(self) -> list[int]:
        """The request children: `zygote.py` processes forked by the zygote."""
        tree = _tree(self.proc.pid)
        return [
            pid
            for pid, (parent, is_zygote) in tree.items()
            if is_zygote and tree.get(parent, (0, False))[1]
        ]

    def descendants(self) -> list[int]:
        return list(_tree(self.proc.pid))

    def stop(self, signum: int, timeout_s: float) -> int:
        """Send `signum`, wait for the exit; its code (-9 if it had to be killed)."""
        self.proc.send_signal(signum)
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return -9


def _tree(root: int) -> dict[int, tuple[int, bool]]:
    """Every live process below `root`: pid -> (parent, is it a Python running zygote.py: the
    zygote or one of its request children)."""
    parent_of = proctree.parents()
    below: dict[int, tuple[int, bool]] = {}
    for pid in proctree.descendants(root, parent_of):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue  # exited while we looked
        # bubblewrap's own command line names zygote.py too: only the Python counts
        is_zygote = not argv[0].endswith(b"bwrap") and any(a.endswith(b"zygote.py") for a in argv)
        below[pid] = (parent_of[pid], is_zygote)
    return below


def zygote_in(
    tree: dict[int, tuple[int, bool]], service: int, replacing: int | None, old_parent: int | None
) -> tuple[int, int] | None:
    """The zygote in `tree` (`_tree`'s map) and its parent: a `zygote.py` process whose parent
    is not one. With `replacing` (a killed zygote's pid, `old_parent` its parent), a
    replacement only: the killed zygote's request children look like a zygote for a few
    milliseconds, reparented to its bubblewrap (the init of its PID namespace, which dies with
    them), so a replacement has another parent, or, without bubblewrap, is the service's child
    and not the killed pid."""
    for pid, (parent, is_zygote) in tree.items():
        if not is_zygote or tree.get(parent, (0, False))[1] or pid == replacing:
            continue
        if old_parent is not None and parent == old_parent != service:
            continue  # an orphan of the killed zygote
        return pid, parent
    return None


def request_for(i: int, rng: random.Random) -> tuple[str, str, dict[str, object]]:
    """Request `i`: its marker, route and JSON body."""
    marker = f"soak-{i}-{rng.getrandbits(24):06x}"
    body = rng.choice(
        [
            f"print('{marker}')",
            f"x = sum(k * k for k in range(20000))\nprint('{marker}')",
            f"import time\ntime.sleep(0.3)\nprint('{marker}')",
        ]
    )
    if i % 2 == 0:
        return marker, "/run", {"type": "python", "solution": body}
    return marker, "/run_code", {"code": body, "language": "python", "run_timeout": 10}


def classify(marker: str, route: str, status: int, answer: Any) -> str:
    """ "correct", "crossed", "wrong", or an error kind, for one final answer."""
    if status != 200 or not isinstance(answer, dict):
        return f"http_{status}"
    if route == "/run":
        stdout, ok, kind = answer.get("stdout") or "", answer.get("run_success"), answer["reason"]
    else:
        run = answer.get("run_result") or {}
        stdout, ok = run.get("stdout") or "", answer.get("status") == "Success"
        kind = "" if answer.get("status") == "Failed" else answer.get("status", "")
        answer = run
    if any(m != marker for m in MARKER.findall(stdout + str(answer.get("stderr") or ""))):
        return "crossed"
    if ok:
        return "correct" if stdout == f"{marker}\n" else "wrong"
    return kind or "run_failed"


async def _one(client: httpx2.AsyncClient, i: int, cfg: SoakConfig, tally: _Tally) -> None:
    marker, route, body = request_for(i, random.Random(cfg.seed * 1_000_003 + i))
    deadline = time.monotonic() + cfg.deadline_s
    told_to_retry = False
    while time.monotonic() < deadline:
        try:
            response = await client.post(route, json=body)
        except httpx2.TransportError:
            tally.connection_errors += 1
            told_to_retry = False
            await anyio.sleep(0.1)
            continue
        told_to_retry = response.status_code in (503, 504) and "retry-after" in response.headers
        if told_to_retry:
            tally.retried += 1
            await anyio.sleep(min(float(response.headers["retry-after"]), 1.0))
            continue
        try:
            answer = response.json()
        except ValueError:
            answer = None
        outcome = classify(marker, route, response.status_code, answer)
        if outcome in ("correct", "crossed", "wrong"):
            tally.outcomes[outcome] += 1
        else:
            tally.outcomes["error"] += 1
            tally.errors[outcome] += 1
        return
    tally.outcomes["unanswered"] += 1
    tally.outcomes["unanswered_told_to_retry"] += told_to_retry


async def _prints(client: httpx2.AsyncClient, text: str) -> bool:
    """One `/run` of `print(text)`: did the service answer it correctly?"""
    try:
        r = await client.post("/run", json={"type": "python", "solution": f"print('{text}')"})
        return r.status_code == 200 and r.json().get("stdout") == f"{text}\n"
    except (httpx2.TransportError, ValueError):
        return False


async def _probe(client: httpx2.AsyncClient, since: float, tally: _Tally) -> None:
    """Time from a kill at `since` until a fresh request is answered correctly."""
    for k in range(10_000):
        if await _prints(client, f"soak-{10**9 + k}-{k % 0xFFFFFF:06x}"):
            tally.recovery_s.append(time.monotonic() - since)
            return
        await anyio.sleep(0.01)


def _kill(pid: int) -> bool:
    try:
        os.kill(pid, signal.SIGKILL)
        return True
    except ProcessLookupError:
        return False


async def _faults(
    served: ServedProcess,
    client: httpx2.AsyncClient,
    cfg: SoakConfig,
    rng: random.Random,
    tally: _Tally,
    tg: anyio.abc.TaskGroup,
) -> None:
    async def zygotes() -> None:
        while True:
            await anyio.sleep(cfg.zygote_kill_every_s * rng.uniform(0.5, 1.5))
            old = served.zygote()
            if old is None or not _kill(old[0]):
                continue
            tally.zygote_kills += 1
            tg.start_soon(_probe, client, time.monotonic(), tally)
            if rng.random() >= cfg.double_kill_share:
                continue
            delay = rng.uniform(0, 0.05) if rng.random() < 1 / 3 else rng.uniform(0, 0.3)
            with anyio.move_on_after(10):  # its replacement, as soon as it appears
                while True:
                    new = served.zygote(replacing=old)
                    while new is None:
                        await anyio.sleep(0.005)
                        new = served.zygote(replacing=old)
                    await anyio.sleep(delay)
                    if _kill(new[0]):
                        tally.start_kills += 1
                        tally.start_kills_within_50ms += delay < 0.05
                        break
                    old = new  # it died on its own meanwhile: the next one, then

    async def children() -> None:
        while True:
            await anyio.sleep(cfg.child_kill_every_s * rng.uniform(0.5, 1.5))
            alive = served.children()
            if alive and _kill(rng.choice(alive)):
                tally.child_kills += 1

    async with anyio.create_task_group() as faults:
        if cfg.zygote_kill_every_s > 0:
            faults.start_soon(zygotes)
        if cfg.child_kill_every_s > 0:
            faults.start_soon(children)


async def _still_up(client: httpx2.AsyncClient) -> bool:
    """The service answers a request correctly within 15 s."""
    with anyio.move_on_after(15):
        while not await _prints(client, "still up"):
            await anyio.sleep(0.1)
        return True
    return False


def _summary(values: list[float]) -> dict[str, float | int]:
    if not values:
        return {"n": 0}
    ordered = sorted(values)
    return {
        "n": len(ordered),
        "p50": round(ordered[len(ordered) // 2], 3),
        "max": round(ordered[-1], 3),
    }


async def run_soak(
    sandbox: SandboxConfig, cfg: SoakConfig, progress: Callable[[str], None]
) -> dict[str, Any]:
    """Everything `rstar2 sandbox soak` reports, as one JSON-able object."""
    rng = random.Random(cfg.seed)
    tally = _Tally()
    logging.getLogger("httpx2").setLevel(logging.WARNING)  # not a line per request
    with tempfile.TemporaryDirectory(prefix="rstar2-soak-") as workdir:
        served = ServedProcess(sandbox, cfg.drain_s, Path(workdir))
        try:
            port = await anyio.to_thread.run_sync(served.port)
            base = f"http://127.0.0.1:{port}"
            limits = httpx2.Limits(max_connections=cfg.in_flight + 4)
            start = time.monotonic()
            async with httpx2.AsyncClient(base_url=base, limits=limits, timeout=30.0) as client:
                await _load_under_faults(served, client, cfg, rng, tally, progress)
                wall_s = time.monotonic() - start
                up = await _still_up(client)
            leftover_before = served.descendants()
            exit_code = await anyio.to_thread.run_sync(
                served.stop, signal.SIGTERM, cfg.drain_s + 30
            )
            leftover = [p for p in leftover_before if proctree.running(p)]
        finally:
            if served.proc.poll() is None:
                served.proc.kill()
                served.proc.wait()
    return _report(cfg, tally, served.log, wall_s, up, exit_code, len(leftover))


async def _load_under_faults(
    served: ServedProcess,
    client: httpx2.AsyncClient,
    cfg: SoakConfig,
    rng: random.Random,
    tally: _Tally,
    progress: Callable[[str], None],
) -> None:
    """Sends `cfg.requests` requests, `cfg.in_flight` at once, while `_faults` kills processes;
    returns when every request is answered or given up, the faults stopped."""
    async with anyio.create_task_group() as tg:
        fault_scope = anyio.CancelScope()

        async def faults() -> None:
            with fault_scope:
                await _faults(served, client, cfg, rng, tally, tg)

        tg.start_soon(faults)
        slots = anyio.Semaphore(cfg.in_flight)

        async def one(i: int) -> None:
            async with slots:
                await _one(client, i, cfg, tally)

        async with anyio.create_task_group() as requests:
            for i in range(cfg.requests):
                await slots.acquire()  # no more than in_flight tasks exist
                slots.release()
                requests.start_soon(one, i)
                if (i + 1) % max(1, cfg.requests // 10) == 0:
                    progress(f"{i + 1}/{cfg.requests} sent; {dict(tally.outcomes)}")
        fault_scope.cancel()


def _report(
    cfg: SoakConfig,
    tally: _Tally,
    log: list[str],
    wall_s: float,
    up: bool,
    exit_code: int,
    processes_left: int,
) -> dict[str, Any]:
    """The soak's counts and the service's end state; its log's tail when it did not pass."""
    answered = cfg.requests - tally.outcomes["unanswered"]
    report = {
        "requests": cfg.requests,
        "in_flight": cfg.in_flight,
        "answered": answered,
        "correct": tally.outcomes["correct"],
        "crossed": tally.outcomes["crossed"],
        "wrong": tally.outcomes["wrong"],
        "unanswered": tally.outcomes["unanswered"],
        "unanswered_told_to_retry": tally.outcomes["unanswered_told_to_retry"],
        "errors": dict(sorted(tally.errors.items())),
        "retried_503_504": tally.retried,
        "connection_errors": tally.connection_errors,
        "zygote_kills": tally.zygote_kills,
        "kills_during_start": tally.start_kills,
        "kills_within_50ms_of_start": tally.start_kills_within_50ms,
        "child_kills": tally.child_kills,
        "recovery_s": _summary(tally.recovery_s),
        "wall_s": round(wall_s, 1),
        "up_at_end": up,
        "sigterm_exit_code": exit_code,
        "processes_left": processes_left,
        "tracebacks_logged": sum("Traceback (most recent call last)" in line for line in log),
    }
    if not passed(report):
        report["service_log_tail"] = log[-15:]
    return report


def passed(report: dict[str, Any]) -> bool:
    """The service kept its promises under the faults."""
    return (
        report["crossed"] == report["wrong"] == report["unanswered"] == 0
        and report["up_at_end"]
        and report["sigterm_exit_code"] == 0
        and report["processes_left"] == 0
    )
