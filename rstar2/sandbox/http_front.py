"""The executor over HTTP, speaking code-judge's and SandboxFusion's APIs.

`serve_http(cfg, http)` opens the same local executor as the ZeroMQ service (`open_executor`:
the same zygote, isolation layers, limits and timeouts) and serves, on `http.host:http.port`:
- code-judge (`code_judge.py`): `POST /run`, `/judge`, `/run/batch`, `/run/long-batch`,
  `/judge/batch`, `/judge/long-batch`; `GET /ping` and `GET /status` (`{queue, num_workers}`);
- SandboxFusion (`sandbox_fusion.py`): `POST /run_code`; `GET /v1/ping`.
A batch's submissions run concurrently and come back in request order. Answers:
- 200 with the API's result, also when the code failed (that is a result, not an error);
- 400 (not JSON), 422 (a wrong or missing field, another language), 413 (a body over
  `max_body_mb`, code over the sandbox's size limits, a batch larger than `max_items`), with
  `{"detail": "..."}` saying what is wrong;
- 401 without the token, when the front has one (`http_gate.authorized`);
- overloaded (`http_gate.Admission` full, or the executor's queue full): 503 on the
  code-judge routes and 504 on `/run_code` (the one status verl's client retries), both with
  Retry-After; inside a batch that was admitted, an item the executor could not queue gets
  code-judge's own retry signal, `reason` "queue_timeout".
Nothing waits for room: a request is admitted at once or refused at once.

Built on Starlette (routing, requests and responses) served by Hypercorn: both maintained, both
on anyio/trio as well as asyncio, so the front runs under `anyio.run` on either backend like the
rest of rstar2; the host binds the socket itself (so port 0 works and the bound port is
reported) and hands it to Hypercorn.

A client that hangs up before its answer has its submissions cancelled in the sandbox (as the
ZeroMQ service's `ExecCancel` does), so a client's own timeout frees the sandbox at once.

What it does not do: run anything but Python, or keep sessions.
"""

from __future__ import annotations

import logging
import socket
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

import anyio
import anyio.abc
import hypercorn.asyncio
import hypercorn.trio
import msgspec
import sniffio
from hypercorn.config import Config as HypercornConfig
from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from rstar2.config import require
from rstar2.sandbox import code_judge, sandbox_fusion
from rstar2.sandbox.config import SandboxConfig
from rstar2.sandbox.executor import ExecutorStats, open_executor
from rstar2.sandbox.http_gate import Admission, Refusal, authorized, check_bind
from rstar2.wire import ExecRequest, ExecResult

log = logging.getLogger(__name__)

CODE_JUDGE, SANDBOX_FUSION = "code-judge", "sandbox-fusion"
OVERLOAD_STATUS = {CODE_JUDGE: 503, SANDBOX_FUSION: 504}
"""The status an overloaded front answers, per API: 503 is HTTP's "try again later"; verl's
SandboxFusion client retries a 504 and nothing else."""


@dataclass
class HttpConfig:
    host: str = "127.0.0.1"
    """Address to bind; anything but loopback requires `token`."""

    port: int = 8080
    """TCP port (0: any free port; `serve_http` reports the one bound)."""

    token: str | None = field(default=None, repr=False)
    """Bearer token every request must carry (None: none, loopback only)."""

    max_items: int = 65536
    """Submissions admitted and not answered; beyond it requests are refused as overloaded."""

    max_pending_mb: int = 512
    """Request bodies being read or run, in total; beyond it requests are refused as overloaded."""

    max_body_mb: int = 64
    """Largest request body; a larger one is refused with 413."""

    retry_after_s: int = 1
    """The Retry-After an overloaded front suggests."""

    certfile: str | None = None
    """TLS certificate (PEM) to serve HTTPS; with `keyfile`."""

    keyfile: str | None = None
    """TLS private key (PEM)."""

    def validate(self) -> None:
        require(0 <= self.port <= 65535, "port", self.port, "0..65535")
        for key in ("max_items", "max_pending_mb", "max_body_mb", "retry_after_s"):
            value = getattr(self, key)
            require(value >= 1, key, value, "an integer >= 1")
        require(
            self.max_body_mb <= self.max_pending_mb,
            "max_body_mb",
            self.max_body_mb,
            f"<= max_pending_mb ({self.max_pending_mb})",
        )
        require(
            (self.certfile is None) == (self.keyfile is None),
            "keyfile",
            self.keyfile,
            "given together with certfile",
        )
        check_bind(self.host, self.token)


class Runner(Protocol):
    """What the front needs of the executor (`Executor`; tests pass in-memory fakes)."""

    cfg: SandboxConfig

    async def run(self, request: ExecRequest) -> ExecResult: ...

    def stats(self) -> ExecutorStats: ...


def _json(obj: object, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(msgspec.json.encode(obj), status, headers, media_type="application/json")


def refusal_response(refusal: Refusal, api: str, retry_after_s: int) -> Response:
    """The HTTP answer to a refused request; 503 stands for "overloaded" in any API."""
    if refusal.status == 503:
        headers = {"Retry-After": str(retry_after_s)}
        return _json({"detail": refusal.message}, OVERLOAD_STATUS[api], headers)
    return _json({"detail": refusal.message}, refusal.status)


class _Held:
    """What one request holds in the admission, given back when it is answered."""

    def __init__(self) -> None:
        self.items = 0
        self.bytes = 0


class Front:
    """The routes; every decision is `code_judge`/`sandbox_fusion`/`http_gate`'s."""

    def __init__(self, ex: Runner, http: HttpConfig) -> None:
        self.ex, self.http = ex, http
        self.admission = Admission(http.max_items, http.max_pending_mb << 20)

    def app(self) -> ASGIApp:
        cj = self._code_judge
        routes = [
            Route("/run", cj(batch=False, judge=False), methods=["POST"]),
            Route("/judge", cj(batch=False, judge=True), methods=["POST"]),
            Route("/run/batch", cj(batch=True, judge=False), methods=["POST"]),
            Route("/run/long-batch", cj(batch=True, judge=False), methods=["POST"]),
            Route("/judge/batch", cj(batch=True, judge=True), methods=["POST"]),
            Route("/judge/long-batch", cj(batch=True, judge=True), methods=["POST"]),
            Route("/run_code", self.run_code, methods=["POST"]),
            Route("/ping", _pong, methods=["GET"]),
            Route("/v1/ping", _pong, methods=["GET"]),
            Route("/status", self.status, methods=["GET"]),
        ]
        return _TokenCheck(Starlette(routes=routes), self.http.token)

    async def status(self, request: Request) -> Response:
        stats = self.ex.stats()
        return _json({"queue": stats.outstanding, "num_workers": self.ex.cfg.concurrency})

    async def _body(self, request: Request, held: _Held) -> bytes | Refusal:
        """The body, read within `max_body_mb` and the admission's byte budget."""
        limit = self.http.max_body_mb << 20
        too_large = Refusal(413, f"the body exceeds {self.http.max_body_mb} MiB")
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            return too_large
        chunks: list[bytes] = []
        async for chunk in request.stream():
            if held.bytes + len(chunk) > limit:
                return too_large
            if not self.admission.take_bytes(len(chunk)):
                return Refusal(503, "overloaded: too many request bytes in flight, retry later")
            held.bytes += len(chunk)
            chunks.append(chunk)
        return b"".join(chunks)

    async def _run_all(self, request: Request, runs: list[ExecRequest]) -> list[ExecResult] | None:
        """The results of `runs` (run concurrently), or None when the client hung up first:
        its runs are then cancelled in the sandbox rather than left to their time limits."""
        results: list[ExecResult | None] = [None] * len(runs)

        async def one(i: int, run: ExecRequest) -> None:
            results[i] = await self.ex.run(run)

        async def watch(scope: anyio.CancelScope) -> None:
            # the body has been read: the next ASGI message is the client's disconnect
            while (await request.receive())["type"] != "http.disconnect":
                pass
            scope.cancel()

        async with anyio.create_task_group() as outer:
            outer.start_soon(watch, outer.cancel_scope)
            async with anyio.create_task_group() as tg:
                for i, run in enumerate(runs):
                    tg.start_soon(one, i, run)
            outer.cancel_scope.cancel()
        done = [r for r in results if r is not None]
        return done if len(done) == len(runs) else None

    def _code_judge(self, *, batch: bool, judge: bool) -> Callable[[Request], Awaitable[Response]]:
        to_result = code_judge.judge_result if judge else code_judge.run_result

        async def endpoint(request: Request) -> Response:
            held = _Held()
            try:
                return await self._serve_code_judge(request, held, batch, to_result)
            finally:
                self.admission.release(held.items, held.bytes)

        return endpoint

    async def _serve_code_judge(
        self,
        request: Request,
        held: _Held,
        batch: bool,
        to_result: Callable[[code_judge.Submission, ExecResult], msgspec.Struct],
    ) -> Response:
        retry = self.http.retry_after_s
        body = await self._body(request, held)
        if isinstance(body, Refusal):
            return refusal_response(body, CODE_JUDGE, retry)
        cfg = self.ex.cfg
        parsed = (
            code_judge.parse_batch(body, cfg) if batch else code_judge.parse_submission(body, cfg)
        )
        if isinstance(parsed, Refusal):
            return refusal_response(parsed, CODE_JUDGE, retry)
        subs = parsed.submissions if isinstance(parsed, code_judge.BatchSubmission) else [parsed]
        refusal = self.admission.take_items(len(subs))
        if refusal is not None:
            return refusal_response(refusal, CODE_JUDGE, retry)
        held.items = len(subs)
        results = await self._run_all(request, [code_judge.exec_request(s) for s in subs])
        if results is None:
            return _json({"detail": "the client hung up"}, 499)  # nobody reads it
        answers = [to_result(s, r) for s, r in zip(subs, results, strict=True)]
        if isinstance(parsed, code_judge.BatchSubmission):
            assert parsed.sub_id is not None
            return _json(code_judge.BatchResult(parsed.sub_id, answers))  # type: ignore[arg-type]
        return _json(answers[0])

    async def run_code(self, request: Request) -> Response:
        held = _Held()
        retry = self.http.retry_after_s
        try:
            body = await self._body(request, held)
            if isinstance(body, Refusal):
                return refusal_response(body, SANDBOX_FUSION, retry)
            parsed = sandbox_fusion.parse_run_code(body, self.ex.cfg)
            if isinstance(parsed, Refusal):
                return refusal_response(parsed, SANDBOX_FUSION, retry)
            refusal = self.admission.take_items(1)
            if refusal is not None:
                return refusal_response(refusal, SANDBOX_FUSION, retry)
            held.items = 1
            results = await self._run_all(
                request, [sandbox_fusion.exec_request(parsed, "run_code")]
            )
            if results is None:
                return _json({"detail": "the client hung up"}, 499)  # nobody reads it
            result = results[0]
            if result.infra == "queue_full":
                refusal = Refusal(503, f"overloaded: {result.stderr}, retry later")
                return refusal_response(refusal, SANDBOX_FUSION, retry)
            return _json(sandbox_fusion.run_code_response(result))
        finally:
            self.admission.release(held.items, held.bytes)


async def _pong(request: Request) -> Response:
    return JSONResponse("pong")


class _TokenCheck:
    """ASGI middleware: every HTTP request must carry the token (`http_gate.authorized`)."""

    def __init__(self, app: ASGIApp, token: str | None) -> None:
        self.app, self.token = app, token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not authorized(
            Headers(scope=scope).get("authorization"), self.token
        ):
            response = JSONResponse(
                {"detail": "missing or wrong token (Authorization: Bearer TOKEN)"},
                401,
                {"WWW-Authenticate": 'Bearer, Basic realm="rstar2 sandbox"'},
            )
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on (host, port); port 0 picks a free one."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.create_server((host.strip("[]"), port), family=family, backlog=2048)


def hypercorn_config(sock: socket.socket, http: HttpConfig) -> HypercornConfig:
    """Hypercorn's settings for serving on `sock` (which Hypercorn then owns)."""
    hc = HypercornConfig()
    hc.bind = [f"fd://{sock.detach()}"]
    hc.accesslog = None
    hc.errorlog = logging.getLogger("rstar2.sandbox.hypercorn")
    hc.graceful_timeout = 5.0
    hc.keep_alive_timeout = 60.0
    if http.certfile is not None:
        hc.certfile, hc.keyfile = http.certfile, http.keyfile
    return hc


async def serve_front(
    app: ASGIApp,
    sock: socket.socket,
    http: HttpConfig,
    *,
    task_status: anyio.abc.TaskStatus[int] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve `app` on the bound `sock` with Hypercorn, on whichever backend runs us, until
    cancelled; then stop gracefully (in-flight requests get `graceful_timeout`)."""
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
            await serve(app, hc, shutdown_trigger=stop.wait)  # type: ignore[arg-type]

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        scheme = "https" if http.certfile else "http"
        log.info("sandbox HTTP front listening on %s://%s:%d", scheme, http.host, port)
        task_status.started(port)
        try:
            await anyio.sleep_forever()
        finally:
            stop.set()


async def serve_http(
    cfg: SandboxConfig,
    http: HttpConfig,
    *,
    task_status: anyio.abc.TaskStatus[int] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve `cfg`'s executor over HTTP until cancelled; `task_status` gets the bound port."""
    http.validate()
    if http.certfile is not None:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(
            http.certfile, http.keyfile
        )  # fail here, at start-up, on an unreadable certificate or key
    sock = bind_socket(http.host, http.port)
    try:
        async with open_executor(cfg) as ex:
            await serve_front(Front(ex, http).app(), sock, http, task_status=task_status)
    finally:
        sock.close()  # a no-op once Hypercorn owns it (detached)
