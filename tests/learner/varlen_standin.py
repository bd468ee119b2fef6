"""A CPU stand-in for torch's `varlen_attn` (`torch.nn.attention.varlen`), so the learner's GPU
attention path (one varlen call per layer for a packed row) runs, and compiles, on the CPU.

It has `varlen_attn`'s signature and computes the same thing, causal attention within each
sequence of the row, by one SDPA call per sequence inside a custom op with a fake
implementation and a backward that is a custom op too: what torch's own ops
(`torch_attn::_varlen_attn` and its backward) look like to torch.compile, opaque and
traceable.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def _per_sequence(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu: torch.Tensor, scale: float | None
) -> torch.Tensor:
    """[S, Hq, D] queries, [S, Hkv, D] keys and values -> [S, Hq, D]."""
    bounds = cu.tolist()
    parts = [
        F.scaled_dot_product_attention(
            q[a:b].transpose(0, 1), k[a:b].transpose(0, 1), v[a:b].transpose(0, 1),
            is_causal=True, scale=scale, enable_gqa=k.shape[1] != q.shape[1],
        ).transpose(0, 1)
        for a, b in zip(bounds, bounds[1:], strict=False)
    ]  # fmt: skip
    return torch.cat(parts)


@torch.library.custom_op("rstar2_tests::varlen_standin", mutates_args=())
def varlen_op(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu: torch.Tensor, scale: float | None
) -> torch.Tensor:
    return _per_sequence(q, k, v, cu, scale)


@varlen_op.register_fake
def _(q, k, v, cu, scale):  # type: ignore[no-untyped-def]
    return torch.empty_like(q)


@torch.library.custom_op("rstar2_tests::varlen_standin_backward", mutates_args=())
def varlen_backward_op(
    grad: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu: torch.Tensor,
    scale: float | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    # below autograd here (a custom op's body): torch.func's own transform instead
    _, vjp = torch.func.vjp(lambda a, b, c: _per_sequence(a, b, c, cu, scale), q, k, v)
    gq, gk, gv = vjp(grad)
    return gq, gk, gv


@varlen_backward_op.register_fake
def _(grad, q, k, v, cu, scale):  # type: ignore[no-untyped-def]
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _setup(ctx, inputs, output) -> None:  # type: ignore[no-untyped-def]
    q, k, v, cu, scale = inputs
    ctx.save_for_backward(q, k, v, cu)
    ctx.scale = scale


def _backward(ctx, grad):  # type: ignore[no-untyped-def]
    q, k, v, cu = ctx.saved_tensors
    gq, gk, gv = varlen_backward_op(grad, q, k, v, cu, ctx.scale)
    return gq, gk, gv, None, None


varlen_op.register_autograd(_backward, setup_context=_setup)


def varlen_attn(  # the signature of torch.nn.attention.varlen.varlen_attn (torch 2.13)
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    cu_seq_q: torch.Tensor,
    cu_seq_k: torch.Tensor | None,
    max_q: int,
    max_k: int,
    *,
    scale: float | None = None,
    window_size: tuple[int, int] = (-1, -1),
    enable_gqa: bool = False,
) -> torch.Tensor:
    assert window_size == (-1, 0), "the learner asks for causal attention"
    assert enable_gqa or key.shape[1] == query.shape[1]
    return varlen_op(query, key, value, cu_seq_q, scale)
