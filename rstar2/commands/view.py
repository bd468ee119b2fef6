"""`rstar2 view PATH [PATH ...] [--port N] [--host H]`: look at what the policy does, in a
browser.

Serves a local web page (`rstar2.view.app`) over one or more runs (`rstar2 train --run-dir
RUN`, finished or in progress) and trajectory files (`rstar2 eval --out FILE`): the run (its
config, stages and curves, following a run in progress), each recorded step and evaluation as a
table of rollouts with filters, a rollout's conversation, and two sets side by side. Prints the
address and serves until Ctrl-C.

Loopback by default; another `--host` needs a token (`--token-file FILE` or
`$RSTAR2_VIEW_TOKEN`), the sandbox HTTP service's rule (`rstar2.sandbox.http_gate`). Errors
before serving are one line, exit code 2: a missing path, a directory that is not a run (or
whose config is half-written), a file that is not trajectory JSONL, an unreadable file, a port
in use, a non-loopback host without a token.

What it does not do: write anything into the run, or start a browser.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import anyio

from rstar2.commands.arguments import port_number
from rstar2.config import ConfigError, UsageError
from rstar2.sandbox.http_gate import bind_socket, is_loopback, token_from
from rstar2.view.app import serve_view, view_app
from rstar2.view.records import open_source

TOKEN_ENV = "RSTAR2_VIEW_TOKEN"
DEFAULT_PORT = 8765


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "paths", nargs="+", metavar="PATH", type=Path,
        help="a run directory, or a trajectory file (rstar2 eval --out, RUN/trajectories.jsonl)",
    )  # fmt: skip
    parser.add_argument(
        "--port", type=port_number, default=DEFAULT_PORT, help="port to serve on (0: any free)"
    )
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to bind; not loopback: needs a token"
    )
    parser.add_argument(
        "--token-file", type=Path, metavar="FILE",
        help=f"file holding the token every request must carry (or ${TOKEN_ENV})",
    )  # fmt: skip


def token_of(args: argparse.Namespace) -> str | None:
    """The token: --token-file, else $RSTAR2_VIEW_TOKEN, else None."""
    return token_from(args.token_file, "--token-file", TOKEN_ENV)


def run(args: argparse.Namespace) -> int:
    token = token_of(args)
    if token is None and not is_loopback(args.host):
        raise ConfigError(
            "--host",
            args.host,
            "a loopback address (127.0.0.1, ::1, localhost), or a token "
            f"(--token-file FILE or ${TOKEN_ENV}) to bind a non-loopback address",
        )
    sources = [open_source(i, path) for i, path in enumerate(args.paths)]
    if len({p.resolve() for p in args.paths}) != len(args.paths):
        raise UsageError("the same PATH given twice")
    sock = bind_socket(args.host, args.port, "--port", host_flag="--host")
    port = sock.getsockname()[1]
    host = f"[{args.host}]" if ":" in args.host else args.host
    print(f"rstar2 view: http://{host}:{port}/ (Ctrl-C stops)", flush=True)
    anyio.run(serve_view, view_app(sources, token), sock)
    return 0
