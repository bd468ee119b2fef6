"""The wire protocol: every message that crosses a ZeroMQ socket, as a typed msgpack struct.

One module for all of it (vLLM v1 `serial_utils` style):
- every message is a `msgspec.Struct` subclass of `Message`, array-like (compact: fields by
  position) with an explicit small integer tag that must be unique; a single decoder for the
  tagged union of all registered kinds turns bytes back into the right class or raises
  `WireError` (never pickle, never `eval`);
- components append their messages in a section of their own below, each decorated with
  `@register`;
- tensors travel as separate zero-copy frames (see the runtime's framing), never inside msgpack.

What it does not do: transport, retries or size limits (the actor runtime enforces the limit).
"""

from __future__ import annotations

from typing import Any, TypeVar, Union

import msgspec

M = TypeVar("M", bound="Message")


class WireError(ValueError):
    """Bytes that do not decode into a known message."""


class Message(msgspec.Struct, array_like=True, omit_defaults=True, tag_field="t"):
    """Base of every message. Subclasses must pass `tag=<unique int>` in the class statement."""


_REGISTRY: dict[int, type[Message]] = {}
_decoder: msgspec.msgpack.Decoder | None = None
_encoder = msgspec.msgpack.Encoder()


def register(cls: type[M]) -> type[M]:
    """Class decorator: add a message kind to the decodable union (tags must be unique ints)."""
    global _decoder
    tag = cls.__struct_config__.tag
    if not isinstance(tag, int):
        raise TypeError(f"{cls.__name__} needs an explicit integer tag")
    if tag in _REGISTRY and _REGISTRY[tag] is not cls:
        raise TypeError(f"tag {tag} of {cls.__name__} is taken by {_REGISTRY[tag].__name__}")
    _REGISTRY[tag] = cls
    _decoder = None
    return cls


def encode(msg: Message) -> bytes:
    return _encoder.encode(msg)


def decode(data: bytes | memoryview) -> Message:
    """Decode one message; anything malformed or unknown raises WireError."""
    global _decoder
    if _decoder is None:
        union: Any = Union[tuple(_REGISTRY.values())]  # noqa: UP007 - runtime union of classes
        _decoder = msgspec.msgpack.Decoder(union)
    try:
        return _decoder.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise WireError(str(e)) from None


def message_types() -> dict[int, type[Message]]:
    return dict(_REGISTRY)


# --- runtime (tags 1-19) -------------------------------------------------------------------


@register
class Hello(Message, tag=1):
    """Sent by a child process when its actors are wired; answered by Ready."""

    process: str
    actors: list[str]


@register
class Ready(Message, tag=2):
    process: str


@register
class Shutdown(Message, tag=3):
    reason: str = ""
