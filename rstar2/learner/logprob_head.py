"""The policy's token log-probs and entropy without the full-vocabulary logits.

The RL loss needs, at each position that carries loss, the log-probability of the sampled token
and (as a metric, or an entropy bonus) the entropy of the next-token distribution. Computing
them from `model(...).logits` materialises [tokens, vocab] logits plus the log-softmax: at
Qwen2.5's 151,936-entry vocabulary that is 5 GB in float32 for 8,192 tokens, memory-bound work
that dominated the learner's step on a GPU (docs/production.md). Here they come from the last
hidden states in chunks of `chunk` positions: a chunk's logits are computed in the compute dtype
(bf16 under autocast or FSDP2's mixed precision), reduced in float32 (log-sum-exp, the sampled
token's logit, the entropy) and dropped; backward recomputes each chunk's logits from the saved
hidden states and weight (one more head matmul, the price of never holding the logits). The
head's extra memory is one chunk's logits and their gradient, whatever the sequence length.

Gradients (for a row with logits z, probabilities p, log-probs l, entropy H, sampled token y):
    d logp_y / dz = onehot(y) - p,        dH / dz = -p * (l + H).

`LogprobHead` is the drop-in replacement for a Hugging Face model's `lm_head` (`install`): the
same weight `Parameter` (tied embeddings stay tied, state-dict names do not change), a plain
linear layer unless armed with `targets(...)`, in which case the model's `logits` output is
[1, N, 2]: log-prob and entropy of each of the N positions the caller kept (HF's
`logits_to_keep` with an index tensor), so prompt and tool-response positions never reach the
head. Peers did the same for the same reason (prime-rl, TRL, SkyRL; Liger's fused linear
cross-entropy), mostly fused with a fixed loss; the chunked autograd function here keeps the
loss (GRPO-RoC's clipped surrogate, TIS) outside, where `rstar2.rl` defines it.

With `compiled` (`learner.compile_head`) a chunk's element-wise work runs as two functions
compiled by `torch.compile` (`chunk_stats` forward, `chunk_logit_grad` backward; the matmuls stay
outside, on cuBLAS): the forward's log-sum-exp, gathered log-prob and entropy in one or two
fused reductions over the chunk's logits, and the backward's logit gradient in one pointwise
pass, as the forward saves each row's log-sum-exp l_0 and entropy H:
    dz = onehot(y) * g_logp - p * (g_logp + g_ent * (l + H)),    p = exp(z - l_0), l = z - l_0.
The eager path (the default) is written for eager kernels instead: it recomputes the softmax in
backward, one fused kernel, rather than a chain of pointwise ones.

What it does not do: sample, or compute anything but log-probs and entropy.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from rstar2.learner.step_timer import phase

DEFAULT_CHUNK = 1024
"""Positions per head chunk: at a 151,936-token vocabulary the forward holds a chunk's bf16
logits and two float32 buffers (1.6 GB at 1,024 positions), the backward less; fewer, larger
chunks mean fewer float32 accumulations of the head's weight gradient."""


class _ChunkedLogprobs(torch.autograd.Function):
    """(hidden [N, H], weight [V, H], targets [N]) -> (log-prob [N], entropy [N]), float32."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        hidden: torch.Tensor,
        weight: torch.Tensor,
        targets: torch.Tensor,
        chunk: int,
        compiled: bool,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        ctx.compiled = compiled
        ctx.set_materialize_grads(False)  # an unused entropy: None, not zeros, in backward
        with phase("head_forward"):
            if compiled:
                return _ChunkedLogprobs._forward_compiled(ctx, hidden, weight, targets, chunk)
            return _ChunkedLogprobs._forward(ctx, hidden, weight, targets, chunk)

    @staticmethod
    def _forward(
        ctx: Any, hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, chunk: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        n, acc = hidden.shape[0], _reduction_dtype(hidden)
        logp = torch.empty(n, dtype=acc, device=hidden.device)
        entropy = torch.empty(n, dtype=acc, device=hidden.device)
        for s in range(0, n, chunk):
            # one fused kernel reads the chunk's logits in the compute dtype, writes float32
            logp_all = F.log_softmax(hidden[s : s + chunk] @ weight.t(), dim=-1, dtype=acc)
            logp[s : s + chunk] = logp_all.gather(-1, targets[s : s + chunk, None]).squeeze(-1)
            entropy[s : s + chunk] = -logp_all.exp().mul_(logp_all).sum(-1)
        ctx.save_for_backward(hidden, weight, targets)
        ctx.chunk = chunk
        return logp, entropy

    @staticmethod
    def _forward_compiled(
        ctx: Any, hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, chunk: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        n, acc = hidden.shape[0], _reduction_dtype(hidden)
        logp, entropy, lse = (torch.empty(n, dtype=acc, device=hidden.device) for _ in range(3))
        stats_of = _compiled(chunk_stats)
        for s in range(0, n, chunk):
            rows = slice(s, s + chunk)
            logp[rows], entropy[rows], lse[rows] = stats_of(
                hidden[rows] @ weight.t(), targets[rows]
            )
        ctx.save_for_backward(hidden, weight, targets, entropy, lse)  # backward: pointwise
        ctx.chunk = chunk
        return logp, entropy

    @staticmethod
    def backward(  # type: ignore[override]
        ctx: Any, g_logp: torch.Tensor | None, g_entropy: torch.Tensor | None
    ) -> tuple[torch.Tensor | None, torch.Tensor | None, None, None, None]:
        with phase("head_backward"):
            return (*_ChunkedLogprobs._backward(ctx, g_logp, g_entropy), None)

    @staticmethod
    def _backward(
        ctx: Any, g_logp: torch.Tensor | None, g_entropy: torch.Tensor | None
    ) -> tuple[torch.Tensor | None, torch.Tensor | None, None, None]:
        hidden, weight, targets, *saved = ctx.saved_tensors
        need_h, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        g_hidden = torch.empty_like(hidden) if need_h else None
        n, chunk, acc = hidden.shape[0], ctx.chunk, _reduction_dtype(hidden)
        g_weight = torch.zeros(weight.shape, dtype=acc, device=weight.device) if need_w else None
        for s in range(0, n, chunk):
            h = hidden[s : s + chunk]
            gl = g_logp[s : s + chunk] if g_logp is not None else h.new_zeros(h.shape[0], dtype=acc)
            ge = g_entropy[s : s + chunk] if g_entropy is not None else None
            if ctx.compiled:
                entropy, lse = (t[s : s + chunk] for t in saved)
                g_z = _compiled(chunk_logit_grad)(
                    h @ weight.t(), targets[s : s + chunk], lse, entropy, gl, ge
                )
            else:
                g_z = _logit_grad(h @ weight.t(), gl, ge, acc)
                g_z.scatter_add_(-1, targets[s : s + chunk, None], gl[:, None].to(g_z.dtype))
            if g_hidden is not None:
                g_hidden[s : s + chunk] = g_z @ weight
            if g_weight is not None:
                g_weight = _accumulate(g_weight, g_z.t(), h)
        return g_hidden, (g_weight.to(weight.dtype) if g_weight is not None else None), None, None


def _logit_grad(
    z: torch.Tensor, gl: torch.Tensor, ge: torch.Tensor | None, acc: torch.dtype
) -> torch.Tensor:
    """The gradient of a chunk's logits `z`, before the sampled tokens' +g_logp: -p * g_logp,
    and -p * (l + H) * g_entropy (`ge`, the chunk's) when the entropy carries a gradient. Without the entropy term
    it is computed in `z`'s dtype (the softmax accumulates in float32 inside one kernel: the
    gradient is cast to that dtype for the matmuls anyway)."""
    if ge is None:
        return F.softmax(z, dim=-1).mul_(-gl[:, None].to(z.dtype))
    logp_all = F.log_softmax(z, dim=-1, dtype=acc)
    p = logp_all.exp()
    h_rows = -(p * logp_all).sum(-1)
    # dz = -p * (g_logp + g_ent * (l + H))
    logp_all.add_(h_rows[:, None]).mul_(ge[:, None]).add_(gl[:, None])
    return p.mul_(logp_all).neg_().to(z.dtype)


def chunk_stats(
    z: torch.Tensor, targets: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A chunk's logits `z` [C, V] (compute dtype) -> the log-prob of `targets` [C], the
    entropy and the log-sum-exp, each [C] in float32 (float64 for float64 `z`). Written to be
    compiled (`learner.compile_head`); eager, it allocates four float32 copies of `z`."""
    z = z.to(_reduction_dtype(z))
    lse = torch.logsumexp(z, dim=-1)
    logp_all = z - lse[:, None]
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logp_all.gather(-1, targets[:, None]).squeeze(-1), entropy, lse


def chunk_logit_grad(
    z: torch.Tensor,
    targets: torch.Tensor,
    lse: torch.Tensor,
    entropy: torch.Tensor,
    g_logp: torch.Tensor,
    g_entropy: torch.Tensor | None,
) -> torch.Tensor:
    """The gradient of a chunk's logits `z` [C, V], in `z`'s dtype, from the forward's
    log-sum-exp and entropy ([C], float32) and the incoming gradients of the log-prob and (None
    when it carries none) the entropy: onehot(y) * g_logp - p * (g_logp + g_ent * (l + H)).
    Pointwise given `lse`: compiled, one pass over `z` (the one-hot is an index comparison)."""
    logp_all = z.to(lse.dtype) - lse[:, None]
    scale = g_logp[:, None]
    if g_entropy is not None:
        scale = scale + g_entropy[:, None] * (logp_all + entropy[:, None])
    onehot = torch.arange(z.shape[-1], device=z.device) == targets[:, None]
    g_z = torch.where(onehot, g_logp[:, None], 0.0) - logp_all.exp() * scale
    return g_z.to(z.dtype)


@functools.cache
def _compiled(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` compiled once, on first use, for any chunk length and vocabulary (dynamic shapes:
    the last chunk is shorter, and micro-batches differ in loss positions)."""
    return torch.compile(fn, dynamic=True, fullgraph=True)


def _accumulate(total: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """total + a @ b, summed in `total`'s dtype: one GEMM writing float32 from bf16 inputs where
    torch offers it (CUDA), else a product cast up and added."""
    global _mixed_addmm
    if a.dtype == total.dtype:
        return total.addmm_(a, b)
    if _mixed_addmm and a.is_cuda:
        try:
            return torch.addmm(total, a, b, out_dtype=total.dtype)
        except (TypeError, RuntimeError, NotImplementedError):
            _mixed_addmm = False  # this torch has no such GEMM: never ask again
    return total.add_((a @ b).to(total.dtype))


_mixed_addmm = True


def _reduction_dtype(t: torch.Tensor) -> torch.dtype:
    """float32, or float64 for float64 inputs (the exact tests)."""
    return torch.promote_types(t.dtype, torch.float32)


def chunked_logprobs(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    chunk: int = DEFAULT_CHUNK,
    compiled: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-prob of `targets` and entropy at each row of `hidden` ([N, H]) under the LM head
    `weight` ([V, H]), both float32 [N] (float64 for float64 inputs); differentiable in `hidden` and `weight`. The matmuls
    run in `hidden`'s and `weight`'s common dtype (cast them first for bf16). `compiled`: each
    chunk's element-wise work by `torch.compile`d `chunk_stats` / `chunk_logit_grad` (the first
    call compiles them, once per process)."""
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1, got {chunk}")
    if hidden.dim() != 2 or targets.shape != hidden.shape[:1]:
        raise ValueError(
            f"need hidden [N, H] and targets [N], got {tuple(hidden.shape)} and "
            f"{tuple(targets.shape)}"
        )
    return _ChunkedLogprobs.apply(hidden, weight, targets, chunk, compiled)


def _compute_dtype(t: torch.Tensor) -> torch.dtype:
    """bf16 under autocast on `t`'s device type, else `t`'s own dtype (FSDP2's mixed precision
    has already cast the unsharded weight)."""
    kind = t.device.type
    if torch.is_autocast_enabled(kind):
        return torch.get_autocast_dtype(kind)
    return t.dtype


class LogprobHead(nn.Module):
    """A model's LM head that, when armed, returns log-probs and entropy instead of logits."""

    def __init__(
        self, linear: nn.Linear, chunk: int = DEFAULT_CHUNK, compiled: bool = False
    ) -> None:
        super().__init__()
        if linear.bias is not None:
            raise ValueError("LogprobHead needs an LM head without bias")
        self.weight = linear.weight  # the same Parameter: tied embeddings stay tied
        self.in_features = linear.in_features
        self.out_features = linear.out_features
        self.chunk = chunk
        self.compiled = compiled
        self._targets: torch.Tensor | None = None

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        if self._targets is None:
            return F.linear(hidden, self.weight)
        if hidden.shape[0] != 1 or hidden.shape[1] != self._targets.shape[0]:
            raise ValueError(
                f"armed head: need hidden [1, {self._targets.shape[0]}, H], got "
                f"{tuple(hidden.shape)} (pass logits_to_keep=<the kept positions>)"
            )
        dtype = _compute_dtype(self.weight)
        logp, entropy = chunked_logprobs(
            hidden[0].to(dtype), self.weight.to(dtype), self._targets, self.chunk, self.compiled
        )
        return torch.stack([logp[None], entropy[None]], dim=-1)  # a new tensor, not a view

    @contextmanager
    def targets(self, targets: torch.Tensor) -> Iterator[None]:
        """Within the block the head returns [1, N, 2] (log-prob of `targets`, entropy)."""
        self._targets = targets
        try:
            yield
        finally:
            self._targets = None

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"chunk={self.chunk}, compiled={self.compiled}"
        )


def install(
    model: nn.Module, chunk: int = DEFAULT_CHUNK, compiled: bool = False
) -> LogprobHead | None:
    """Replace `model.lm_head` (a bias-free nn.Linear) with a `LogprobHead` sharing its weight
    and return it; the installed head (with `chunk` and `compiled` set) when there is one
    already; None for a model without such a head (the caller then takes the full-logits path).
    Install before FSDP2 wraps the model."""
    head = getattr(model, "lm_head", None)
    if isinstance(head, LogprobHead):
        head.chunk, head.compiled = chunk, compiled
        return head
    if type(head) is not nn.Linear or head.bias is not None:
        return None
    new = LogprobHead(head, chunk, compiled)
    model.lm_head = new
    return new
