"""Which activations a checkpointed decoder layer keeps (`learner.checkpoint_policy`).

"full" keeps only the layer's input and recomputes the whole layer in backward: the least
memory, and about one more forward of compute (in a compute-bound update, 3 units of work
become 4: at most ~75% of the plain update's tokens/s with every layer checkpointed).
"selective" keeps the outputs of the layer's matmuls and attention kernels and recomputes
only the rest (norms, rotary embeddings, the SiLU and its product, residual adds): element-wise
work, cheap to redo and fused by torch.compile, so the backward recomputes no FLOP that counts
in MFU; the memory sits between "full" and no checkpointing (the MLP's two wide projections
are most of what is kept).

The mechanism is PyTorch's selective activation checkpointing
(`torch.utils.checkpoint.create_selective_checkpoint_contexts`, the `context_fn` of a
non-reentrant checkpoint, which torch.compile traces with the layer), so the recomputation,
its caching and its interplay with compilation and FSDP2 stay the library's; this module only
decides per operator (`save_policy`, a plain function the tests call).

What it does not do: turn checkpointing on (`model_preparation.prepare_model`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

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
    """ "selective"'s decision for one operator of a checkpointed layer's forward: keep the
    output of a matmul or attention kernel, recompute anything else in backward."""
    if op in saved_ops():
        return CheckpointPolicy.MUST_SAVE
    return CheckpointPolicy.PREFER_RECOMPUTE


def checkpoint_kwargs(policy: str) -> dict[str, Any]:
    """The keyword arguments of `torch.utils.checkpoint.checkpoint` for a policy (what
    transformers' `activation_checkpointing_enable` passes on): always non-reentrant, and for
    "selective" a `context_fn` that makes fresh selective-checkpoint contexts per call."""
    if policy not in POLICIES:
        raise ValueError(f"checkpoint policy {policy!r}: expected one of {POLICIES}")
    kwargs: dict[str, Any] = {"use_reentrant": False}
    if policy == "selective":
        context_fn: Callable[[], Any] = functools.partial(
            create_selective_checkpoint_contexts, save_policy
        )
        kwargs["context_fn"] = context_fn
    return kwargs
