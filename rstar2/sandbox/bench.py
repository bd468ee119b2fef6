"""`rstar2 sandbox bench`: the executor against a fresh-subprocess-per-request baseline.

Three workloads (a trivial print, a numpy snippet, a sympy snippet), each run closed-loop for a
fixed time: `concurrency` clients each send a request as soon as their last one came back, so a
latency is one request's round trip. The executor runs with every isolation layer it can get.
The baseline is what rStar's code-judge and nanochat do, made as strong as it honestly can be:
the same interpreter, started with `-I`, rlimits set in the child, no shell, swept over
concurrencies and reported at its best. The burst submits N trivial requests at once (45,000:
the paper's per-step peak) and counts answers, duplicates and losses, sampling the memory of
this process plus the executor's processes.

The snippets call nothing that the zygote's warm-up (`zygote_setup._warm`) calls with the same
arguments: the warm-up may fill lazy imports and first-call caches (that is what a warm zygote
is for), but a result it computed and cached (sympy caches results) would let the executor
answer from the cache a request the baseline computes (tests/sandbox/test_bench_snippets.py).

What it does not do: assert anything (it prints measured figures) or tune itself.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import anyio

from rstar2.sandbox import proctree
from rstar2.sandbox.config import SandboxConfig
from rstar2.sandbox.executor import Executor, open_executor
from rstar2.wire import ExecRequest

WORKLOADS = {
    "trivial": "print(1)",
    "numpy": (
        "import numpy as np\n"
        "a = np.random.default_rng(7).random((60, 60))\n"
        "print(round(float(np.linalg.det(a @ a.T + np.eye(60))), 3), np.sort(a[0])[:3])"
    ),
    "sympy": (
        "import sympy as sp\n"
        "x = sp.symbols('x')\n"
        "print(sp.factor(x**6 - 1), sp.solve(x**2 - 7*x + 12, x),\n"
        "      sp.integrate(x**3 * sp.sin(2*x), x))"
    ),
}


@dataclass
class Run:
    """One closed-loop measurement."""

    requests: int
    seconds: float
    latencies: list[float]
    failures: int

    @property
    def rps(self) -> float:
        return self.requests / self.seconds if self.seconds > 0 else 0.0

    def percentile_ms(self, q: float) -> float:
        if not self.latencies:
            return 0.0
        ordered = sorted(self.latencies)
        return 1000.0 * ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def closed_loop(call: Callable[[], Awaitable[bool]], clients: int, seconds: float) -> Run:
    """Run `clients` loops of `call` (True = success) for `seconds`."""
    latencies: list[float] = []
    failures = 0
    deadline = time.monotonic() + seconds

    async def client() -> None:
        nonlocal failures
        while time.monotonic() < deadline:
            start = time.monotonic()
            ok = await call()
            latencies.append(time.monotonic() - start)
            failures += not ok

    start = time.monotonic()
    async with anyio.create_task_group() as tg:
        for _ in range(clients):
            tg.start_soon(client)
    return Run(len(latencies), time.monotonic() - start, latencies, failures)


def _baseline_limits() -> None:
    """rlimits of a baseline child (what code-judge sets), applied between fork and exec."""
    resource.setrlimit(resource.RLIMIT_CPU, (5, 6))
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def baseline_once(code: str) -> bool:
    """One request the baseline way: a fresh `python -I` with rlimits."""
    done = subprocess.run(
        [os.path.realpath(sys.executable), "-I", "-c", code],
        capture_output=True, timeout=30, preexec_fn=_baseline_limits, check=False,
    )  # fmt: skip
    return done.returncode == 0


async def bench_baseline(code: str, sweep: list[int], seconds: float) -> dict[int, Run]:
    async def call() -> bool:
        return await anyio.to_thread.run_sync(baseline_once, code)

    runs = {}
    limiter = anyio.to_thread.current_default_thread_limiter()
    limiter.total_tokens = max(limiter.total_tokens, max(sweep) + 4)
    for clients in sweep:
        runs[clients] = await closed_loop(call, clients, seconds)
    return runs


async def bench_executor(ex: Executor, code: str, clients: int, seconds: float) -> Run:
    async def call() -> bool:
        result = await ex.run(ExecRequest(id="b", code=code))
        return result.status == "ok"

    await closed_loop(call, clients, min(1.0, seconds))  # warm-up, not counted
    return await closed_loop(call, clients, seconds)


async def bench_burst(ex: Executor, n: int) -> dict[str, float | int | dict[str, int]]:
    """Submit `n` trivial requests at once; count answers; sample peak memory (MiB)."""
    seen: Counter[str] = Counter()
    statuses: Counter[str] = Counter()
    peak = 0.0

    async def one(i: int) -> None:
        result = await ex.run(ExecRequest(id=str(i), code=f"print({i})"))
        seen[result.id] += 1
        statuses[result.status] += 1

    async def sample() -> None:
        nonlocal peak
        while True:
            own = proctree.rss_bytes([os.getpid()]) / (1 << 20)
            peak = max(peak, own + ex.memory_mb())
            await anyio.sleep(0.2)

    start = time.monotonic()
    async with anyio.create_task_group() as tg:
        tg.start_soon(sample)
        async with anyio.create_task_group() as burst:
            for i in range(n):
                burst.start_soon(one, i)
        tg.cancel_scope.cancel()
    return {
        "submitted": n,
        "answered": sum(seen.values()),
        "duplicates": sum(c - 1 for c in seen.values() if c > 1),
        "lost": n - len(seen),
        "peak_rss_mb": round(peak, 1),
        "seconds": round(time.monotonic() - start, 2),
        "statuses": dict(statuses),
    }


async def run_bench(
    cfg: SandboxConfig,
    seconds: float,
    sweep: list[int],
    burst: int,
    progress: Callable[[str], None],
) -> dict[str, object]:
    """Everything `rstar2 sandbox bench` reports, as one JSON-able object."""
    out: dict[str, object] = {"concurrency": cfg.concurrency, "cpus": os.cpu_count()}
    async with open_executor(cfg) as ex:
        out["isolation"] = {k: (v or "on") for k, v in ex.isolation.layers.items()}
        for name, code in WORKLOADS.items():
            mine = await bench_executor(ex, code, cfg.concurrency, seconds)
            progress(f"{name}: rstar2 {mine.rps:.1f} req/s; baseline sweep {sweep} ...")
            base = await bench_baseline(code, sweep, seconds / 2)
            best = max(base.values(), key=lambda r: r.rps)
            out[name] = {
                "rstar2_rps": round(mine.rps, 1),
                "baseline_rps": round(best.rps, 1),
                "ratio": round(mine.rps / best.rps, 2) if best.rps else None,
                "p50_ms": round(mine.percentile_ms(0.5), 1),
                "p99_ms": round(mine.percentile_ms(0.99), 1),
                "failures": mine.failures,
                "baseline_p50_ms": round(best.percentile_ms(0.5), 1),
                "baseline_p99_ms": round(best.percentile_ms(0.99), 1),
                "baseline_sweep": {str(c): round(r.rps, 1) for c, r in base.items()},
            }
            progress(f"{name}: {out[name]}")
        if burst > 0:
            progress(f"burst: submitting {burst} requests at once ...")
            out["burst"] = await bench_burst(ex, burst)
    return out
