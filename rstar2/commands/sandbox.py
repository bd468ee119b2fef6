"""`rstar2 sandbox exec|bench|serve`: the isolated Python code executor from the command line.

- `exec`: JSON lines `{"id", "code", "stdin"?, "timeout_s"?, "memory_mb"?}` on stdin (`input`,
  the tool protocol's name, is an alias of `stdin`; giving both is rejected); exactly one JSON
  result line per input line on stdout, in completion order. A bad line gets a result with
  status `rejected` and a message, and processing goes on. At most 4 x `concurrency`
  requests are in flight; the next line is read when one finishes, so the memory stays bounded
  however many lines come. docs/usage.md lists the fields; the line protocol is
  `rstar2.commands.sandbox_exec`.
- `bench [--json]`: executor vs fresh-subprocess baseline on three workloads, plus a burst;
  `bench --http [URL]`: the same workloads through an HTTP service (`rstar2.sandbox.http_bench`).
- `soak`: the HTTP service in its own process under load while its zygote and children are
  killed on a schedule; reports answered, correct, crossed, errors by kind and recovery times
  (`rstar2.sandbox.soak`); exit 1 when the service failed it.
- `serve --bind ADDR`: the executor as a ZeroMQ service (see `rstar2.sandbox.service`);
  `serve --http HOST:PORT`: as an HTTP service speaking code-judge's and SandboxFusion's APIs
  (see `rstar2.sandbox.http_front`); a non-loopback HOST needs a token. SIGTERM or SIGINT
  drains it (`--drain-s`; a second signal cuts the drain short) and exits 0; `--bind` stops its
  executor on either signal and exits 0.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import socket
import sys
from pathlib import Path
from typing import Any

import anyio

from rstar2.actors.sockets import CurveKeys, is_local_endpoint
from rstar2.commands.arguments import (
    int_list,
    nonnegative_float,
    nonnegative_int,
    positive_float,
    positive_int,
    zmq_endpoint,
)
from rstar2.commands.sandbox_exec import run_exec
from rstar2.config import ConfigError, UsageError, from_dict, load_file, override, to_dict
from rstar2.sandbox.bench import WORKLOADS, run_bench
from rstar2.sandbox.config import SandboxConfig
from rstar2.sandbox.http_bench import APIS, all_failed, run_http_bench
from rstar2.sandbox.http_front import HttpConfig
from rstar2.sandbox.http_gate import bind_socket, token_from
from rstar2.sandbox.http_server import Shutdown, serve_http
from rstar2.sandbox.service import serve_sandbox
from rstar2.sandbox.soak import SoakConfig, passed, run_soak

TOKEN_ENV = "RSTAR2_SANDBOX_TOKEN"
log = logging.getLogger(__name__)


def probability(text: str) -> float:
    """A number in [0, 1]."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {text!r}")
    return value


def host_port(text: str) -> tuple[str, int]:
    """HOST:PORT (an IPv6 host in brackets: [::1]:8080)."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, e.g. 127.0.0.1:8080, got {text!r}")
    return host.strip("[]"), int(port)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    p_exec = sub.add_parser("exec", help="run JSON-line requests from stdin")
    p_bench = sub.add_parser(
        "bench", help="throughput/latency vs a subprocess-per-request baseline"
    )
    p_serve = sub.add_parser("serve", help="serve the executor on a ZeroMQ address")
    p_soak = sub.add_parser(
        "soak", help="the HTTP service under load while its zygote and children are killed"
    )
    for p in (p_exec, p_bench, p_serve, p_soak):
        _add_executor_options(p)
    _add_bench_options(p_bench)
    _add_soak_options(p_soak)
    _add_serve_options(p_serve)
    for p in (p_serve, p_bench):
        p.add_argument(
            "--token-file", type=Path, help=f"--http: file holding the token (or ${TOKEN_ENV})"
        )


def _add_executor_options(p: argparse.ArgumentParser) -> None:
    """The options every action shares: the [sandbox] config and its overrides."""
    sandbox = SandboxConfig()
    p.add_argument("--config", type=Path, help="TOML file with a [sandbox] table")
    p.add_argument(
        "--concurrency", type=positive_int,
        help=f"children running at once (default: [sandbox] concurrency, {sandbox.concurrency})",
    )  # fmt: skip
    p.add_argument(
        "--preload",
        help="comma-separated modules to pre-import ('' for none) (default: [sandbox] "
        f"preload, {','.join(sandbox.preload)})",
    )
    p.add_argument("--no-bwrap", action="store_true", help="do not use bubblewrap")
    p.add_argument(
        "--require-isolation", action="store_true", help="refuse to start with a layer off"
    )


def _add_bench_options(p_bench: argparse.ArgumentParser) -> None:
    p_bench.add_argument("--json", action="store_true", help="print one JSON object")
    p_bench.add_argument("--seconds", type=positive_float, default=5.0, help="per workload")
    p_bench.add_argument("--sweep", type=int_list, default="1,2,4,8", help="baseline concurrencies")
    p_bench.add_argument(
        "--burst", type=nonnegative_int, default=45000, help="burst size (0 to skip)"
    )
    p_bench.add_argument(
        "--http", nargs="?", const="", metavar="URL",
        help="through HTTP: rstar2's front in-process, or the service at URL",
    )  # fmt: skip
    p_bench.add_argument(
        "--api", choices=[*APIS, "both"], help="with --http: the API to call (default: both)"
    )


def _add_soak_options(p_soak: argparse.ArgumentParser) -> None:
    defaults = SoakConfig()
    p_soak.add_argument("--requests", type=positive_int, default=defaults.requests)
    p_soak.add_argument(
        "--in-flight", type=positive_int, default=defaults.in_flight, help="requests at once"
    )
    p_soak.add_argument(
        "--zygote-kill-every", type=nonnegative_float, default=defaults.zygote_kill_every_s,
        help="mean seconds between zygote kills (0: none)",
    )  # fmt: skip
    p_soak.add_argument(
        "--double-kill-share", type=probability, default=defaults.double_kill_share,
        help="share of zygote kills whose replacement is killed again while it starts",
    )  # fmt: skip
    p_soak.add_argument(
        "--child-kill-every", type=nonnegative_float, default=defaults.child_kill_every_s,
        help="mean seconds between kills of a request's child (0: none)",
    )  # fmt: skip
    p_soak.add_argument(
        "--deadline", type=positive_float, default=defaults.deadline_s,
        help="seconds one request may take, retries included, before it counts as unanswered",
    )  # fmt: skip
    p_soak.add_argument("--seed", type=nonnegative_int, default=defaults.seed)
    p_soak.add_argument("--json", action="store_true", help="print one JSON object")


def _add_serve_options(p_serve: argparse.ArgumentParser) -> None:
    where = p_serve.add_mutually_exclusive_group(required=True)
    where.add_argument(
        "--bind", type=zmq_endpoint, help="ZeroMQ: e.g. ipc:///tmp/sbx.sock, tcp://*:5555"
    )
    where.add_argument(
        "--http", type=host_port, metavar="HOST:PORT", help="HTTP (code-judge, SandboxFusion)"
    )
    p_serve.add_argument("--curve-keys", type=Path, help="JSON file with the four CURVE keys")
    p_serve.add_argument(
        "--max-items", type=positive_int, default=65536, help="--http: submissions in flight"
    )
    p_serve.add_argument(
        "--max-body-mb", type=positive_int, default=64, help="--http: largest request body"
    )
    p_serve.add_argument(
        "--drain-s",
        type=nonnegative_float,
        default=5.0,
        help="--http: on SIGTERM/SIGINT, seconds requests in flight get before a 503",
    )
    p_serve.add_argument("--tls-cert", type=Path, help="--http: serve HTTPS with this PEM cert")
    p_serve.add_argument("--tls-key", type=Path, help="--http: the PEM key of --tls-cert")


def load_config(args: argparse.Namespace) -> SandboxConfig:
    data: dict[str, Any] = {}
    if args.config is not None:
        data = load_file(args.config).get("sandbox", {})
    cfg = from_dict(SandboxConfig, data, "sandbox")
    if args.concurrency is not None:
        cfg = override(cfg, "concurrency", args.concurrency)
    if args.preload is not None:
        cfg = override(cfg, "preload", [m for m in args.preload.split(",") if m.strip()])
    if args.no_bwrap:
        cfg = override(cfg, "use_bwrap", False)
    if args.require_isolation:
        cfg = override(cfg, "require_isolation", True)
    log.info("sandbox config: %s", to_dict(cfg))
    return cfg


def _print_bench(out: dict[str, Any]) -> None:
    print(f"isolation: {out['isolation']}")
    print(
        f"{'workload':<9} {'rstar2 r/s':>10} {'base r/s':>9} {'ratio':>6} {'p50 ms':>7} {'p99 ms':>7}  sweep"
    )
    for name in ("trivial", "numpy", "sympy"):
        w = out[name]
        print(
            f"{name:<9} {w['rstar2_rps']:>10} {w['baseline_rps']:>9} {w['ratio']:>6} "
            f"{w['p50_ms']:>7} {w['p99_ms']:>7}  {w['baseline_sweep']}"
        )
    if "burst" in out:
        print(f"burst: {out['burst']}")


def _curve(path: Path | None) -> CurveKeys | None:
    if path is None:
        return None
    try:
        return CurveKeys(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError) as e:
        raise ConfigError(
            "--curve-keys", str(path), f"a JSON file with the four CURVE keys ({e})"
        ) from None


def token_of(args: argparse.Namespace) -> str | None:
    """The HTTP token: --token-file, else $RSTAR2_SANDBOX_TOKEN, else None."""
    return token_from(args.token_file, "--token-file", TOKEN_ENV)


def http_config(args: argparse.Namespace) -> HttpConfig:
    """`serve --http`'s settings, validated (a non-loopback host without a token is refused)."""
    host, port = args.http
    if args.curve_keys is not None:
        raise UsageError("--curve-keys is for --bind (ZeroMQ); --http takes --token-file")
    if (args.tls_cert is None) != (args.tls_key is None):
        raise UsageError("--tls-cert and --tls-key go together (HTTPS needs both)")
    http = HttpConfig(
        host=host,
        port=port,
        token=token_of(args),
        max_items=args.max_items,
        max_body_mb=args.max_body_mb,
        max_pending_mb=max(512, args.max_body_mb),
        drain_s=args.drain_s,
        certfile=str(args.tls_cert) if args.tls_cert else None,
        keyfile=str(args.tls_key) if args.tls_key else None,
    )
    if (why := http.tls_problem()) is not None:
        raise UsageError(
            f"--tls-cert {http.certfile} / --tls-key {http.keyfile}: "
            f"not a PEM certificate and its key ({why})"
        )
    http.validate()
    return http


def _print_http_bench(out: dict[str, Any]) -> None:
    print(f"isolation: {out.get('isolation', 'remote')}")
    print(f"url: {out['url']}; {out['clients']} closed-loop clients")
    print(f"{'workload':<9} {'via':<15} {'r/s':>8} {'p50 ms':>7} {'p99 ms':>7} {'fail':>5}")
    for name in WORKLOADS:
        for via, w in out[name].items():
            print(
                f"{name:<9} {via:<15} {w['rps']:>8} {w['p50_ms']:>7} {w['p99_ms']:>7} "
                f"{w['failures']:>5}"
            )


def _bench(args: argparse.Namespace, cfg: SandboxConfig) -> int:
    def progress(line: str) -> None:
        log.info("bench %s", line)

    if args.http is None and args.api is not None:
        raise UsageError("--api is for --http (the API a remote sandbox speaks)")
    if args.http is None:
        sweep: list[int] = args.sweep
        out = anyio.run(run_bench, cfg, args.seconds, sweep, args.burst, progress)
    else:
        apis = list(APIS) if args.api in (None, "both") else [args.api]
        url = args.http.rstrip("/") or None
        out = anyio.run(run_http_bench, cfg, url, apis, args.seconds, token_of(args), progress)
    if args.json:
        print(json.dumps(out, indent=2))
    elif args.http is None:
        _print_bench(out)
    else:
        _print_http_bench(out)
    if args.http is not None and all_failed(out):
        log.error("every request failed: the service at the URL did not run the code")
        return 1
    return 0


STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


async def _serve_http_until_signalled(
    cfg: SandboxConfig, http: HttpConfig, sock: socket.socket
) -> None:
    """`serve_http` until SIGTERM or SIGINT, then a drain; a second signal hurries it."""
    shutdown = Shutdown()

    async def on_signals() -> None:
        with anyio.open_signal_receiver(*STOP_SIGNALS) as signals:
            async for signum in signals:
                name = signal.Signals(signum).name
                if shutdown.requested.is_set():
                    log.warning("%s again: answering the requests still running now", name)
                else:
                    log.warning("%s: draining (up to %.1f s), then exiting", name, http.drain_s)
                shutdown.request()

    async with anyio.create_task_group() as tg:
        tg.start_soon(on_signals)
        await serve_http(cfg, http, sock=sock, shutdown=shutdown)
        tg.cancel_scope.cancel()
    log.info("sandbox HTTP service stopped")


async def _serve_zmq_until_signalled(
    cfg: SandboxConfig, bind: str, curve: CurveKeys | None
) -> None:
    """`serve_sandbox` until SIGTERM or SIGINT; its executor then closes (children killed)."""
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: serve_sandbox(cfg, bind, curve=curve))
        with anyio.open_signal_receiver(*STOP_SIGNALS) as signals:
            async for signum in signals:
                log.warning("%s: stopping the sandbox service", signal.Signals(signum).name)
                break
        tg.cancel_scope.cancel()


def run(args: argparse.Namespace) -> int:
    cfg = load_config(args)
    if args.action == "exec":
        return anyio.run(run_exec, cfg)
    if args.action == "serve" and args.http is not None:
        http = http_config(args)
        sock = bind_socket(http.host, http.port, "--http")  # an address in use: one line, exit 2
        anyio.run(_serve_http_until_signalled, cfg, http, sock)
        return 0
    if args.action == "serve":
        curve = _curve(args.curve_keys)
        if curve is None and not is_local_endpoint(args.bind):
            raise UsageError(
                f"--bind {args.bind} is not a loopback address: it needs --curve-keys (a JSON "
                "file with the four CURVE keys; the service is reachable from the network)"
            )
        anyio.run(_serve_zmq_until_signalled, cfg, args.bind, curve)
        return 0
    if args.action == "soak":
        return _soak(args, cfg)
    return _bench(args, cfg)


def _soak(args: argparse.Namespace, cfg: SandboxConfig) -> int:
    soak = SoakConfig(
        requests=args.requests,
        in_flight=args.in_flight,
        zygote_kill_every_s=args.zygote_kill_every,
        double_kill_share=args.double_kill_share,
        child_kill_every_s=args.child_kill_every,
        deadline_s=args.deadline,
        seed=args.seed,
    )
    report = anyio.run(run_soak, cfg, soak, lambda line: log.info("soak %s", line))
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        width = max(len(k) for k in report)
        for key, value in report.items():
            print(f"{key:<{width}}  {value}")
    if passed(report):
        return 0
    print(
        "rstar2 sandbox soak: FAILED: the service lost, crossed or mis-answered requests, "
        "or did not survive the faults (see above)",
        file=sys.stderr,
    )
    return 1
