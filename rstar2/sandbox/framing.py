"""Length-prefixed JSON frames: the private protocol between an executor and its zygote.

A frame is a 4-byte big-endian length followed by that many bytes of a JSON object. The pipe
between the host and the zygote is private (children never hold it), so JSON is enough; the
public protocol is msgpack (`rstar2.wire`).

What it does not do: any I/O. Standard library only: the zygote imports it inside the sandbox.
"""

from __future__ import annotations

import json
import struct
from typing import Any

_HEADER = struct.Struct(">I")
MAX_FRAME = 1 << 30


class FrameError(ValueError):
    """A frame that is too large or not a JSON object."""


def pack(obj: dict[str, Any]) -> bytes:
    body = json.dumps(obj, separators=(",", ":")).encode()
    if len(body) > MAX_FRAME:
        raise FrameError(f"frame of {len(body)} bytes exceeds {MAX_FRAME}")
    return _HEADER.pack(len(body)) + body


class FrameBuffer:
    """Accumulates bytes and yields the complete frames in them, in order."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        self._buf += data
        out: list[dict[str, Any]] = []
        while len(self._buf) >= _HEADER.size:
            (size,) = _HEADER.unpack_from(self._buf)
            if size > MAX_FRAME:
                raise FrameError(f"frame of {size} bytes exceeds {MAX_FRAME}")
            end = _HEADER.size + size
            if len(self._buf) < end:
                break
            obj = json.loads(self._buf[_HEADER.size : end])
            del self._buf[:end]
            if not isinstance(obj, dict):
                raise FrameError(f"frame is a {type(obj).__name__}, not an object")
            out.append(obj)
        return out

    def pending(self) -> int:
        """Bytes of an incomplete frame still buffered."""
        return len(self._buf)
