"""The learner ranks' rendezvous address, `tcp://HOST:PORT`, parsed in one place.

Three readers need it and must agree: `cluster.learner_rendezvous` (checked when the train
config loads), `rstar2 learner-rank --rendezvous` (checked before torch is imported) and the
rank group that builds its `TCPStore` from it. Plain string parsing, no torch, so the config and
the CLI can use it cheaply.

What it does not do: check that HOST resolves or that PORT is free (the store does, when it
starts).
"""

from __future__ import annotations

from urllib.parse import urlsplit

FORM = "tcp://HOST:PORT"


def parse_rendezvous(address: str) -> tuple[str, int]:
    """(host, port) of `tcp://HOST:PORT` (an IPv6 host in brackets: `tcp://[::1]:29500`).
    Anything else raises `ValueError` whose message says what is wrong ("no PORT", ...); the
    caller names the setting or flag in front of it."""
    try:
        url = urlsplit(address)
        port = url.port  # a non-numeric or out-of-range port raises ValueError
    except ValueError as e:
        raise ValueError(f"expected {FORM}: {e}") from None
    if url.scheme != "tcp":
        raise ValueError(f"expected {FORM}: the scheme is tcp://")
    if not url.hostname:
        raise ValueError(f"expected {FORM}: no HOST")
    if port is None or port == 0:
        raise ValueError(f"expected {FORM}: no PORT (1-65535)")
    if url.path not in ("", "/") or url.query or url.fragment:
        raise ValueError(f"expected {FORM}: something after PORT")
    return url.hostname, port
