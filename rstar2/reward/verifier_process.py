"""Parent-side handle of one verifier worker process (see `verify_worker`).

`VerifierProcess.start()` launches `python -m rstar2.reward.verify_worker` as a fresh
interpreter (nothing inherited but the environment: the equivalent of a multiprocessing "spawn"
start) and waits for its VerifierReady frame. `request()` sends one VerifyRequest and reads the
reply; a worker that exits or breaks the protocol raises `VerifierDied`. `kill()` ends it.

It works under any anyio backend (asyncio or trio). It does not time out requests or replace
dead workers: the pool (`reward_pool`) owns those decisions, and a handle whose request was
cancelled or timed out must be killed, never reused (its stream may hold a late reply).
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

import anyio
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream

from rstar2.wire import VerifierReady, VerifyReply, VerifyRequest, WireError, decode, encode

HEADER = struct.Struct(">I")  # same framing as verify_worker: 4-byte big-endian length
MAX_FRAME = 16 * 1024 * 1024
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])


class VerifierDied(RuntimeError):
    """The worker process exited, or sent something that is not the expected frame."""


class VerifierProcess:
    """One running worker; use `await VerifierProcess.start(...)`."""

    def __init__(self, process: Process, pid: int) -> None:
        self._process = process
        assert process.stdout is not None
        self._reader = BufferedByteReceiveStream(process.stdout)
        self.pid = pid

    @classmethod
    async def start(cls, memory_mb: int, start_timeout_s: float) -> VerifierProcess:
        """Launch a worker and wait until it is ready (VerifierDied if it is not in time)."""
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [_PACKAGE_ROOT, env.get("PYTHONPATH")]))
        command = [sys.executable, "-m", "rstar2.reward.verify_worker"]
        command += ["--memory-mb", str(memory_mb)]
        # a session of its own: a Ctrl-C at the terminal reaches the whole foreground process
        # group, and a worker still starting (interpreter, sympy) printed a KeyboardInterrupt
        # traceback; the pool stops its workers (kill, or EOF on stdin should it die first)
        process = await anyio.open_process(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=None, env=env,
            start_new_session=True,
        )  # fmt: skip
        handle = cls(process, process.pid)
        try:
            with anyio.fail_after(start_timeout_s):
                ready = await handle._read_frame()
        except (TimeoutError, VerifierDied) as e:
            await handle.kill()
            raise VerifierDied(f"verifier worker did not start: {e}") from None
        except BaseException:
            await handle.kill()
            raise
        if not isinstance(ready, VerifierReady):
            await handle.kill()
            raise VerifierDied(f"expected VerifierReady, got {type(ready).__name__}")
        return handle

    async def request(self, request: VerifyRequest) -> VerifyReply:
        """Send one request and wait for its reply (VerifierDied if the worker is gone)."""
        data = encode(request)
        assert self._process.stdin is not None
        try:
            await self._process.stdin.send(HEADER.pack(len(data)) + data)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as e:
            raise VerifierDied(f"worker {self.pid} is gone ({type(e).__name__})") from None
        reply = await self._read_frame()
        if not isinstance(reply, VerifyReply) or reply.id != request.id:
            raise VerifierDied(f"worker {self.pid} sent an unexpected {reply!r}")
        return reply

    async def _read_frame(self) -> object:
        try:
            (size,) = HEADER.unpack(await self._reader.receive_exactly(HEADER.size))
            if size > MAX_FRAME:
                raise VerifierDied(f"worker {self.pid} sent a {size}-byte frame")
            return decode(await self._reader.receive_exactly(size))
        except (anyio.EndOfStream, anyio.IncompleteRead, anyio.BrokenResourceError) as e:
            raise VerifierDied(f"worker {self.pid} exited ({type(e).__name__})") from None
        except WireError as e:
            raise VerifierDied(f"worker {self.pid} sent garbage: {e}") from None

    async def kill(self) -> None:
        """Kill the process and reap it (safe to call twice, and under cancellation)."""
        with anyio.CancelScope(shield=True):
            if self._process.returncode is None:
                try:
                    self._process.kill()
                except ProcessLookupError:
                    pass  # it exited on its own in the meantime
            await self._process.aclose()

    @property
    def alive(self) -> bool:
        return self._process.returncode is None
