"""The executor over HTTP, speaking code-judge's and SandboxFusion's APIs.

`Front(ex, http)` is the ASGI app over an executor (`Front.app()`); `http_server.serve_http(cfg,
http)` opens the same local executor as the ZeroMQ service (`open_executor`: the same zygote,
isolation layers, limits and timeouts) and serves it, on `http.host:http.port`:
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
Nothing waits for room: a request is admitted at once or refused at once. A sandbox that is
restarting its zygote (`infra` "unavailable", after `SandboxConfig.restart_wait_s`) reads as
overloaded too: 503/504 with Retry-After on `/run`, `/judge` and `/run_code`, "queue_timeout"
inside a batch; so does an executor queue that is full on those single routes.

Bytes that are not UTF-8 or not JSON are 400, wrong fields 422, always with a JSON `detail`.
Bodies over `PARSE_INLINE_BYTES` are parsed in a worker thread, so a large batch does not hold
the event loop (and the other requests) while it is decoded. A client that hangs up while
sending its body is one INFO line, not a traceback.

A client that hangs up before its answer has its submissions cancelled in the sandbox (as the
ZeroMQ service's `ExecCancel` does), so a client's own timeout frees the sandbox at once.

On shutdown (`http_server.py`) the front drains (`Front.drain`): new requests get the
overload status with `Connection: close`, and the runs still going at the end of the drain are
cancelled in the sandbox and answered with it.

What it does not do: bind sockets, run the HTTP server or stop it (`http_server.py`), run
anything but Python, or keep sessions.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

import anyio
import anyio.abc
import msgspec
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from rstar2.config import require
from rstar2.sandbox import code_judge, sandbox_fusion
from rstar2.sandbox.config import SandboxConfig
from rstar2.sandbox.executor import RETRY_LATER, ExecutorStats
from rstar2.sandbox.http_gate import Admission, Refusal, TokenCheck, check_bind
from rstar2.wire import ExecRequest, ExecResult

log = logging.getLogger(__name__)
T = TypeVar("T")

CODE_JUDGE, SANDBOX_FUSION = "code-judge", "sandbox-fusion"
OVERLOAD_STATUS = {CODE_JUDGE: 503, SANDBOX_FUSION: 504}
"""The status an overloaded front answers, per API: 503 is HTTP's "try again later"; verl's
SandboxFusion client retries a 504 and nothing else."""

PARSE_INLINE_BYTES = 1 << 20
"""Bodies up to this size are parsed on the event loop; larger ones in a worker thread."""

SHUTTING_DOWN = "the sandbox service is shutting down; retry (another instance, or later)"


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

    drain_s: float = 5.0
    """On shutdown, how long requests in flight get to finish before they are answered with
    the overload status (and cancelled in the sandbox)."""

    certfile: str | None = None
    """TLS certificate (PEM) to serve HTTPS; with `keyfile`."""

    keyfile: str | None = None
    """TLS private key (PEM)."""

    def validate(self) -> None:
        require(0 <= self.port <= 65535, "port", self.port, "0..65535")
        for key in ("max_items", "max_pending_mb", "max_body_mb", "retry_after_s"):
            value = getattr(self, key)
            require(value >= 1, key, value, "an integer >= 1")
        require(self.drain_s >= 0, "drain_s", self.drain_s, "a number of seconds >= 0")
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

    def tls_problem(self) -> str | None:
        """Why `certfile` and `keyfile` do not load as a TLS server's certificate and key
        (missing, unreadable, not PEM, a key of another certificate), None when they do or
        when none is set. `serve_http` checks it at start-up, the `sandbox serve` command
        before it starts anything (naming its flags)."""
        if self.certfile is None:
            return None
        try:
            ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(
                self.certfile, self.keyfile
            )
        except OSError as e:
            return e.strerror or str(e)
        except ssl.SSLError as e:
            return str(e)
        return None


_CHALLENGE = 'Bearer, Basic realm="rstar2 sandbox"'
"""The 401 answer's WWW-Authenticate: both forms `authorized` takes."""


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


def api_of(path: str) -> str:
    """The API a route belongs to (for its overload status)."""
    return SANDBOX_FUSION if path.startswith(("/run_code", "/v1/")) else CODE_JUDGE


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
        self.draining = False
        """Set on shutdown: new requests are refused with the overload status."""
        self.in_flight = 0
        """Requests inside a route now."""
        self._abort: anyio.Event | None = None

    @property
    def abort(self) -> anyio.Event:
        """Set when the drain time is up: the runs still going are cancelled and answered."""
        if self._abort is None:
            self._abort = anyio.Event()
        return self._abort

    async def drain(self, seconds: float, hurry: anyio.Event | None = None) -> None:
        """Refuse new requests, give those in flight `seconds` (less if `hurry` is set) to be
        answered, then answer the rest with the overload status; returns when none is left."""
        self.draining = True
        with anyio.move_on_after(seconds):
            while self.in_flight and not (hurry is not None and hurry.is_set()):
                await anyio.sleep(0.02)
        if self.in_flight:
            log.warning("drain time up: answering %d request(s) still running", self.in_flight)
        self.abort.set()
        with anyio.move_on_after(5.0):
            while self.in_flight:
                await anyio.sleep(0.02)

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
        return TokenCheck(_Gate(Starlette(routes=routes), self), self.http.token, _CHALLENGE)

    async def status(self, request: Request) -> Response:
        stats = self.ex.stats()
        return _json({"queue": stats.outstanding, "num_workers": self.ex.cfg.concurrency})

    async def _body(self, request: Request, held: _Held) -> bytes | Refusal | None:
        """The body, read within `max_body_mb` and the admission's byte budget; None when the
        client hung up before sending all of it."""
        limit = self.http.max_body_mb << 20
        too_large = Refusal(413, f"the body exceeds {self.http.max_body_mb} MiB")
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            return too_large
        chunks: list[bytes] = []
        try:
            async for chunk in request.stream():
                if held.bytes + len(chunk) > limit:
                    return too_large
                if not self.admission.take_bytes(len(chunk)):
                    return Refusal(503, "overloaded: too many request bytes in flight, retry later")
                held.bytes += len(chunk)
                chunks.append(chunk)
        except ClientDisconnect:
            client = request.client
            who = f"{client.host}:{client.port}" if client else "a client"
            log.info(
                "%s hung up while sending %s (%d bytes read)", who, request.url.path, held.bytes
            )
            return None
        return b"".join(chunks)

    async def _parse(self, parse: Callable[[bytes, SandboxConfig], T], body: bytes) -> T:
        """`parse(body)`, in a worker thread for a body over `PARSE_INLINE_BYTES`."""
        if len(body) <= PARSE_INLINE_BYTES:
            return parse(body, self.ex.cfg)
        return await anyio.to_thread.run_sync(parse, body, self.ex.cfg)

    async def _run_all(
        self, request: Request, runs: list[ExecRequest]
    ) -> list[ExecResult] | Refusal | None:
        """The results of `runs` (run concurrently); None when the client hung up first (its
        runs are then cancelled in the sandbox rather than left to their time limits); a 503
        `Refusal` when the service stopped them at the end of its drain."""
        results: list[ExecResult | None] = [None] * len(runs)

        async def one(i: int, run: ExecRequest) -> None:
            results[i] = await self.ex.run(run)

        async def watch(scope: anyio.CancelScope) -> None:
            # the body has been read: the next ASGI message is the client's disconnect
            while (await request.receive())["type"] != "http.disconnect":
                pass
            scope.cancel()

        async def stop(scope: anyio.CancelScope) -> None:
            await self.abort.wait()
            scope.cancel()

        async with anyio.create_task_group() as outer:
            outer.start_soon(watch, outer.cancel_scope)
            outer.start_soon(stop, outer.cancel_scope)
            async with anyio.create_task_group() as tg:
                for i, run in enumerate(runs):
                    tg.start_soon(one, i, run)
            outer.cancel_scope.cancel()
        done = [r for r in results if r is not None]
        if len(done) == len(runs):
            return done
        return Refusal(503, SHUTTING_DOWN) if self.abort.is_set() else None

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
        if body is None:
            return _json({"detail": "the client hung up"}, 499)  # nobody reads it
        if isinstance(body, Refusal):
            return refusal_response(body, CODE_JUDGE, retry)
        parse = code_judge.parse_batch if batch else code_judge.parse_submission
        parsed = await self._parse(parse, body)
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
        if isinstance(results, Refusal):
            return refusal_response(results, CODE_JUDGE, retry)
        if not batch and results[0].infra in RETRY_LATER:
            refusal = Refusal(503, f"overloaded: {results[0].stderr}, retry later")
            return refusal_response(refusal, CODE_JUDGE, retry)
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
            if body is None:
                return _json({"detail": "the client hung up"}, 499)  # nobody reads it
            if isinstance(body, Refusal):
                return refusal_response(body, SANDBOX_FUSION, retry)
            parsed = await self._parse(sandbox_fusion.parse_run_code, body)
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
            if isinstance(results, Refusal):
                return refusal_response(results, SANDBOX_FUSION, retry)
            result = results[0]
            if result.infra in RETRY_LATER:
                refusal = Refusal(503, f"overloaded: {result.stderr}, retry later")
                return refusal_response(refusal, SANDBOX_FUSION, retry)
            return _json(sandbox_fusion.run_code_response(result))
        finally:
            self.admission.release(held.items, held.bytes)


async def _pong(request: Request) -> Response:
    return JSONResponse("pong")


class _Gate:
    """ASGI middleware: counts the requests in flight (for the drain) and, once the front is
    draining, refuses new ones with the overload status and `Connection: close`."""

    def __init__(self, app: ASGIApp, front: Front) -> None:
        self.app, self.front = app, front

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.front.draining:
            retry = self.front.http.retry_after_s
            response = refusal_response(Refusal(503, SHUTTING_DOWN), api_of(scope["path"]), retry)
            response.headers["Connection"] = "close"
            await response(scope, receive, send)
            return
        self.front.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.front.in_flight -= 1
