"""Serving the sandbox's HTTP front: the socket, Hypercorn, and a drained stop.

`serve_http(cfg, http)` opens a local executor (`open_executor`) and serves its `Front`
(`http_front.py`: the routes and answers) until `Shutdown.request()` or cancellation;
`serve_front` serves a given front on a socket bound by `http_gate.bind_socket`.

Stopping (`Shutdown`, which `rstar2 sandbox serve --http` triggers on SIGTERM and SIGINT): the
listener closes, a request arriving on a kept-alive connection gets the overload status with
`Connection: close`, requests in flight get `drain_s` to finish; whatever still runs then (or
at once, on a second signal) is cancelled in the sandbox and answered with the overload status
and Retry-After, so no client sees a dropped connection or an empty 500. Then the executor
closes (its children die with the zygote) and the command exits 0.

Built on Starlette (routing, requests and responses) served by Hypercorn: both maintained, both
on anyio/trio as well as asyncio, so the front runs under `anyio.run` on either backend like the
rest of rstar2; the host binds the socket itself (so port 0 works and the bound port is
reported) and hands it to Hypercorn.

What it does not do: decide any answer (`http_front.py`, `code_judge.py`, `sandbox_fusion.py`,
`http_gate.py`).
"""

from __future__ import annotations

import logging
import socket

import anyio
import anyio.abc
import hypercorn.asyncio
import hypercorn.trio
import sniffio
from hypercorn.config import Config as HypercornConfig

from rstar2.config import ConfigError
from rstar2.sandbox.config import SandboxConfig
from rstar2.sandbox.executor import open_executor
from rstar2.sandbox.http_front import Front, HttpConfig
from rstar2.sandbox.http_gate import bind_socket

log = logging.getLogger(__name__)


class Shutdown:
    """Asks a served front to stop: the first `request()` drains (`HttpConfig.drain_s`), a
    second one answers whatever is still running at once."""

    def __init__(self) -> None:
        self.requested = anyio.Event()
        self.hurry = anyio.Event()

    def request(self) -> None:
        if self.requested.is_set():
            self.hurry.set()
        self.requested.set()


def hypercorn_config(sock: socket.socket, http: HttpConfig) -> HypercornConfig:
    """Hypercorn's settings for serving on `sock` (which Hypercorn then owns)."""
    hc = HypercornConfig()
    hc.bind = [f"fd://{sock.detach()}"]
    hc.accesslog = None
    hc.errorlog = logging.getLogger("rstar2.sandbox.hypercorn")
    hc.graceful_timeout = http.drain_s + 5.0  # the drain answers everything by drain_s
    hc.keep_alive_timeout = 60.0
    if http.certfile is not None:
        hc.certfile, hc.keyfile = http.certfile, http.keyfile
    return hc


async def serve_front(
    front: Front,
    sock: socket.socket,
    http: HttpConfig,
    *,
    shutdown: Shutdown | None = None,
    task_status: anyio.abc.TaskStatus[int] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve `front` on the bound `sock` with Hypercorn, on whichever backend runs us, until
    `shutdown` is requested or we are cancelled; then drain (`Front.drain`) and return."""
    port = sock.getsockname()[1]
    hc = hypercorn_config(sock, http)
    serve = (
        hypercorn.trio.serve
        if sniffio.current_async_library() == "trio"
        else hypercorn.asyncio.serve
    )
    stop = anyio.Event()

    async def run() -> None:
        with anyio.CancelScope(shield=True):
            await serve(front.app(), hc, shutdown_trigger=stop.wait)  # type: ignore[arg-type]

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        scheme = "https" if http.certfile else "http"
        log.info("sandbox HTTP front listening on %s://%s:%d", scheme, http.host, port)
        task_status.started(port)
        try:
            if shutdown is None:
                await anyio.sleep_forever()
            else:
                await shutdown.requested.wait()
        finally:
            with anyio.CancelScope(shield=True):
                log.info("sandbox HTTP front stopping: %d request(s) in flight", front.in_flight)
                stop.set()  # the listener closes; requests in flight go on
                await front.drain(http.drain_s, None if shutdown is None else shutdown.hurry)


async def serve_http(
    cfg: SandboxConfig,
    http: HttpConfig,
    *,
    sock: socket.socket | None = None,
    shutdown: Shutdown | None = None,
    task_status: anyio.abc.TaskStatus[int] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve `cfg`'s executor over HTTP until `shutdown` is requested or we are cancelled,
    then drain; `task_status` gets the bound port. `sock`: already bound (`bind_socket`),
    else bound here on `http.host:http.port`."""
    http.validate()
    if (why := http.tls_problem()) is not None:  # fail here, at start-up
        raise ConfigError("certfile", http.certfile, f"a PEM certificate with keyfile ({why})")
    if sock is None:
        sock = bind_socket(http.host, http.port, "--http")
    try:
        async with open_executor(cfg) as ex:
            front = Front(ex, http)
            await serve_front(front, sock, http, shutdown=shutdown, task_status=task_status)
    finally:
        sock.close()  # a no-op once Hypercorn owns it (detached)
