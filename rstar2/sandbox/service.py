"""The executor as a network service: a ZeroMQ ROUTER speaking `rstar2.wire` messages.

`serve_sandbox(cfg, bind)` opens a local executor and answers, on one ROUTER socket made by the
actor runtime's `SocketFactory` (CURVE when binding a non-loopback tcp address):
- `ExecRequest` -> one `ExecResult` (same id) when it finishes, in completion order;
- `ExecCancel`  -> the request with that id (from the same client) is killed;
- `SandboxPing` -> `SandboxPong` at once, with the executor's outstanding count.
Undecodable frames are logged and skipped. `rstar2 sandbox serve --bind ADDR` runs it.

The same service inside an actor graph is `rstar2.sandbox.actor.SandboxActor`.

What it does not do: spread load over services or survive their death (see `pool.py`).
"""

from __future__ import annotations

import logging

import anyio
import anyio.abc
import zmq

from rstar2 import wire
from rstar2.actors.sockets import AsyncSocket, CurveKeys, SocketFactory
from rstar2.config import UsageError
from rstar2.sandbox.config import SandboxConfig
from rstar2.sandbox.executor import Executor, open_executor
from rstar2.wire import ExecCancel, ExecRequest, ExecResult, SandboxPing, SandboxPong

log = logging.getLogger(__name__)


class _Server:
    """Moves messages between the ROUTER socket and the executor; one task per request."""

    def __init__(self, ex: Executor, sock: AsyncSocket, tg: anyio.abc.TaskGroup) -> None:
        self.ex, self.sock, self.tg = ex, sock, tg
        self.running: dict[tuple[bytes, str], anyio.CancelScope] = {}

    def on_frames(self, frames: list[bytes]) -> None:
        if len(frames) < 2:
            log.warning("sandbox service: dropped a message of %d frame(s)", len(frames))
            return
        peer, body = frames[0], frames[-1]
        try:
            msg = wire.decode(body)
        except wire.WireError as e:
            log.warning("sandbox service: undecodable message skipped: %s", e)
            return
        if isinstance(msg, ExecRequest):
            self.tg.start_soon(self._run, peer, msg)
        elif isinstance(msg, ExecCancel):
            scope = self.running.get((peer, msg.id))
            if scope is not None:
                scope.cancel()
        elif isinstance(msg, SandboxPing):
            stats = self.ex.stats()
            pong = SandboxPong(msg.seq, stats.outstanding, self.ex.cfg.concurrency)
            self.sock.send_nowait([peer, wire.encode(pong)])
        else:
            log.warning("sandbox service: unexpected %s skipped", type(msg).__name__)

    async def _run(self, peer: bytes, request: ExecRequest) -> None:
        key = (peer, request.id)
        with anyio.CancelScope() as scope:
            self.running[key] = scope
            try:
                result = await self.ex.run(request)
            finally:
                self.running.pop(key, None)
        if scope.cancelled_caught:
            result = ExecResult(
                id=request.id, status="killed", stderr="cancelled by the client", infra="cancelled"
            )
        try:
            await self.sock.send([peer, wire.encode(result)])
        except zmq.ZMQError as e:  # the client is gone (ROUTER_MANDATORY): nobody to answer
            log.info("sandbox service: result %s not delivered: %s", request.id, e)


async def serve_sandbox(
    cfg: SandboxConfig,
    bind: str,
    *,
    curve: CurveKeys | None = None,
    task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve `cfg`'s executor on `bind` until cancelled."""
    factory = SocketFactory(hwm=100_000, curve=curve)
    try:
        try:
            sock = factory.bind(zmq.ROUTER, bind)
        except zmq.ZMQError as e:  # in use, a missing directory, no such interface
            raise UsageError(f"cannot bind {bind}: {e.strerror}") from None
        async with open_executor(cfg) as ex, anyio.create_task_group() as tg:
            server = _Server(ex, sock, tg)
            log.info("sandbox service listening on %s", bind)
            task_status.started()
            while True:
                for frames in await sock.recv_batch(256):
                    server.on_frames(frames)
    finally:
        factory.close()
