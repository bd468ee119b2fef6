"""The one place that makes ZeroMQ sockets, and their anyio-friendly async wrapper.

`SocketFactory` creates every socket of the runtime: PUSH/PULL for streams, ROUTER/DEALER for
request/reply, PAIR-free. Each socket gets send/receive high-water marks (the backpressure
bound), linger 0 (closing never blocks), and CURVE keys when the factory has them. Binding tcp
on an address other than loopback without CURVE keys raises `ConfigError` (defence in depth:
the graph config refuses it first).

`AsyncSocket` waits on the socket's file descriptor with `anyio.wait_readable`, so it runs under
asyncio (and uvloop) and trio alike; `zmq.asyncio` would tie us to asyncio. The zmq FD is
edge-triggered: it signals "the socket's state may have changed", after which `zmq.EVENTS`
must be re-read, and any send or receive may swallow a pending edge. So one task at a time
waits on the FD (anyio forbids two), others wait on an Event it sets when it wakes, and a
successful operation re-reads EVENTS itself and wakes the FD waiter (cancels its wait) only when
what some task waits for is now set: otherwise no edge was lost (the next change signals the FD
again), and the wake-up would cost more than the operation (anyio names the current task in the
cancel reason, a task repr per message). Receiving stops at EVENTS without POLLIN rather than
at the `zmq.Again` of an empty socket, whose construction costs more than the receive.

What it does not do: encoding (see `rstar2.wire`), retries, or ZAP client authentication.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

import anyio
import zmq

from rstar2.config import ConfigError

log = logging.getLogger(__name__)

Frames = list[bytes]

# pyzmq's constants are enum members: `&` and `|` on them build a new enum member each time,
# which costs more than the socket call on this hot path, so the hot path uses plain ints.
_POLLIN, _POLLOUT = int(zmq.POLLIN), int(zmq.POLLOUT)
_EVENTS, _NOBLOCK = int(zmq.EVENTS), int(zmq.NOBLOCK)


@dataclass(frozen=True)
class CurveKeys:
    """Z85-encoded CURVE keys: the graph's server pair and its client pair."""

    server_public: str
    server_secret: str = field(repr=False)
    client_public: str
    client_secret: str = field(repr=False)


def is_local_endpoint(endpoint: str) -> bool:
    """True for inproc://, ipc:// and tcp:// on a loopback address (or localhost)."""
    scheme, _, rest = endpoint.partition("://")
    if scheme in ("inproc", "ipc"):
        return True
    if scheme != "tcp":
        raise ValueError(f"unsupported endpoint {endpoint!r}: expected inproc, ipc or tcp")
    host = rest.rsplit(":", 1)[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name or "*": treat as exposed


class SocketFactory:
    """Makes and tracks every socket of one process; `close()` closes them all (linger 0)."""

    def __init__(
        self,
        context: zmq.Context | None = None,
        *,
        hwm: int = 1000,
        curve: CurveKeys | None = None,
    ) -> None:
        if hwm < 1:
            raise ValueError(f"hwm must be >= 1, got {hwm}")
        self.context = context or zmq.Context.instance()
        self.hwm = hwm
        self.curve = curve
        self._sockets: list[zmq.Socket] = []

    def _make(self, kind: int, hwm: int | None, options: dict[int, int] | None) -> zmq.Socket:
        sock = self.context.socket(kind)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SNDHWM, hwm or self.hwm)
        sock.setsockopt(zmq.RCVHWM, hwm or self.hwm)
        if kind == zmq.ROUTER:
            sock.setsockopt(zmq.ROUTER_MANDATORY, 1)  # unroutable reply -> error, not silence
        for option, value in (options or {}).items():
            sock.setsockopt(option, value)
        self._sockets.append(sock)
        return sock

    def bind(
        self,
        kind: int,
        endpoint: str,
        *,
        hwm: int | None = None,
        options: dict[int, int] | None = None,
    ) -> AsyncSocket:
        """A socket bound to `endpoint`; tcp on a non-loopback address requires CURVE.

        `options`: extra integer socket options (e.g. heartbeats), set before the bind."""
        exposed = not is_local_endpoint(endpoint)
        if exposed and self.curve is None:
            raise ConfigError(
                "graph.curve", None, f"CURVE keys to bind the non-loopback endpoint {endpoint}"
            )
        sock = self._make(kind, hwm, options)
        if self.curve is not None and endpoint.startswith("tcp://"):
            sock.curve_secretkey = self.curve.server_secret.encode()
            sock.curve_publickey = self.curve.server_public.encode()
            sock.curve_server = True
        sock.bind(endpoint)
        return AsyncSocket(sock, endpoint)

    def connect(
        self,
        kind: int,
        endpoints: Sequence[str],
        *,
        hwm: int | None = None,
        identity: bytes | None = None,
        options: dict[int, int] | None = None,
    ) -> AsyncSocket:
        """A socket connected to every endpoint in `endpoints` (zmq load-balances PUSH/DEALER).

        `options`: extra integer socket options (e.g. heartbeats), set before connecting."""
        sock = self._make(kind, hwm, options)
        if identity is not None:
            sock.setsockopt(zmq.IDENTITY, identity)
        if self.curve is not None and any(e.startswith("tcp://") for e in endpoints):
            sock.curve_secretkey = self.curve.client_secret.encode()
            sock.curve_publickey = self.curve.client_public.encode()
            sock.curve_serverkey = self.curve.server_public.encode()
        for endpoint in endpoints:
            sock.connect(endpoint)
        return AsyncSocket(sock, ",".join(endpoints))

    def close(self) -> None:
        for sock in self._sockets:
            if not sock.closed:
                sock.close(linger=0)
        self._sockets.clear()


class AsyncSocket:
    """A zmq socket whose blocking waits are anyio waits (asyncio, uvloop or trio)."""

    def __init__(self, sock: zmq.Socket, endpoint: str) -> None:
        self.sock = sock
        self.endpoint = endpoint
        self._fd: int = sock.getsockopt(zmq.FD)
        self._fd_scope: anyio.CancelScope | None = None
        self._changed: anyio.Event | None = None
        self._waiting = {_POLLIN: 0, _POLLOUT: 0}
        """Tasks in `wait`, by the flag they wait for."""

    @property
    def closed(self) -> bool:
        return self.sock.closed

    def _poke(self) -> None:
        """After an operation: wake the FD waiter if a flag some task waits for is now set (the
        operation may have taken the FD's edge for it)."""
        if self._fd_scope is None:
            return
        wanted = (_POLLIN if self._waiting[_POLLIN] else 0) | (
            _POLLOUT if self._waiting[_POLLOUT] else 0
        )
        if self.sock.getsockopt(_EVENTS) & wanted:
            self._fd_scope.cancel()

    async def wait(self, flag: int) -> None:
        """Return once `flag` (zmq.POLLIN or zmq.POLLOUT) is set in the socket's EVENTS."""
        flag = int(flag)
        self._waiting[flag] += 1
        try:
            await self._wait(flag)
        finally:
            self._waiting[flag] -= 1

    async def _wait(self, flag: int) -> None:
        while not self.sock.getsockopt(_EVENTS) & flag:
            if self._fd_scope is not None:  # another task owns the FD wait: wait for its wake-up
                if self._changed is None:
                    self._changed = anyio.Event()
                await self._changed.wait()
                continue
            with anyio.CancelScope() as scope:
                self._fd_scope = scope
                try:
                    await anyio.wait_readable(self._fd)
                finally:
                    self._fd_scope = None
                    if self._changed is not None:
                        self._changed.set()
                        self._changed = None

    def send_nowait(self, frames: Sequence[bytes | memoryview]) -> bool:
        """Send one multipart message if the socket can take it now; False when it is full."""
        try:
            self.sock.send_multipart(frames, flags=_NOBLOCK, copy=False)
        except zmq.Again:
            return False
        self._poke()
        return True

    async def send(self, frames: Sequence[bytes | memoryview]) -> bool:
        """Send one multipart message; returns True when it had to wait (output blocked)."""
        if self.send_nowait(frames):
            return False
        while True:
            await self.wait(zmq.POLLOUT)
            if self.send_nowait(frames):
                return True

    def recv_nowait(self) -> Frames | None:
        """The next queued message, if there is one."""
        frames = None
        if self.sock.getsockopt(_EVENTS) & _POLLIN:
            try:
                frames = self.sock.recv_multipart(flags=_NOBLOCK)
            except zmq.Again:
                pass
        self._poke()  # reading EVENTS may have taken an edge too
        return frames

    def recv_batch_nowait(self, max_messages: int) -> list[Frames]:
        """Up to `max_messages` messages that are already queued (possibly none)."""
        out: list[Frames] = []
        while len(out) < max_messages:
            frames = self.recv_nowait()
            if frames is None:
                break
            out.append(frames)
        return out

    async def recv_batch(self, max_messages: int) -> list[Frames]:
        """Wait for at least one message, then drain up to `max_messages` without waiting."""
        while True:
            batch = self.recv_batch_nowait(max_messages)
            if batch:
                return batch
            await self.wait(zmq.POLLIN)

    async def recv(self) -> Frames:
        return (await self.recv_batch(1))[0]

    def close(self) -> None:
        if self._fd_scope is not None:  # the waiter then finds the socket closed
            self._fd_scope.cancel()
        if not self.sock.closed:
            self.sock.close(linger=0)
