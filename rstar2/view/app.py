"""`rstar2 view`'s web server: the pages and the JSON they read, on Starlette and Hypercorn.

`view_app(sources, token)` is the ASGI app: `GET /` the page (`static/index.html`, `view.js`,
`view.css`: one page that draws the run, step, rollout and side-by-side views from the JSON
below), and

- `GET /api/sources`: every source's `Source.info()` (config, stages, status, metrics, sets);
- `GET /api/set/{id}`: a set's rows (and a training step's metrics row);
  `GET /api/rollout/{id}/{i}`: one rollout and its group;
- `GET /api/compare/{a}/{b}`: the problems two sets share, each with its rows on both sides.

Every request first reads what the run appended since the last one (`Source.refresh`), so a
page of a run in progress follows it. With a token every request must carry it, as the sandbox's
HTTP front requires (`rstar2.sandbox.http_gate.authorized`: `Authorization: Bearer TOKEN`, or
HTTP Basic with the token as the password, which a browser asks for after the 401).

`serve_view(app, sock)` serves it with Hypercorn on a socket bound as the sandbox's front binds
its own (`http_gate.bind_socket`: a port in use is a one-line `UsageError`) until cancelled. The
same stack as the sandbox's HTTP front: no other dependency.

What it does not do: write anything, or serve anything but these pages (no directory listing).
"""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import Callable
from importlib import resources
from typing import Any

import anyio
import hypercorn.asyncio
from hypercorn.config import Config as HypercornConfig
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp

from rstar2.sandbox.http_gate import TokenCheck
from rstar2.view.records import Source, compare

log = logging.getLogger(__name__)

STATIC = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/view.js": ("view.js", "text/javascript; charset=utf-8"),
    "/view.css": ("view.css", "text/css; charset=utf-8"),
}


def view_app(sources: list[Source], token: str | None = None) -> ASGIApp:
    """The viewer's ASGI app over `sources` (see the module docstring)."""
    routes = _Handlers(sources, _static_files()).routes()
    return TokenCheck(Starlette(routes=routes), token, 'Basic realm="rstar2 view"')


def _static_files() -> dict[str, tuple[bytes, str]]:
    """Each page route's body and media type (`STATIC`, read once, when the app is made)."""
    return {
        route: (resources.files("rstar2.view").joinpath("static", name).read_bytes(), kind)
        for route, (name, kind) in STATIC.items()
    }


class _Handlers:
    """The app's request handlers over `sources`, and the route table that maps to them."""

    def __init__(self, sources: list[Source], files: dict[str, tuple[bytes, str]]) -> None:
        self.sources = sources
        self.files = files

    def routes(self) -> list[Route]:
        """The route table: the pages, then the JSON API (see the module docstring)."""
        return [
            *(Route(path, self.page) for path in STATIC),
            Route("/api/sources", self.all_sources),
            Route("/api/set/{sid}", self.rows),
            Route("/api/rollout/{sid}/{i:int}", self.rollout),
            Route("/api/compare/{a}/{b}", self.both),
        ]

    async def page(self, request: Request) -> Response:
        body, kind = self.files[request.url.path]
        return Response(body, media_type=kind, headers={"Cache-Control": "no-cache"})

    async def all_sources(self, request: Request) -> Response:
        await anyio.to_thread.run_sync(self._refreshed)
        return _json([s.info() for s in self.sources])

    async def rows(self, request: Request) -> Response:
        sid = request.path_params["sid"]
        return await self._answer(
            lambda: {
                "set": self._set(sid),
                "metrics": self._source_of(sid).step_metrics(sid),
                "rows": self._source_of(sid).rows(sid),
            }
        )

    async def rollout(self, request: Request) -> Response:
        sid, i = request.path_params["sid"], request.path_params["i"]
        return await self._answer(lambda: self._source_of(sid).rollout(sid, i))

    async def both(self, request: Request) -> Response:
        a, b = request.path_params["a"], request.path_params["b"]
        return await self._answer(
            lambda: {
                "a": self._set(a),
                "b": self._set(b),
                "problems": compare(self._source_of(a).rows(a), self._source_of(b).rows(b)),
            }
        )

    def _refreshed(self) -> None:
        for s in self.sources:
            s.refresh()

    def _source_of(self, set_id: str) -> Source:
        head = set_id.partition(".")[0]
        if not head.isdigit() or int(head) >= len(self.sources):
            raise KeyError(set_id)
        return self.sources[int(head)]

    def _set(self, sid: str) -> dict[str, Any]:
        return self._source_of(sid).rollout_set(sid).summary()

    async def _answer(self, make: Callable[[], Any]) -> Response:
        """`make()`'s value as JSON after a refresh (in a worker thread); a missing set or
        rollout (`KeyError`) is a 404."""

        def run() -> Any:
            self._refreshed()
            return make()

        try:
            return _json(await anyio.to_thread.run_sync(run))
        except KeyError as e:
            return _json({"detail": f"no such set or rollout: {e.args[0]}"}, 404)


def _json(obj: object, status: int = 200) -> Response:
    body = json.dumps(obj, ensure_ascii=False, allow_nan=False, default=str)
    return Response(body, status, media_type="application/json")


async def serve_view(app: ASGIApp, sock: socket.socket) -> None:
    """Serve `app` on the bound `sock` until cancelled (Ctrl-C)."""
    hc = HypercornConfig()
    hc.bind = [f"fd://{sock.detach()}"]
    hc.accesslog = None
    hc.errorlog = logging.getLogger("rstar2.view.hypercorn")
    await hypercorn.asyncio.serve(app, hc)  # type: ignore[arg-type]
