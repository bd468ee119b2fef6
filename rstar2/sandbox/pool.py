"""The tool-executor client: spreads requests over sandbox services and survives their death.

`open_pool(endpoints)` connects one DEALER per service (`serve_sandbox` on each, local ipc or
other hosts over tcp with CURVE) and yields an `ExecutorPool` whose `run(request)` has the
local executor's contract: exactly one `ExecResult` per request, never an exception for a
failure of the code or of a service, never a hang.

Decisions live in the synchronous `Dispatcher`:
- a request goes to the live service with the least outstanding work (requests this client
  sent it that have not come back; ties go to the lowest index);
- a service is dead when nothing (result or pong) has come from it for `dead_after_s` while
  it is pinged every `heartbeat_s`; its in-flight requests are re-sent to another live service
  (at most `max_resends` times each) or else answered with status `killed`;
- with no live service a request is answered `rejected` at once;
- both failures are the infrastructure's, not the code's: their results carry
  `ExecResult.infra` ("sandbox_died", "no_sandbox");
- a dead service that answers again is used again. The first result for a request wins; a
  late duplicate from a service thought dead is dropped.

What it does not do: execute code (the services do) or retry a request whose code failed.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass

import anyio
import msgspec
import zmq

from rstar2 import wire
from rstar2.actors.sockets import AsyncSocket, CurveKeys, SocketFactory
from rstar2.wire import ExecCancel, ExecRequest, ExecResult, SandboxPing

log = logging.getLogger(__name__)


@dataclass
class Flight:
    """A request sent and not yet answered."""

    request: ExecRequest
    service: int
    attempts: int = 1


class Dispatcher:
    """Which service gets each request, and what becomes of a dead service's requests."""

    def __init__(self, services: int, max_resends: int = 1) -> None:
        if services < 1:
            raise ValueError(f"need at least one service, got {services}")
        if max_resends < 0:
            raise ValueError(f"max_resends must be >= 0, got {max_resends}")
        self.alive = [True] * services
        self.load = [0] * services
        self.flights: dict[str, Flight] = {}
        self.max_resends = max_resends

    def pick(self) -> int | None:
        """The live service with the least outstanding work, or None when all are dead."""
        live = [i for i, ok in enumerate(self.alive) if ok]
        return min(live, key=lambda i: (self.load[i], i)) if live else None

    def assign(self, key: str, request: ExecRequest) -> int | None:
        service = self.pick()
        if service is not None:
            self.flights[key] = Flight(request, service)
            self.load[service] += 1
        return service

    def finish(self, key: str) -> Flight | None:
        """The flight answered by a result for `key`, or None when it was answered already."""
        flight = self.flights.pop(key, None)
        if flight is not None:
            self.load[flight.service] -= 1
        return flight

    def service_died(self, service: int) -> tuple[list[tuple[str, int]], list[str]]:
        """Mark `service` dead; returns (requests to re-send as (key, new service), keys to fail)."""
        self.alive[service] = False
        resend: list[tuple[str, int]] = []
        fail: list[str] = []
        for key, flight in list(self.flights.items()):
            if flight.service != service:
                continue
            self.load[service] -= 1
            target = self.pick() if flight.attempts <= self.max_resends else None
            if target is None:
                del self.flights[key]
                fail.append(key)
            else:
                flight.service, flight.attempts = target, flight.attempts + 1
                self.load[target] += 1
                resend.append((key, target))
        return resend, fail

    def service_alive(self, service: int) -> None:
        self.alive[service] = True


class ExecutorPool:
    """Client of one or many sandbox services. Build it with `open_pool`."""

    def __init__(
        self,
        sockets: list[AsyncSocket],
        dispatcher: Dispatcher,
        heartbeat_s: float,
        dead_after_s: float,
    ) -> None:
        self.sockets = sockets
        self.dispatcher = dispatcher
        self.heartbeat_s, self.dead_after_s = heartbeat_s, dead_after_s
        self.last_seen = [time.monotonic()] * len(sockets)
        self.heard = [False] * len(sockets)
        self._keys = itertools.count(1)
        self._waiters: dict[str, anyio.Event] = {}
        self._results: dict[str, ExecResult] = {}

    async def run(self, request: ExecRequest) -> ExecResult:
        if not isinstance(request, ExecRequest):
            raise TypeError(f"expected an ExecRequest, got {type(request).__name__}")
        key = str(next(self._keys))
        service = self.dispatcher.assign(key, request)
        if service is None:
            return ExecResult(
                id=request.id,
                status="rejected",
                stderr="no live sandbox service",
                infra="no_sandbox",
            )
        event = self._waiters[key] = anyio.Event()
        try:
            await self._send(service, msgspec.structs.replace(request, id=key))
            await event.wait()
        except anyio.get_cancelled_exc_class():
            flight = self.dispatcher.finish(key)
            self._waiters.pop(key, None)
            if flight is not None:
                self.sockets[flight.service].send_nowait([wire.encode(ExecCancel(key))])
            raise
        result = self._results.pop(key)
        return msgspec.structs.replace(result, id=request.id)

    def ready_services(self) -> list[int]:
        """Services that have answered at least once and are not thought dead."""
        return [i for i, ok in enumerate(self.dispatcher.alive) if ok and self.heard[i]]

    async def _send(self, service: int, msg: wire.Message) -> None:
        # A dead peer's queue can fill up; giving up here is safe: the flight stays assigned
        # to that service, which the monitor declares dead, re-sending or failing it.
        with anyio.move_on_after(self.dead_after_s):
            await self.sockets[service].send([wire.encode(msg)])

    def _answer(self, key: str, result: ExecResult) -> None:
        event = self._waiters.pop(key, None)
        if event is not None:
            self._results[key] = result
            event.set()

    async def receive(self, service: int) -> None:
        """Take results and pongs from one service, forever."""
        sock = self.sockets[service]
        while True:
            for frames in await sock.recv_batch(256):
                try:
                    msg = wire.decode(frames[-1])
                except wire.WireError as e:
                    log.warning("sandbox pool: undecodable reply skipped: %s", e)
                    continue
                self.last_seen[service] = time.monotonic()
                self.heard[service] = True
                if not self.dispatcher.alive[service]:
                    log.warning("sandbox service %d is back", service)
                    self.dispatcher.service_alive(service)
                if isinstance(msg, ExecResult) and self.dispatcher.finish(msg.id) is not None:
                    self._answer(msg.id, msg)

    async def monitor(self) -> None:
        """Ping every service; declare the silent ones dead and move their requests."""
        for seq in itertools.count():
            now = time.monotonic()
            for service, sock in enumerate(self.sockets):
                sock.send_nowait([wire.encode(SandboxPing(seq))])
                silent = now - self.last_seen[service] > self.dead_after_s
                if silent and self.dispatcher.alive[service]:
                    await self._bury(service)
            await anyio.sleep(self.heartbeat_s)

    async def _bury(self, service: int) -> None:
        resend, fail = self.dispatcher.service_died(service)
        log.error(
            "sandbox service %d is silent: re-sending %d request(s), failing %d",
            service, len(resend), len(fail),
        )  # fmt: skip
        for key in fail:
            message = f"sandbox service {service} died with the request in flight"
            failed = ExecResult(
                id=key, status="killed", stderr=message, exit_code=-9, infra="sandbox_died"
            )
            self._answer(key, failed)
        for key, target in resend:
            flight = self.dispatcher.flights.get(key)
            if flight is not None:
                await self._send(target, msgspec.structs.replace(flight.request, id=key))


@asynccontextmanager
async def open_pool(
    endpoints: Sequence[str],
    *,
    curve: CurveKeys | None = None,
    heartbeat_s: float = 0.5,
    dead_after_s: float = 3.0,
    max_resends: int = 1,
) -> AsyncIterator[ExecutorPool]:
    """Connect to the sandbox services at `endpoints` (one DEALER each)."""
    if not endpoints:
        raise ValueError("open_pool needs at least one endpoint")
    if not 0 < heartbeat_s < dead_after_s:
        raise ValueError(f"need 0 < heartbeat_s ({heartbeat_s}) < dead_after_s ({dead_after_s})")
    factory = SocketFactory(hwm=100_000, curve=curve)
    try:
        sockets = [factory.connect(zmq.DEALER, [e]) for e in endpoints]
        pool = ExecutorPool(
            sockets, Dispatcher(len(endpoints), max_resends), heartbeat_s, dead_after_s
        )
        async with anyio.create_task_group() as tg:
            for service in range(len(sockets)):
                tg.start_soon(pool.receive, service)
            tg.start_soon(pool.monitor)
            try:
                yield pool
            finally:
                tg.cancel_scope.cancel()
    finally:
        factory.close()
