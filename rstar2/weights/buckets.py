"""What a broadcast weight update sends: the manifest of the tensors and their byte buckets.

A broadcast update (`rstar2.weights.gloo_group`) ships the metadata first, as plain Python
values (`WeightManifest.to_payload()`: names, dtype names, shapes, the schema of vLLM's NCCL
weight-transfer engine), then the tensor bytes. Both ends cut the same byte buckets from the
manifest with `plan_buckets`, so only the bucket bytes travel in the collective:

- tensors go into buckets in manifest order; a bucket holds consecutive tensors whose padded
  sizes sum to at most `bucket_bytes`; a tensor larger than that gets a bucket of its own;
- each tensor starts at a multiple of `ALIGN` bytes, so the receiver's views of the byte buffer
  are aligned for every dtype (`Tensor.view(dtype)` requires it);
- buckets are raw bytes, so they can mix dtypes and every transport can carry them (uint8).

Fewer, larger collectives cost less than one per tensor; the bucket bound caps the extra memory
(one packed bucket on the sender, the received buckets until the model has loaded them).

What it does not do: move bytes (`gloo_group.py`) or load them into a model (the vLLM worker).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

ALIGN = 16
"""Byte alignment of every tensor inside a bucket (covers every torch dtype's element size)."""

_DTYPES: dict[str, torch.dtype] = {
    name: dtype
    for name, dtype in (
        ("float32", torch.float32),
        ("float16", torch.float16),
        ("bfloat16", torch.bfloat16),
        ("float64", torch.float64),
        ("int64", torch.int64),
        ("int32", torch.int32),
        ("int8", torch.int8),
        ("uint8", torch.uint8),
        ("bool", torch.bool),
    )
}


def dtype_name(dtype: torch.dtype) -> str:
    """The manifest's name of `dtype` ("float32", "bfloat16", ...)."""
    name = str(dtype).removeprefix("torch.")
    if name not in _DTYPES:
        raise ValueError(f"dtype {dtype} cannot be broadcast; supported: {sorted(_DTYPES)}")
    return name


def parse_dtype(name: str) -> torch.dtype:
    """The torch dtype a manifest names."""
    if name not in _DTYPES:
        raise ValueError(f"unknown dtype name {name!r}; supported: {sorted(_DTYPES)}")
    return _DTYPES[name]


@dataclass(frozen=True)
class WeightManifest:
    """Names, dtypes and shapes of the tensors of one update, in send order."""

    names: tuple[str, ...]
    dtype_names: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]

    def __post_init__(self) -> None:
        n = len(self.names)
        if len(self.dtype_names) != n or len(self.shapes) != n:
            raise ValueError(
                f"manifest lists differ in length: {n} names, {len(self.dtype_names)} dtypes, "
                f"{len(self.shapes)} shapes"
            )
        if n == 0:
            raise ValueError("a weight manifest needs at least one tensor")
        if len(set(self.names)) != n:
            raise ValueError("a weight manifest names a tensor twice")
        for name, shape in zip(self.names, self.shapes, strict=True):
            if any(d < 0 for d in shape):
                raise ValueError(f"tensor {name!r} has a negative dimension: {list(shape)}")
        for dt in self.dtype_names:
            parse_dtype(dt)

    def nbytes(self, i: int) -> int:
        """Bytes of tensor `i`."""
        dtype = parse_dtype(self.dtype_names[i])
        return math.prod(self.shapes[i]) * dtype.itemsize

    def to_payload(self) -> dict[str, Any]:
        """Plain lists for an RPC (vLLM's `update_info`)."""
        return {
            "names": list(self.names),
            "dtype_names": list(self.dtype_names),
            "shapes": [list(s) for s in self.shapes],
        }

    @classmethod
    def from_payload(
        cls, names: Sequence[str], dtype_names: Sequence[str], shapes: Sequence[Sequence[int]]
    ) -> WeightManifest:
        """The manifest `to_payload` described (the receiving side)."""
        return cls(
            tuple(names), tuple(dtype_names), tuple(tuple(int(d) for d in s) for s in shapes)
        )


def manifest_of(state_dict: Mapping[str, torch.Tensor]) -> WeightManifest:
    """The manifest of a state dict, in its iteration order."""
    if not state_dict:
        raise ValueError("a weight update needs a non-empty state dict")
    return WeightManifest(
        tuple(state_dict),
        tuple(dtype_name(t.dtype) for t in state_dict.values()),
        tuple(tuple(t.shape) for t in state_dict.values()),
    )


@dataclass(frozen=True)
class Bucket:
    """Tensors `first .. first + len(offsets) - 1` of a manifest, packed into `nbytes` bytes."""

    first: int
    offsets: tuple[int, ...]
    """Byte offset of each tensor in the bucket (multiples of `ALIGN`)."""
    nbytes: int
    """Size of the bucket's buffer (the last tensor's end; only inner gaps are padding)."""

    @property
    def indices(self) -> range:
        return range(self.first, self.first + len(self.offsets))


def _padded(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def plan_buckets(manifest: WeightManifest, bucket_bytes: int) -> list[Bucket]:
    """Cut the manifest's tensors into byte buckets of at most `bucket_bytes` (see the module
    docstring); both ends of a broadcast call this with the same arguments."""
    if bucket_bytes < 1:
        raise ValueError(f"bucket_bytes must be >= 1, got {bucket_bytes}")
    buckets: list[Bucket] = []
    first, offsets, end = 0, [], 0
    for i in range(len(manifest.names)):
        size = manifest.nbytes(i)
        start = _padded(end)
        if offsets and start + size > bucket_bytes:
            buckets.append(Bucket(first, tuple(offsets), end))
            first, offsets, start = i, [], 0
        offsets.append(start)
        end = start + size
    buckets.append(Bucket(first, tuple(offsets), end))
    return buckets


def pack_bucket(
    bucket: Bucket, tensors: Sequence[torch.Tensor] | Mapping[int, torch.Tensor]
) -> torch.Tensor:
    """The bucket's bytes (uint8, on the CPU) from the update's `tensors` (the whole update,
    or at least the bucket's tensors by their index in the manifest)."""
    buf = torch.zeros(bucket.nbytes, dtype=torch.uint8)
    for i, offset in zip(bucket.indices, bucket.offsets, strict=True):
        t = tensors[i].detach().to("cpu").contiguous().reshape(-1)
        raw = t.view(torch.uint8)
        buf[offset : offset + raw.numel()].copy_(raw)
    return buf


def unpack_bucket(
    bucket: Bucket, manifest: WeightManifest, buf: torch.Tensor
) -> list[tuple[str, torch.Tensor]]:
    """(name, tensor) views into a received bucket buffer; no copy."""
    if buf.dtype != torch.uint8 or buf.numel() != bucket.nbytes:
        raise ValueError(
            f"bucket buffer must be {bucket.nbytes} uint8 bytes, got {buf.numel()} {buf.dtype}"
        )
    out = []
    for i, offset in zip(bucket.indices, bucket.offsets, strict=True):
        dtype = parse_dtype(manifest.dtype_names[i])
        raw = buf[offset : offset + manifest.nbytes(i)]
        out.append((manifest.names[i], raw.view(dtype).view(manifest.shapes[i])))
    return out
