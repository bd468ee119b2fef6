"""Activation checkpointing of decoder layers, and what a checkpointed layer keeps
(`learner.activation_checkpointing`, `checkpoint_every`, `checkpoint_policy`).

`checkpoint_layers` wraps each chosen layer's `forward` in PyTorch's non-reentrant
`torch.utils.checkpoint.checkpoint`. Not transformers' gradient checkpointing: where that
puts the checkpoint depends on its version (5.17, the GPU image's, checkpoints the layer's
`__call__`, outside a compiled layer; 5.24 its `forward`, inside), and a checkpoint outside
`torch.compile` recomputes by running the compiled layer again under autograd hooks
(in torch 2.13 it can pick another compiled graph for the recomputation and fail). Wrapping
`forward` ourselves puts the checkpoint inside the compiled region on every version, where
torch.compile traces it as one higher-order op and partitions its recomputation
(torchtitan's order too: checkpoint, then compile), and keeps module hooks (FSDP2's) outside
it. A checkpointed layer gets no KV cache (a recomputation would append to it twice), as
transformers' own checkpointing does.

"full" keeps only the layer's input and recomputes the whole layer in backward: the least
memory, and about one more forward of compute (in a compute-bound update, 3 units of work
become 4: at most ~75% of the plain update's tokens/s with every layer checkpointed).
"selective" keeps the outputs of the layer's matmuls and attention kernels and recomputes
only the rest (norms, rotary embeddings, the SiLU and its product, residual adds): element-wise
work, cheap to redo and fused by torch.compile, so the backward recomputes no FLOP that counts
in MFU; the memory sits between "full" and no checkpointing (the MLP's two wide projections
are most of what is kept). The mechanism is PyTorch's selective activation checkpointing
(`torch.utils.checkpoint.create_selective_checkpoint_contexts`, the checkpoint's
`context_fn`), so the recomputation, its caching and its interplay with compilation stay the
library's; this module only decides per operator (`save_policy`, a plain function).

What it does not do: compile the layers or install the head (`model_preparation.py`).
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import (
    CheckpointPolicy,
    checkpoint,
    create_selective_checkpoint_contexts,
)

from rstar2.learner.learner_config import CHECKPOINT_POLICIES as POLICIES


def _ops(*names: str) -> frozenset[object]:
    """The default overloads of the named operators this torch build has (`ns::name`)."""
    found = set()
    for name in names:
        namespace, op = name.split("::")
        packet = getattr(getattr(torch.ops, namespace), op, None)
        if packet is not None:
            found.add(packet.default)
    return frozenset(found)


@functools.cache
def saved_ops() -> frozenset[object]:
    """The operators whose outputs "selective" keeps: matmuls (a linear layer is `mm` or
    `addmm` below autograd) and the attention kernels `packed_attention` and SDPA call on
    each device (the CPU's, CUDA's flash, memory-efficient and cuDNN kernels, and the
    variable-length flash op of `torch.nn.attention.varlen`, registered when imported)."""
    try:
        import torch.nn.attention.varlen  # noqa: F401
    except ImportError:  # torch before 2.10
        pass
    return _ops(
        "aten::mm",
        "aten::addmm",
        "aten::bmm",
        "aten::_scaled_dot_product_flash_attention_for_cpu",
        "aten::_scaled_dot_product_flash_attention",
        "aten::_scaled_dot_product_efficient_attention",
        "aten::_scaled_dot_product_cudnn_attention",
        "aten::_flash_attention_forward",
        "torch_attn::_varlen_attn",
    )


def save_policy(_ctx: object, op: object, *_args: Any, **_kwargs: Any) -> CheckpointPolicy:
    """The "selective" policy's decision for one operator of a checkpointed layer's forward:
    keep the output of a matmul or attention kernel, recompute anything else in backward."""
    if op in saved_ops():
        return CheckpointPolicy.MUST_SAVE
    return CheckpointPolicy.PREFER_RECOMPUTE


def checkpoint_kwargs(policy: str) -> dict[str, Any]:
    """The keyword arguments of `torch.utils.checkpoint.checkpoint` for a policy: always
    non-reentrant, and for "selective" a `context_fn` that makes fresh selective-checkpoint
    contexts per call."""
    if policy not in POLICIES:
        raise ValueError(f"checkpoint policy {policy!r}: expected one of {POLICIES}")
    kwargs: dict[str, Any] = {"use_reentrant": False}
    if policy == "selective":
        context_fn: Callable[[], Any] = functools.partial(
            create_selective_checkpoint_contexts, save_policy
        )
        kwargs["context_fn"] = context_fn
    return kwargs


CACHE_KWARGS = ("past_key_values", "cache", "layer_past")
"""The names a decoder layer's KV cache goes by: `past_key_values` (transformers 4.x and 5.x
through 5.17 at least), `cache` (5.24), `layer_past` (older models)."""


def _checkpointed_forward(layer: nn.Module, *args: Any, **kwargs: Any) -> Any:
    """A checkpointed layer's `forward`: its class's own, run under `checkpoint` when it
    trains with gradients, with no KV cache; as it is otherwise (evaluation, no_grad)."""
    forward = functools.partial(type(layer).forward, layer)
    if not (layer.training and torch.is_grad_enabled()):
        return forward(*args, **kwargs)
    for name in CACHE_KWARGS:
        if kwargs.get(name) is not None:
            kwargs[name] = None
    if kwargs.get("use_cache"):
        kwargs["use_cache"] = False
    return checkpoint(forward, *args, **layer.checkpoint_options, **kwargs)


def checkpoint_layers(layers: Iterable[nn.Module], every: int, policy: str) -> None:
    """Checkpoint layers 0, `every`, 2 x `every`, ... of `layers` with `policy`, in place: an
    instance `forward` bound to each (so a deep copy checkpoints its own layers) and the
    checkpoint's options in `checkpoint_options`. Call before `torch.compile` wraps the
    layers, so that the checkpoint is traced inside."""
    options = checkpoint_kwargs(policy)
    for i, layer in enumerate(layers):
        if i % every == 0:
            layer.checkpoint_options = options
            layer.forward = types.MethodType(_checkpointed_forward, layer)


def is_checkpointed(layer: nn.Module) -> bool:
    """Whether `checkpoint_layers` checkpointed this layer."""
    forward = layer.__dict__.get("forward")
    return getattr(forward, "__func__", None) is _checkpointed_forward
