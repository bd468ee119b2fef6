"""The flat codec of a weight update over the actor bus: a state dict as one float32 buffer.

With the embedded engine, or vLLM engines with `cluster.weight_sync = "file"`, the learner sends
each rollout worker a `WeightUpdate`: the tensor names, their shapes and one contiguous buffer
(a single zero-copy frame on the wire). `flatten_weights(model)` builds the three from the
policy's state dict, in its iteration order; `unflatten_weights(names, shapes, flat)` gives the
worker named views into the buffer (no copy) for its engine's `update_weights`.

What it does not do: keep dtypes (every tensor travels as float32; the engine casts as it
loads), send anything (the learner actor), or broadcast (`buckets.py`, `gloo_group.py`: typed
byte buckets through a process group).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch
from torch import nn


def flatten_weights(
    weights: nn.Module | Mapping[str, torch.Tensor],
) -> tuple[list[str], list[list[int]], torch.Tensor]:
    """Every tensor of a state dict (or a model's parameters and buffers) in one contiguous
    float32 buffer (for the weight push)."""
    state = weights.state_dict() if isinstance(weights, nn.Module) else weights
    names = list(state)
    shapes = [list(state[k].shape) for k in names]
    flat = torch.cat([state[k].detach().reshape(-1).float() for k in names])
    return names, shapes, flat


def unflatten_weights(
    names: Sequence[str], shapes: Sequence[Sequence[int]], flat: torch.Tensor
) -> dict[str, torch.Tensor]:
    """Named views of `flat` (no copy); ValueError unless the shapes cover it exactly."""
    out: dict[str, torch.Tensor] = {}
    offset = 0
    for name, shape in zip(names, shapes, strict=True):
        size = math.prod(shape)
        out[name] = flat[offset : offset + size].view(*shape)
        offset += size
    if offset != flat.numel():
        raise ValueError(f"weight buffer has {flat.numel()} values, the names cover {offset}")
    return out
