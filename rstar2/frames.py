"""Frames: how a wire message becomes ZeroMQ frames and back, and how small ones share a frame.

- `to_frames` / `from_frames`: one message = one msgpack body frame plus one raw frame per
  array field (zero-copy); `from_frames` raises `WireError` / `MessageTooLarge`, never
  anything else, on bad input;
- `pack_bodies` / `unpack_frame`: several small array-free bodies in one frame, for the
  runtime's packed stream edges.

The message kinds and their tagged-union decoder are `rstar2.wire`'s; this module only frames
them. What it does not do: sockets or size policy (the actor runtime's).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Sequence
from typing import Any

import msgspec
import numpy as np

from rstar2.wire import Message, WireError, encode_body, message_union, registry_version

# --- framing: one message = one msgpack frame + one raw frame per array ---------------------
#
# A message field typed `np.ndarray` (or holding a torch tensor on the sending side) is not
# copied into the msgpack body: the body gets a msgpack Ext(1) naming the frame index, dtype and
# shape, and the array's buffer travels as its own ZeroMQ frame (zero-copy on send). Received
# arrays are read-only numpy views of the frame; use `torch.from_numpy(a.copy())` for a tensor.

Buffer = bytes | bytearray | memoryview
_ARRAY_EXT = 1


class MessageTooLarge(WireError):
    """A message whose frames add up to more than the size limit."""


class _FrameState(threading.local):
    def __init__(self) -> None:
        self.out: list[Buffer] = []
        self.inp: Sequence[Buffer] = ()


_frames = _FrameState()


def _enc_hook(obj: Any) -> Any:
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(obj, torch.Tensor):
        obj = obj.detach().cpu().contiguous().numpy()
    if isinstance(obj, np.ndarray):
        arr = np.ascontiguousarray(obj)
        _frames.out.append(memoryview(arr).cast("B"))
        header = encode_body((len(_frames.out), arr.dtype.str, list(arr.shape)))
        return msgspec.msgpack.Ext(_ARRAY_EXT, header)
    raise NotImplementedError(f"type {type(obj).__name__} cannot go on the wire")


def _ext_hook(code: int, data: memoryview) -> Any:
    if code != _ARRAY_EXT:
        raise WireError(f"unknown msgpack extension {code}")
    index, dtype, shape = msgspec.msgpack.decode(data)
    if not 1 <= index < len(_frames.inp):
        raise WireError(f"array refers to missing frame {index}")
    return np.frombuffer(_frames.inp[index], dtype=np.dtype(dtype)).reshape(shape)


def _dec_hook(tp: type, obj: Any) -> Any:
    if isinstance(obj, tp):
        return obj
    torch = sys.modules.get("torch")
    if torch is not None and tp is torch.Tensor and isinstance(obj, np.ndarray):
        return torch.from_numpy(obj.copy())
    raise NotImplementedError(f"cannot decode {type(obj).__name__} as {tp}")


_frame_encoder = msgspec.msgpack.Encoder(enc_hook=_enc_hook)
_frame_decoder: msgspec.msgpack.Decoder | None = None
_packed_decoder: msgspec.msgpack.Decoder | None = None


_decoders_version = -1


def _fresh_decoders() -> None:
    """Drop the decoders when a message kind was registered since they were built."""
    global _frame_decoder, _packed_decoder, _decoders_version
    if _decoders_version != registry_version():
        _frame_decoder = _packed_decoder = None
        _decoders_version = registry_version()


def to_frames(msg: Message) -> list[Buffer]:
    """Encode `msg` as [msgpack body, array frame, ...] (arrays are not copied)."""
    try:  # most messages hold no arrays: skip the hook's per-thread frame list
        return [encode_body(msg)]
    except TypeError:
        pass
    _frames.out = []
    try:
        body = _frame_encoder.encode(msg)
        return [body, *_frames.out]
    finally:
        _frames.out = []


def frames_size(frames: Sequence[Buffer]) -> int:
    total = 0
    for f in frames:
        total += len(f) if isinstance(f, bytes) else memoryview(f).nbytes
    return total


def from_frames(frames: Sequence[Buffer], max_bytes: int | None = None) -> Message:
    """Decode frames made by `to_frames`; raises MessageTooLarge or WireError, never anything else."""
    global _frame_decoder
    if not frames:
        raise WireError("empty message")
    if max_bytes is not None:
        size = frames_size(frames)
        if size > max_bytes:
            raise MessageTooLarge(f"message of {size} bytes is over the limit of {max_bytes}")
    _fresh_decoders()
    if _frame_decoder is None:
        _frame_decoder = msgspec.msgpack.Decoder(
            message_union(), ext_hook=_ext_hook, dec_hook=_dec_hook
        )
    _frames.inp = frames
    try:
        return _frame_decoder.decode(frames[0])
    except (msgspec.DecodeError, msgspec.ValidationError, ValueError, TypeError) as e:
        raise WireError(f"undecodable message: {e}") from None
    finally:
        _frames.inp = ()


# --- packed frames: several small messages in one frame ------------------------------------
#
# On a stream edge to a single receiver the runtime packs the bodies of small, array-free
# messages sent close together into one frame: PACK_MARK (0xC1, a byte msgpack never uses, so
# no single body starts with it), a msgpack array header, then the bodies back to back. Minus
# its mark the frame is a valid msgpack array of messages, decoded in one call.

PACK_MARK = b"\xc1"
_raw_list_decoder = msgspec.msgpack.Decoder(list[msgspec.Raw])


def pack_bodies(bodies: Sequence[bytes]) -> bytes:
    """One packed frame holding `bodies` (each a single-frame body made by `to_frames`)."""
    n = len(bodies)
    if n < 16:
        head = bytes((0x90 | n,))
    elif n < 1 << 16:
        head = b"\xdc" + n.to_bytes(2, "big")
    else:
        head = b"\xdd" + n.to_bytes(4, "big")
    return b"".join((PACK_MARK, head, *bodies))


def packed_size(bodies_bytes: int, count: int) -> int:
    """Size of the frame `pack_bodies` makes from `count` bodies of `bodies_bytes` in all."""
    return bodies_bytes + (2 if count < 16 else 4 if count < 1 << 16 else 6)


def is_packed(frames: Sequence[Buffer]) -> bool:
    """Whether `frames` is one packed frame (else it is one message: body and array frames)."""
    return len(frames) == 1 and frames[0][:1] == PACK_MARK


def unpack_frame(
    frame: Buffer, max_bytes: int | None = None
) -> tuple[list[Message], list[WireError]]:
    """The messages of a packed frame, and one error per body that does not decode.

    The whole frame is one error when it is over `max_bytes` or is not an array at all.
    """
    global _packed_decoder
    view = memoryview(frame)[1:]
    if max_bytes is not None and len(view) + 1 > max_bytes:
        size = len(view) + 1
        return [], [
            MessageTooLarge(f"packed frame of {size} bytes is over the limit of {max_bytes}")
        ]
    _fresh_decoders()
    if _packed_decoder is None:
        _packed_decoder = msgspec.msgpack.Decoder(
            list[message_union()], ext_hook=_ext_hook, dec_hook=_dec_hook
        )
    _frames.inp = ()  # a packed body cannot refer to array frames
    try:
        return _packed_decoder.decode(view), []
    except (msgspec.DecodeError, msgspec.ValidationError, ValueError, TypeError):
        pass  # one bad body: decode the rest one by one below
    finally:
        _frames.inp = ()
    try:
        raws = _raw_list_decoder.decode(view)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        return [], [WireError(f"undecodable packed frame: {e}")]
    messages: list[Message] = []
    errors: list[WireError] = []
    for raw in raws:
        try:
            messages.append(from_frames([raw]))
        except WireError as e:
            errors.append(e)
    return messages, errors
