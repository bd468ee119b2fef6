"""What the HTTP front lets in: where it listens, who may call it, and how much work it holds
at once. The sandbox's front and `rstar2 view` share the first two.

Access (the HTTP counterpart of the ZeroMQ service's CURVE rule, `SocketFactory.bind`):
- `check_bind(host, token)`: binding an address other than loopback without a token is refused
  (`ConfigError`), so an exposed port is never open to anyone who can reach it;
- `bind_socket(host, port, flag)`: the listening socket; an address that cannot be bound (in
  use, not this host's, a privileged port) is a one-line `UsageError` naming `flag`;
- `authorized(header, token)`: with a token, every request must carry it, either as
  `Authorization: Bearer TOKEN` or as HTTP Basic auth with TOKEN as the password (any user
  name): the form `requests` and `aiohttp` send for a URL `http://user:TOKEN@host:port/...`,
  so clients that take only a URL (verl's `sandbox_fusion_url`, rStar2's code-judge host)
  work unchanged. Tokens are compared in constant time (`hmac.compare_digest`);
- `load_token(text, origin)`: a token is at least 16 characters (whitespace around it dropped);
  `token_from(path, flag, env)` reads it from a server's `--token-file` or its environment
  variable (`sandbox serve --http` and `view`);
- `TokenCheck(app, token, challenge)`: the ASGI middleware that applies `authorized` to every
  HTTP request (the sandbox's front and `rstar2 view` both wrap their apps in it).

Admission (`Admission`): a bounded amount of work, never a queue that grows without limit:
- request bodies being read or run hold their bytes (`max_bytes`), taken as they arrive;
- submissions being run hold one slot each (`max_items`), taken all at once per request.
A request that does not fit is refused at once with the overload status (the front adds
Retry-After); a batch larger than `max_items` can never fit and is refused as too large.

What it does not do: TLS (hypercorn's `certfile`/`keyfile`; see `http_front.py`), rate limits
per client, or user accounts.
"""

from __future__ import annotations

import base64
import binascii
import errno
import hmac
import ipaddress
import os
import socket
from dataclasses import dataclass
from pathlib import Path

from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from rstar2.config import ConfigError, UsageError

MIN_TOKEN_CHARS = 16


@dataclass(frozen=True)
class Refusal:
    """A request answered without running: an HTTP status and a message saying why."""

    status: int
    message: str


def is_loopback(host: str) -> bool:
    """True for localhost and loopback IP addresses; a name or a wildcard counts as exposed."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, token: str | None) -> None:
    """Refuse to expose the sandbox off loopback without a token."""
    if token is None and not is_loopback(host):
        raise ConfigError(
            "--http",
            host,
            "a loopback address (127.0.0.1, ::1, localhost), or a token "
            "(--token-file FILE or $RSTAR2_SANDBOX_TOKEN) to bind a non-loopback address",
        )


def bind_socket(host: str, port: int, flag: str, host_flag: str | None = None) -> socket.socket:
    """A listening TCP socket on (host, port); port 0 picks a free one. An address that cannot
    be bound is a one-line `UsageError` naming `flag`, the option that gave the address (or
    `host_flag`, when given, for a host that does not resolve to an address)."""
    host = host.strip("[]")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        return socket.create_server((host, port), family=family, backlog=2048)
    except OSError as e:
        if e.errno is not None and e.errno < 0:  # the resolver's code (EAI_*): a bad host
            reason = (e.strerror or str(e)).split(" (while attempting")[0]
            flag = host_flag or flag
        else:
            reason = os.strerror(e.errno) if e.errno else str(e)
        hint = (
            f" (another server there? {flag} picks another)" if e.errno == errno.EADDRINUSE else ""
        )
        where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        raise UsageError(f"{flag}: cannot listen on {where}: {reason}{hint}") from e


def load_token(text: str, origin: str) -> str:
    token = text.strip()
    if len(token) < MIN_TOKEN_CHARS or any(c.isspace() for c in token):
        raise ConfigError(
            origin,
            "<redacted>",
            f"a token of at least {MIN_TOKEN_CHARS} characters without spaces "
            '(python -c "import secrets; print(secrets.token_urlsafe(32))")',
        )
    return token


def token_from(path: Path | None, flag: str, env: str) -> str | None:
    """A server's token: file `path` (given by `flag`), else environment variable `env`, else
    None; a file that cannot be read or a weak token is a `ConfigError` naming its origin."""
    if path is not None:
        try:
            text = path.read_text()
        except OSError as e:  # missing, a directory, unreadable
            raise ConfigError(flag, str(path), f"a readable file ({e.strerror})") from None
        return load_token(text, flag)
    if os.environ.get(env):
        return load_token(os.environ[env], f"${env}")
    return None


def presented_token(header: str) -> str | None:
    """The token an Authorization header carries (Bearer, or Basic's password), or None."""
    scheme, _, value = header.strip().partition(" ")
    scheme, value = scheme.lower(), value.strip()
    if scheme == "bearer":
        return value or None
    if scheme == "basic":
        try:
            decoded = base64.b64decode(value, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return None
        user, sep, password = decoded.partition(":")
        return password if sep else None
    return None


def authorized(header: str | None, token: str | None) -> bool:
    """May a request with this Authorization header (None: none) be served?"""
    if token is None:
        return True
    given = presented_token(header) if header else None
    # compare_digest on equal-length digests: no early exit on the first differing byte,
    # and no timing leak of the token's length either
    expected = hmac.digest(b"rstar2-sandbox", token.encode(), "sha256")
    offered = hmac.digest(b"rstar2-sandbox", (given or "").encode(), "sha256")
    return hmac.compare_digest(expected, offered) and given is not None


class Admission:
    """Bounded work in flight: body bytes and submissions. All methods are synchronous."""

    def __init__(self, max_items: int, max_bytes: int) -> None:
        if max_items < 1 or max_bytes < 1:
            raise ValueError(
                f"need max_items >= 1 and max_bytes >= 1, got {max_items}, {max_bytes}"
            )
        self.max_items, self.max_bytes = max_items, max_bytes
        self.items = 0
        self.bytes = 0

    def take_bytes(self, n: int) -> bool:
        """Hold `n` more body bytes; False (nothing held) when that would pass `max_bytes`."""
        if self.bytes + n > self.max_bytes:
            return False
        self.bytes += n
        return True

    def take_items(self, n: int) -> Refusal | None:
        """Hold `n` submission slots, or the refusal: 413 if `n` can never fit, else 503."""
        if n > self.max_items:
            return Refusal(
                413, f"a batch of {n} submissions exceeds this service's {self.max_items}: split it"
            )
        if self.items + n > self.max_items:
            return Refusal(503, f"overloaded: {self.items} submissions in flight, retry later")
        self.items += n
        return None

    def release(self, items: int, nbytes: int) -> None:
        self.items -= items
        self.bytes -= nbytes
        assert self.items >= 0 and self.bytes >= 0, (self.items, self.bytes)


class TokenCheck:
    """ASGI middleware: with a token, every HTTP request must carry it (`authorized`); one that
    does not gets 401 with `challenge` as its WWW-Authenticate header."""

    def __init__(self, app: ASGIApp, token: str | None, challenge: str) -> None:
        self.app, self.token, self.challenge = app, token, challenge

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not authorized(
            Headers(scope=scope).get("authorization"), self.token
        ):
            response = JSONResponse(
                {"detail": "missing or wrong token (Authorization: Bearer TOKEN)"},
                401,
                {"WWW-Authenticate": self.challenge},
            )
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)
