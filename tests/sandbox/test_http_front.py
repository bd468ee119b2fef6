"""The HTTP front: in-process over an in-memory executor (admission, access, status codes), then
served on a real port with the real sandbox, on asyncio and trio, called the way rStar2-Agent's
tool, code-judge's own client and verl's SandboxFusion client call their services."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import shutil
import ssl
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import anyio
import httpx2
import pytest
import requests

from rstar2.config import ConfigError
from rstar2.sandbox.code_judge import SCRIPT_END
from rstar2.sandbox.config import SandboxConfig
from rstar2.sandbox.executor import ExecutorStats
from rstar2.sandbox.http_front import Front, HttpConfig
from rstar2.sandbox.http_server import serve_http
from rstar2.wire import ExecRequest, ExecResult

pytestmark = pytest.mark.anyio
TOKEN = "test-token-0123456789abcdef"
LIGHT = SandboxConfig(concurrency=2, preload=[], warmup=False, timeout_s=1.0)


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return request.param


class FakeExecutor:
    """Answers `ran CODE`; with `hold` set, every run waits for it; `answers` overrides by code."""

    def __init__(self) -> None:
        self.cfg = LIGHT
        self.hold: anyio.Event | None = None
        self.running = 0
        self.answers: dict[str, ExecResult] = {}

    async def run(self, request: ExecRequest) -> ExecResult:
        code = request.code.removesuffix(SCRIPT_END)
        self.running += 1
        try:
            if self.hold is not None:
                await self.hold.wait()
        finally:
            self.running -= 1
        if code in self.answers:
            return self.answers[code]
        return ExecResult(id=request.id, status="ok", stdout=f"ran {code}\n", wall_s=0.5)

    def stats(self) -> ExecutorStats:
        return ExecutorStats(self.running, 0, 0, 0, 0)


@dataclass
class InProcess:
    client: httpx2.AsyncClient
    fake: FakeExecutor
    front: Front


async def in_process(**http: object) -> AsyncIterator[InProcess]:
    fake = FakeExecutor()
    front = Front(fake, HttpConfig(**http))  # type: ignore[arg-type]
    transport = httpx2.ASGITransport(app=front.app())
    async with httpx2.AsyncClient(transport=transport, base_url="http://front") as client:
        yield InProcess(client, fake, front)


@pytest.fixture
async def small() -> AsyncIterator[InProcess]:
    async for it in in_process(max_items=2, max_body_mb=1, max_pending_mb=2, retry_after_s=3):
        yield it


def sub(code: str, **kw: object) -> dict[str, object]:
    return {"type": "python", "solution": code, **kw}


def run_code(code: str, **kw: object) -> dict[str, object]:
    return {"code": code, "language": "python", **kw}


async def test_each_route_answers_in_its_api_shape(small: InProcess) -> None:
    c = small.client
    one = (await c.post("/run", json=sub("a", sub_id="s1"))).json()
    assert (one["sub_id"], one["stdout"], one["run_success"], one["cost"]) == (
        "s1",
        "ran a\n",
        True,
        0.5,
    )
    judged = (await c.post("/judge", json=sub("a", expected_output="ran b"))).json()
    assert (judged["run_success"], judged["success"], "stdout" in judged) == (True, False, False)
    batch = {"type": "batch", "sub_id": "B", "submissions": [sub("x"), sub("y")]}
    for path in ("/run/batch", "/run/long-batch", "/judge/batch", "/judge/long-batch"):
        got = (await c.post(path, json=batch)).json()
        assert got["sub_id"] == "B" and [r["success"] for r in got["results"]] == [True, True]
    assert (await c.post("/run/batch", json=batch)).json()["results"][1]["stdout"] == "ran y\n"
    sf = (await c.post("/run_code", json=run_code("z"))).json()
    assert (sf["status"], sf["run_result"]["stdout"]) == ("Success", "ran z\n")
    assert (await c.get("/status")).json() == {"queue": 0, "num_workers": LIGHT.concurrency}
    assert (await c.get("/ping")).json() == (await c.get("/v1/ping")).json() == "pong"


async def test_bad_requests_get_a_4xx_with_a_message(small: InProcess) -> None:
    c = small.client
    cases = [
        (await c.post("/run", content=b"{oops"), 400, "JSON"),
        (await c.post("/run", json={"type": "python"}), 422, "solution"),
        (await c.post("/run/batch", json={"submissions": []}), 422, "length"),
        (await c.post("/run_code", json=run_code("1", language="go")), 422, "Python only"),
        (await c.post("/run", content=b"x" * (1 << 20 | 1)), 413, "1 MiB"),
    ]
    for response, status, words in cases:
        assert response.status_code == status and words in response.json()["detail"]
    assert (await c.get("/run")).status_code == 405
    assert (await c.post("/nowhere", json={})).status_code == 404
    assert small.front.admission.items == small.front.admission.bytes == 0


async def test_overload_is_refused_at_once_with_a_retryable_status(small: InProcess) -> None:
    c, fake = small.client, small.fake
    fake.hold = anyio.Event()
    batch = {"type": "batch", "submissions": [sub("1"), sub("2")]}
    async with anyio.create_task_group() as tg:
        tg.start_soon(functools.partial(c.post, "/run/long-batch", json=batch))
        while fake.running < 2:
            await anyio.sleep(0.01)
        with anyio.fail_after(2):  # refused at once, not queued
            busy = await c.post("/run", json=sub("3"))
            busy_sf = await c.post("/run_code", json=run_code("3"))
        assert (busy.status_code, busy.headers["retry-after"]) == (503, "3")
        assert (busy_sf.status_code, busy_sf.headers["retry-after"]) == (504, "3")
        assert "overloaded" in busy.json()["detail"]
        never = await c.post("/run/batch", json={"submissions": [sub("x")] * 3})
        assert never.status_code == 413 and "split" in never.json()["detail"]
        fake.hold.set()
    assert small.front.admission.items == small.front.admission.bytes == 0
    assert (await c.post("/run", json=sub("4"))).status_code == 200


async def test_body_bytes_in_flight_are_bounded(small: InProcess) -> None:
    c, fake = small.client, small.fake
    fake.hold = anyio.Event()
    big = sub("x" * (1 << 19), sub_id="big")  # 0.5 MiB of code: room for three bodies in 2 MiB
    async with anyio.create_task_group() as tg:
        tg.start_soon(functools.partial(c.post, "/run", json=big))
        while fake.running < 1:
            await anyio.sleep(0.01)
        front = small.front
        front.admission.max_bytes = front.admission.bytes + 100  # nearly full
        refused = await c.post("/run", json=big)
        assert refused.status_code == 503 and "bytes" in refused.json()["detail"]
        fake.hold.set()
    assert small.front.admission.bytes == 0


async def test_a_full_executor_queue_reads_as_each_apis_retry_signal(small: InProcess) -> None:
    c, fake = small.client, small.fake
    fake.answers["q"] = ExecResult(
        id="q", status="rejected", stderr="queue full", infra="queue_full"
    )
    batch = (await c.post("/run/long-batch", json={"submissions": [sub("q"), sub("ok")]})).json()
    assert [r["reason"] for r in batch["results"]] == ["queue_timeout", ""]
    sf = await c.post("/run_code", json=run_code("q"))
    assert sf.status_code == 504 and "retry-after" in sf.headers


async def test_with_a_token_every_route_needs_it() -> None:
    async for it in in_process(token=TOKEN):
        c = it.client
        for path in ("/ping", "/status"):
            assert (await c.get(path)).status_code == 401
        denied = await c.post(
            "/run_code", json=run_code("1"), headers={"Authorization": "Bearer nope"}
        )
        assert denied.status_code == 401 and "token" in denied.json()["detail"]
        assert it.fake.running == 0
        ok = await c.post(
            "/run_code", json=run_code("1"), headers={"Authorization": f"Bearer {TOKEN}"}
        )
        assert ok.status_code == 200
        basic = await c.get("/status", auth=("anyone", TOKEN))
        assert basic.status_code == 200


async def test_serving_off_loopback_without_a_token_is_refused() -> None:
    with pytest.raises(ConfigError, match="token"):
        await serve_http(LIGHT, HttpConfig(host="0.0.0.0", port=0))


# -- the real sandbox on a real port -------------------------------------------------------


def verl_call(url: str) -> tuple[int, dict[str, object]]:
    """verl's call_sandbox_api: the same headers, body and `requests` call."""
    payload = json.dumps(
        {
            "compile_timeout": 1,
            "run_timeout": 1,
            "code": "print(input()[::-1])",
            "stdin": "abc",
            "memory_limit_MB": 1024,
            "language": "python",
            "files": {},
            "fetch_files": [],
        }  # fmt: skip
    )
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    response = requests.post(url, headers=headers, data=payload, timeout=12)
    return response.status_code, response.json()


async def _rstar2_agent_batch(url: str) -> list[str]:
    """rStar2-Agent's tool: aiohttp posts a batch to /run/long-batch, then reads each result."""
    submissions = [
        {"type": "python", "solution": "print(int(input()) * 2)", "input": "21"},
        {"type": "python", "solution": "import time; time.sleep(3)", "input": None},
    ]
    async with aiohttp.ClientSession() as session:
        async with session.post(
            url, json={"type": "batch", "submissions": submissions}
        ) as response:
            response.raise_for_status()
            results = (await response.json())["results"]
    texts = []
    for r in results:
        head = (
            "Tool call success"
            if r["run_success"] and r["success"]
            else f"Tool call failure {r['reason']}"
        )
        texts.append(f"{head}|{r['stdout']}|{bool(r['stderr'])}|{r['cost']:.2f}")
    return texts


def rstar2_agent_call(host_addr: str, host_port: int) -> list[str]:
    """The tool's URL is built from host_addr and host_port: the token rides in host_addr.
    aiohttp is asyncio-only: it runs on its own loop in a worker thread, on either backend."""
    return asyncio.run(_rstar2_agent_batch(f"http://{host_addr}:{host_port}/run/long-batch"))


@dataclass
class CodeJudgeClientResult:
    """code-judge's judge_client.SubmissionResult: built with **result, so keys must match."""

    sub_id: str
    success: bool
    run_success: bool
    cost: float
    stdout: str | None = None
    stderr: str | None = None
    reason: str = ""


async def test_served_front_works_with_the_clients_unchanged(anyio_backend: str) -> None:
    async with anyio.create_task_group() as tg:
        port = await tg.start(serve_http, LIGHT, HttpConfig(port=0, token=TOKEN))
        base = f"http://127.0.0.1:{port}"
        # verl takes a URL: the token rides in it as Basic auth, which `requests` sends
        status, resp = await anyio.to_thread.run_sync(
            verl_call, f"http://rstar2:{TOKEN}@127.0.0.1:{port}/run_code"
        )
        assert status == 200 and resp["status"] == "Success"
        run = resp["run_result"]
        assert (run["status"], run["stdout"], run["return_code"], resp["compile_result"]) == (
            "Finished",
            "cba\n",
            0,
            None,
        )
        texts = await anyio.to_thread.run_sync(rstar2_agent_call, f"rstar2:{TOKEN}@127.0.0.1", port)
        assert texts[0].startswith("Tool call success|42\n|False|")
        assert texts[1].startswith("Tool call failure worker_timeout||False|")
        denied = await anyio.to_thread.run_sync(
            lambda: requests.post(f"{base}/run_code", json={}, timeout=5)
        )
        assert denied.status_code == 401
        body = {
            "type": "batch",
            "submissions": [
                {
                    "sub_id": None,
                    "type": "python",
                    "solution": "print(9)\n9 * 9",  # python FILE shows no 81
                    "input": None,
                    "expected_output": "9",
                }
            ],
        }
        # code-judge's JudgeClient: requests, json=asdict(batch), URL as given (token in it)
        judge_url = f"http://rstar2:{TOKEN}@127.0.0.1:{port}"
        got = await anyio.to_thread.run_sync(
            lambda: requests.post(f"{judge_url}/run/long-batch", json=body, timeout=30).json()
        )
        status_json = await anyio.to_thread.run_sync(
            lambda: requests.get(f"{judge_url}/status", timeout=10).json()
        )
        results = [CodeJudgeClientResult(**r) for r in got["results"]]
        assert (results[0].success, results[0].stdout) == (True, "9\n")
        assert set(status_json) == {"queue", "num_workers"}
        tg.cancel_scope.cancel()


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
async def test_served_over_tls_with_a_certificate(anyio_backend: str, tmp_path: Path) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(key), "-out", str(cert), "-subj", "/CN=localhost",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    http = HttpConfig(port=0, token=TOKEN, certfile=str(cert), keyfile=str(key))
    assert http.tls_problem() is None
    async with anyio.create_task_group() as tg:
        port = await tg.start(serve_http, LIGHT, http)
        trusted = ssl.create_default_context(cafile=str(cert))
        async with httpx2.AsyncClient(verify=trusted, auth=("u", TOKEN)) as client:
            got = await client.post(f"https://127.0.0.1:{port}/run", json=sub("print(5)"))
        assert got.json()["stdout"] == "5\n"
        with pytest.raises(httpx2.TransportError):  # plain HTTP gets no answer: TLS only
            async with httpx2.AsyncClient(timeout=5) as client:
                await client.get(f"http://127.0.0.1:{port}/ping")
        tg.cancel_scope.cancel()


async def test_a_certificate_that_does_not_load_stops_the_server_at_start(
    anyio_backend: str, tmp_path: Path
) -> None:
    # called as a library (not through `sandbox serve`, which checks first): one ConfigError
    # before a socket is bound or a zygote started
    text = tmp_path / "cert.txt"
    text.write_text("not a certificate\n")
    http = HttpConfig(port=0, certfile=str(text), keyfile=str(text))
    assert http.tls_problem() is not None
    with pytest.raises(ConfigError, match=r"config key 'certfile': .*a PEM certificate"):
        await serve_http(LIGHT, http)
    assert HttpConfig(port=0).tls_problem() is None


async def test_a_client_that_hangs_up_frees_the_sandbox_at_once(anyio_backend: str) -> None:
    slow = run_code("import time; time.sleep(5)", run_timeout=10)
    async with anyio.create_task_group() as tg:
        patient = SandboxConfig(concurrency=2, preload=[], warmup=False, timeout_s=10.0)
        port = await tg.start(serve_http, patient, HttpConfig(port=0))
        base = f"http://127.0.0.1:{port}"
        async with httpx2.AsyncClient(timeout=0.5) as client:
            for path, body in (
                ("/run_code", slow),
                ("/run/batch", {"submissions": [sub(slow["code"])] * 2}),
            ):
                with pytest.raises(httpx2.ReadTimeout):
                    await client.post(f"{base}{path}", json=body)
                with anyio.fail_after(2):  # long before the 5 s sleep ends
                    while (await client.get(f"{base}/status")).json()["queue"] > 0:
                        await anyio.sleep(0.05)
        tg.cancel_scope.cancel()


async def test_a_requests_own_limits_are_capped_as_on_the_zeromq_service(
    anyio_backend: str,
) -> None:
    capped = SandboxConfig(
        concurrency=2, preload=[], warmup=False, timeout_s=1.0, max_timeout_s=1.5
    )
    greedy = run_code("import time; time.sleep(20)", run_timeout=100, memory_limit_MB=10**6)
    async with anyio.create_task_group() as tg:
        port = await tg.start(serve_http, capped, HttpConfig(port=0))
        async with httpx2.AsyncClient(timeout=10) as client:
            with anyio.fail_after(6):  # cut at max_timeout_s, not at the asked-for 100 s
                resp = (await client.post(f"http://127.0.0.1:{port}/run_code", json=greedy)).json()
        tg.cancel_scope.cancel()
    assert (resp["status"], resp["run_result"]["status"]) == ("Failed", "TimeLimitExceeded")
    assert 1.0 < resp["run_result"]["execution_time"] < 4.0


# -- issue 35: bad bytes, restarts, hang-ups, large bodies, draining -------------------------


async def test_bytes_that_are_not_utf8_are_a_400_with_a_json_detail(small: InProcess) -> None:
    c = small.client
    bad = b'{"type": "python", "solution": "print(1)\xff"}'
    bad_batch = b'{"submissions": [{"type": "python", "solution": "\xc3("}]}'
    bad_fusion = b'{"code": "\xff", "language": "python"}'
    for path, body in (
        ("/run", bad),
        ("/judge", bad),
        ("/run/batch", bad_batch),
        ("/judge/long-batch", bad_batch),
        ("/run_code", bad_fusion),
    ):
        response = await c.post(path, content=body)
        assert response.status_code == 400, (path, response.text)
        assert "UTF-8" in response.json()["detail"]
    assert small.front.admission.items == small.front.admission.bytes == 0


async def test_a_restarting_sandbox_reads_as_each_apis_retry_signal(small: InProcess) -> None:
    c, fake = small.client, small.fake
    down = ExecResult(id="u", status="rejected", stderr="sandbox restarting", infra="unavailable")
    fake.answers["u"] = down
    for path in ("/run", "/judge"):
        got = await c.post(path, json=sub("u"))
        assert got.status_code == 503 and got.headers["retry-after"] == "3"
        assert "restarting" in got.json()["detail"]
    sf = await c.post("/run_code", json=run_code("u"))
    assert sf.status_code == 504 and sf.headers["retry-after"] == "3"
    batch = (await c.post("/run/long-batch", json={"submissions": [sub("u"), sub("ok")]})).json()
    assert [r["reason"] for r in batch["results"]] == ["queue_timeout", ""]


async def test_a_large_body_is_parsed_off_the_event_loop(
    small: InProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    from rstar2.sandbox import code_judge, http_front

    where: list[str] = []
    real = code_judge.parse_batch

    def spy(body: bytes, cfg: SandboxConfig) -> object:
        where.append(threading.current_thread().name)
        return real(body, cfg)

    monkeypatch.setattr(code_judge, "parse_batch", spy)
    monkeypatch.setattr(http_front, "PARSE_INLINE_BYTES", 1000)
    small.front.http.max_body_mb = small.front.http.max_pending_mb = 8
    small.front.admission.max_bytes = 8 << 20
    small.front.admission.max_items = 100
    small_batch = {"submissions": [sub("a")]}
    large_batch = {"submissions": [sub("b" * 100)] * 50}
    for body in (small_batch, large_batch):
        assert (await small.client.post("/run/batch", json=body)).status_code == 200
    main = threading.main_thread().name
    assert where[0] == main and where[1] != main, where


async def test_while_draining_a_new_request_is_refused_and_its_connection_closed(
    small: InProcess,
) -> None:
    small.front.draining = True
    got = await small.client.post("/run", json=sub("a"))
    assert got.status_code == 503 and got.headers["connection"] == "close"
    assert got.headers["retry-after"] == "3" and "shutting down" in got.json()["detail"]
    assert (await small.client.post("/run_code", json=run_code("a"))).status_code == 504


async def test_a_client_hanging_up_mid_body_is_one_info_line(
    anyio_backend: str, caplog: pytest.LogCaptureFixture
) -> None:
    async with anyio.create_task_group() as tg:
        port = await tg.start(serve_http, LIGHT, HttpConfig(port=0))
        with caplog.at_level("INFO"):
            for path in ("/run", "/run_code"):
                stream = await anyio.connect_tcp("127.0.0.1", port)
                head = (
                    f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    "Content-Length: 100000\r\n\r\n"
                )
                await stream.send(head.encode() + b'{"type": "python", "solu')
                await anyio.sleep(0.2)
                await stream.aclose()
            async with httpx2.AsyncClient(timeout=10) as client:  # and the service goes on
                got = await client.post(f"http://127.0.0.1:{port}/run", json=sub("print(3)"))
                assert got.json()["stdout"] == "3\n"
            with anyio.fail_after(5):
                while caplog.text.count("hung up while sending") < 2:
                    await anyio.sleep(0.05)
        tg.cancel_scope.cancel()
    hangups = [r for r in caplog.records if "hung up" in r.getMessage()]
    assert [r.levelname for r in hangups] == ["INFO", "INFO"]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
    assert "Traceback" not in caplog.text and "ClientDisconnect" not in caplog.text
