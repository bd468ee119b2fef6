"""`rstar2 sandbox bench --http`: the bench's workloads through an HTTP code-execution service.

The workloads and the closed loop are `bench.py`'s (`WORKLOADS`, `closed_loop`): `clients`
loops, each sending its next request as soon as its last came back, for `seconds` per workload
and API after an uncounted warm-up. A request is one `POST /run` (code-judge's API; success =
HTTP 200 and `run_success`) or one `POST /run_code` (SandboxFusion's; success = HTTP 200 and
`status` "Success"), over keep-alive connections (httpx2, one pool of `clients` connections).

Two modes:
- no URL: rstar2's own HTTP front is started in-process on a free loopback port, over an
  executor that is also measured directly, so the report shows what HTTP costs;
- a URL: that service is measured as it is: rstar2's front elsewhere, or the code-judge or
  SandboxFusion deployment one wants to compare with (`apis` picks the one it speaks).

What it does not do: run the subprocess baseline or the burst (plain `rstar2 sandbox bench`
does), or check the answers beyond success.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import httpx2

from rstar2.config import UsageError
from rstar2.sandbox.bench import WORKLOADS, Run, bench_executor, closed_loop
from rstar2.sandbox.config import SandboxConfig
from rstar2.sandbox.executor import open_executor
from rstar2.sandbox.http_front import (
    CODE_JUDGE,
    SANDBOX_FUSION,
    Front,
    HttpConfig,
)
from rstar2.sandbox.http_gate import bind_socket
from rstar2.sandbox.http_server import serve_front

APIS = (CODE_JUDGE, SANDBOX_FUSION)


def request_for(api: str, code: str) -> tuple[str, dict[str, object]]:
    """The route and JSON body of one request in `api`."""
    if api == CODE_JUDGE:
        return "/run", {"type": "python", "solution": code}
    if api == SANDBOX_FUSION:
        return "/run_code", {"code": code, "language": "python"}
    raise ValueError(f"unknown API {api!r}: expected one of {APIS}")


def succeeded(api: str, status: int, body: Any) -> bool:
    """Did the service run the code successfully (HTTP 200 and the API's own success)?"""
    if status != 200 or not isinstance(body, dict):
        return False
    if api == CODE_JUDGE:
        return body.get("run_success") is True
    return body.get("status") == "Success"


def summary(run: Run) -> dict[str, float | int]:
    return {
        "rps": round(run.rps, 1),
        "p50_ms": round(run.percentile_ms(0.5), 1),
        "p99_ms": round(run.percentile_ms(0.99), 1),
        "requests": run.requests,
        "failures": run.failures,
    }


async def bench_api(
    client: httpx2.AsyncClient, api: str, code: str, clients: int, seconds: float
) -> Run:
    path, body = request_for(api, code)

    async def call() -> bool:
        try:
            response = await client.post(path, json=body)
            answer = response.json()
        except (httpx2.TransportError, ValueError):  # unreachable, or not a JSON answer
            return False
        return succeeded(api, response.status_code, answer)

    await closed_loop(call, clients, min(1.0, seconds))  # warm-up, not counted
    return await closed_loop(call, clients, seconds)


def open_client(url: str, clients: int, token: str | None) -> httpx2.AsyncClient:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    limits = httpx2.Limits(max_connections=clients, max_keepalive_connections=clients)
    return httpx2.AsyncClient(base_url=url, headers=headers, limits=limits, timeout=120.0)


async def check_reachable(url: str, token: str | None) -> None:
    """Any HTTP answer from `url` (a 404 too) will do; none at all is a UsageError naming the
    flag, before a bench that would count nothing but failures."""
    try:
        async with open_client(url, 1, token) as client:
            await client.get("/", timeout=10.0)
    except (httpx2.TransportError, httpx2.InvalidURL) as e:
        why = " ".join(str(e).split()) or type(e).__name__
        raise UsageError(f"argument --http: cannot reach {url!r} ({why})") from None


def all_failed(out: dict[str, Any]) -> bool:
    """Whether every request a bench report counts failed (and it counted some)."""
    runs = [w for name in WORKLOADS for w in (out.get(name) or {}).values()]
    counted = sum(w["requests"] for w in runs)
    return counted > 0 and sum(w["failures"] for w in runs) == counted


async def _measure(
    url: str,
    apis: list[str],
    clients: int,
    seconds: float,
    token: str | None,
    progress: Callable[[str], None],
) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    async with open_client(url, clients, token) as client:
        for name, code in WORKLOADS.items():
            out[name] = {}
            for api in apis:
                out[name][api] = summary(await bench_api(client, api, code, clients, seconds))
                progress(f"{name} via {api}: {out[name][api]}")
    return out


async def run_http_bench(
    cfg: SandboxConfig,
    url: str | None,
    apis: list[str],
    seconds: float,
    token: str | None,
    progress: Callable[[str], None],
) -> dict[str, object]:
    """Everything `rstar2 sandbox bench --http [URL]` reports, as one JSON-able object."""
    clients = cfg.concurrency
    out: dict[str, object] = {"clients": clients, "apis": apis}
    if url is not None:
        out["url"] = url
        await check_reachable(url, token)
        out.update(await _measure(url, apis, clients, seconds, token, progress))
        return out
    http = HttpConfig(host="127.0.0.1", port=0)
    sock = bind_socket(http.host, http.port, "--http")
    async with open_executor(cfg) as ex, anyio.create_task_group() as tg:
        out["isolation"] = {k: (v or "on") for k, v in ex.isolation.layers.items()}
        port = await tg.start(serve_front, Front(ex, http), sock, http)
        out["url"] = f"http://127.0.0.1:{port} (in-process front)"
        measured = await _measure(
            f"http://127.0.0.1:{port}", apis, clients, seconds, None, progress
        )
        for name, code in WORKLOADS.items():
            direct = await bench_executor(ex, code, clients, seconds)
            measured[name]["direct"] = summary(direct)
            progress(f"{name} direct: {measured[name]['direct']}")
        out.update(measured)
        tg.cancel_scope.cancel()
    return out
