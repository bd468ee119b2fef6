"""How long one large request body holds the sandbox HTTP front's event loop.

Serves the front in-process on a free port, pings `/ping` from the same event loop every 5 ms,
and posts one large batch body: `--shape many` (600,000 small submissions, 62 MB, refused as too
large once parsed) or `--shape few` (50 submissions of 1 MB, 50 MB, run). Prints the request's
time, the pings answered meanwhile and the longest gap between two pings. `--inline` parses
every body on the event loop (as before issue 35) instead of in a worker thread above 1 MiB.

    .venv/bin/python scripts/http_body_stall.py --shape many [--inline]
"""

from __future__ import annotations

import argparse
import json
import time

import anyio
import httpx2

from rstar2.sandbox import http_front
from rstar2.sandbox.config import SandboxConfig
from rstar2.sandbox.http_front import HttpConfig
from rstar2.sandbox.http_server import serve_http


def body_for(shape: str) -> bytes:
    if shape == "many":
        sub = {"type": "python", "solution": "print(1)" + " " * 60}
        return json.dumps({"submissions": [sub] * 600_000}).encode()
    sub = {"type": "python", "solution": "#" + "x" * 999_000 + "\nprint(1)"}
    return json.dumps({"submissions": [sub] * 50}).encode()


async def measure(body: bytes) -> str:
    cfg = SandboxConfig(concurrency=4, preload=[], warmup=False)
    http = HttpConfig(port=0, max_body_mb=64, max_pending_mb=512)
    async with anyio.create_task_group() as tg:
        port = await tg.start(serve_http, cfg, http)
        base = f"http://127.0.0.1:{port}"
        pings: list[float] = []
        done = anyio.Event()

        async def pinger() -> None:
            async with httpx2.AsyncClient(base_url=base) as client:
                while not done.is_set():
                    await client.get("/ping")
                    pings.append(time.perf_counter())
                    await anyio.sleep(0.005)

        tg.start_soon(pinger)
        await anyio.sleep(0.5)
        async with httpx2.AsyncClient(base_url=base, timeout=120) as client:
            start = time.perf_counter()
            headers = {"content-type": "application/json"}
            response = await client.post("/run/batch", content=body, headers=headers)
            took = time.perf_counter() - start
        done.set()
        during = [t for t in pings if t >= start]
        gap = max(b - a for a, b in zip(pings, pings[1:], strict=False))
        tg.cancel_scope.cancel()
    return (
        f"body {len(body) / 1e6:.1f} MB -> HTTP {response.status_code} in {took:.2f} s; "
        f"{len(during)} pings answered meanwhile; longest gap between pings {gap * 1000:.0f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=["many", "few"], default="many")
    parser.add_argument("--inline", action="store_true", help="parse on the event loop")
    args = parser.parse_args()
    if args.inline:
        http_front.PARSE_INLINE_BYTES = 1 << 40
    mode = "on the event loop" if args.inline else "in a worker thread"
    print(f"parsed {mode}: {anyio.run(measure, body_for(args.shape))}")


if __name__ == "__main__":
    main()
