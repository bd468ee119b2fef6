"""Which anyio event loop to run on: asyncio (with uvloop when installed) or trio.

What it does not do: start the loop (callers pass these options to `anyio.run`).
"""

from __future__ import annotations

import importlib.util
from typing import Any

BACKENDS = ("asyncio", "trio")


def backend_options(backend: str) -> dict[str, Any]:
    """`backend_options` for `anyio.run`: uvloop on asyncio when it is installed."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if backend == "asyncio" and importlib.util.find_spec("uvloop") is not None:
        return {"use_uvloop": True}
    return {}
