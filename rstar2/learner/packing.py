"""Rollouts packed into one row without padding, and micro-batches sized by a token budget.

An RL batch holds sequences of very different lengths (a two-turn answer next to a long
multi-tool one). Padding them to the longest wastes the learner's compute on pad tokens, and a
micro-batch of a fixed number of sequences has a memory footprint that swings with their
lengths. Here (as verl's `use_remove_padding` and `ppo_max_token_len_per_gpu`):

- `token_budget_micro_batches` cuts a list of rollouts, in order, into micro-batches of at most
  `budget` tokens (and at most `max_sequences` sequences); a longer rollout is a micro-batch of
  its own. Contiguous in order, so a micro-batch split never changes what a mini-batch holds.
- `pack` concatenates a micro-batch's rollouts into one [1, S] row: position ids restart at 0
  for each sequence, `cu_seqlens` marks the boundaries, and attention is kept within each
  sequence by the `rstar2_packed` attention implementation (`use_packed_attention`). Only the
  positions that predict a loss token are kept for the LM head (`keep`), so prompt and
  tool-response tokens never reach it (`logprob_head`).

`packed_attention` runs PyTorch's variable-length flash attention (`torch.nn.attention.varlen`,
one kernel call for the whole row) on CUDA in bf16/fp16, and one causal SDPA call per sequence
elsewhere (the CPU, float32): both exact, neither builds an [S, S] mask. Calls without packing
(padded batches with a 2-D attention mask: SFT, evaluation) go to transformers' own SDPA path
unchanged. A registered attention function is the extension point transformers offers for
this (`AttentionInterface`), so the model's own modules, rotary embeddings and gradient
checkpointing are used as they are.

The loss is unchanged by packing: GRPO-RoC's token-level mean divides by the mini-batch's loss
tokens, whatever the micro-batches (tested against the padded update).

What it does not do: reorder rollouts by length (ranks and mini-batches keep the batch's order).
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
import torch.nn.functional as F
from torch import nn

log = logging.getLogger(__name__)

PACKED_ATTENTION = "rstar2_packed"
"""The attention implementation name registered with transformers."""


class TokenSequence(Protocol):
    token_ids: Sequence[int]
    loss_mask: Sequence[int]
    logprobs: Sequence[float]


@dataclass
class PackedMicroBatch:
    """A micro-batch's rollouts as one row; N = its loss tokens, n = its sequences."""

    input_ids: torch.Tensor
    """[1, S] the rollouts' tokens, concatenated."""
    position_ids: torch.Tensor
    """[1, S] restarting at 0 for each sequence."""
    cu_seqlens: torch.Tensor
    """[n + 1] int32 sequence boundaries in the row (flash attention's layout)."""
    max_len: int
    keep: torch.Tensor
    """[N] row positions whose output predicts a loss token (the position before it)."""
    targets: torch.Tensor
    """[N] the loss tokens."""
    behaviour: torch.Tensor
    """[N] float32: the engine's log-probs of the loss tokens."""
    advantages: torch.Tensor
    """[N] float32: each loss token's sequence advantage."""
    counts: list[int]
    """Loss tokens of each sequence, in order (to split per-token results by rollout)."""

    def to(self, device: torch.device) -> PackedMicroBatch:
        move = {
            k: getattr(self, k).to(device)
            for k in ("input_ids", "position_ids", "cu_seqlens", "keep", "targets", "behaviour",
                      "advantages")
        }  # fmt: skip
        return PackedMicroBatch(**move, max_len=self.max_len, counts=self.counts)

    def forward_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of the model's forward pass over this row."""
        return {
            "input_ids": self.input_ids,
            "position_ids": self.position_ids,
            "attention_mask": None,
            "use_cache": False,
            "logits_to_keep": self.keep,
            "cu_seq_lens_q": self.cu_seqlens,
            "cu_seq_lens_k": self.cu_seqlens,
            "max_length_q": self.max_len,
            "max_length_k": self.max_len,
        }


def pack(rollouts: Sequence[TokenSequence], advantages: Sequence[float]) -> PackedMicroBatch:
    """One row of `rollouts` (token ids, loss masks and behaviour log-probs of equal lengths;
    each needs at least one token). Position t of a sequence predicts token t + 1, so token t + 1
    is kept when its loss-mask entry is set."""
    if not rollouts:
        raise ValueError("pack needs at least one rollout")
    if len(advantages) != len(rollouts):
        raise ValueError(f"{len(rollouts)} rollouts but {len(advantages)} advantages")
    ids: list[int] = []
    mask: list[int] = []
    logprobs: list[float] = []
    lengths: list[int] = []
    for i, r in enumerate(rollouts):
        n = len(r.token_ids)
        if n == 0 or not (len(r.loss_mask) == len(r.logprobs) == n):
            raise ValueError(
                f"rollout {i}: token_ids, loss_mask and logprobs must be non-empty and of "
                "equal length"
            )
        ids.extend(r.token_ids)
        mask.extend(r.loss_mask)
        logprobs.extend(r.logprobs)
        lengths.append(n)
    row = torch.tensor(ids, dtype=torch.long)
    sizes = torch.tensor(lengths)
    bounds = torch.cat([torch.zeros(1, dtype=torch.long), sizes.cumsum(0)])
    starts = bounds[:-1].repeat_interleave(sizes)  # each token's sequence start
    # a token with loss is predicted by the position before it, within its own sequence
    loss = torch.tensor(mask, dtype=torch.bool) & (torch.arange(len(ids)) != starts)
    sel = loss.nonzero().squeeze(1)
    seq = torch.arange(len(rollouts)).repeat_interleave(sizes)[sel]
    return PackedMicroBatch(
        input_ids=row[None],
        position_ids=(torch.arange(len(ids)) - starts)[None],
        cu_seqlens=bounds.to(torch.int32),
        max_len=max(lengths),
        keep=sel - 1,
        targets=row[sel],
        behaviour=torch.tensor(logprobs, dtype=torch.float32)[sel],
        advantages=torch.tensor(advantages, dtype=torch.float32)[seq],
        counts=torch.bincount(seq, minlength=len(rollouts)).tolist(),
    )


def token_budget_micro_batches(
    items: Sequence[int], lengths: Sequence[int], budget: int, max_sequences: int
) -> list[list[int]]:
    """`items` (batch indices, `lengths` their token counts) in order, cut into micro-batches of
    at most `budget` tokens and `max_sequences` items; an item longer than `budget` alone."""
    if budget < 1 or max_sequences < 1:
        raise ValueError(f"need budget >= 1 and max_sequences >= 1, got {budget}, {max_sequences}")
    out: list[list[int]] = []
    current: list[int] = []
    used = 0
    for item, n in zip(items, lengths, strict=True):
        if current and (used + n > budget or len(current) >= max_sequences):
            out.append(current)
            current, used = [], 0
        current.append(item)
        used += n
    if current:
        out.append(current)
    return out


def _varlen_call() -> Callable[..., torch.Tensor] | None:
    """torch's variable-length flash attention with causal masking and grouped-query heads,
    adapted to the installed torch's signature; None where torch has none."""
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    params = inspect.signature(varlen_attn).parameters
    causal: dict[str, Any] = (
        {"is_causal": True} if "is_causal" in params else {"window_size": (-1, 0)}
    )
    gqa = "enable_gqa" in params

    def call(q, k, v, cu, max_len, scale):  # type: ignore[no-untyped-def]
        if k.shape[1] != q.shape[1] and not gqa:
            rep = q.shape[1] // k.shape[1]
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        extra = {"enable_gqa": True} if gqa else {}
        return varlen_attn(q, k, v, cu, cu, max_len, max_len, scale=scale, **causal, **extra)

    return call


_VARLEN = _varlen_call()

VarlenShape = tuple[str, int, int, int, torch.dtype]
"""(device type, query heads, key/value heads, head size, dtype) of a varlen call."""

_varlen_usable: dict[VarlenShape, bool] = {}
"""Whether varlen attention ran for a shape on this process's GPU (`check_varlen`)."""

attention_paths: set[str] = set()
"""The packed-attention kernels this process has used ("varlen", "sdpa-per-sequence"), for the
benchmark's report (`note_attention_path`)."""


def compute_dtype(model: nn.Module, bf16: bool) -> torch.dtype:
    """The dtype attention computes in: bf16 under the learner's bf16 (autocast or FSDP2's
    mixed precision), else the parameters'."""
    return torch.bfloat16 if bf16 else next(model.parameters()).dtype


def _shape_of(model: nn.Module, device: torch.device, dtype: torch.dtype) -> VarlenShape:
    c = model.config
    heads = int(c.num_attention_heads)
    head_dim = getattr(c, "head_dim", None) or int(c.hidden_size) // heads
    kv_heads = int(getattr(c, "num_key_value_heads", None) or heads)
    return device.type, heads, kv_heads, int(head_dim), dtype


def check_varlen(model: nn.Module, device: torch.device, dtype: torch.dtype) -> bool:
    """Whether packed rows of `model` on `device` in `dtype` take varlen attention: a GPU, a
    half-precision dtype, torch's `varlen_attn`, and a first call of that shape that ran
    (tried once, eagerly, before the model's forward: a failure is logged and that shape
    takes one SDPA call per sequence). Deciding here, outside the model, keeps
    `packed_attention` free of side effects, which a compiled layer under activation
    checkpointing needs (torch.compile falls back to eager for the whole checkpointed layer
    at the first state the function changes)."""
    if _VARLEN is None or device.type != "cuda" or dtype not in (torch.bfloat16, torch.float16):
        return False
    shape = _shape_of(model, device, dtype)
    if shape not in _varlen_usable:
        _varlen_usable[shape] = _try_varlen(shape, device)
    return _varlen_usable[shape]


def _try_varlen(shape: VarlenShape, device: torch.device) -> bool:
    assert _VARLEN is not None
    _, heads, kv_heads, head_dim, dtype = shape
    q = torch.ones(8, heads, head_dim, device=device, dtype=dtype)  # no draw from the RNG
    kv = torch.ones(8, kv_heads, head_dim, device=device, dtype=dtype)
    cu = torch.tensor([0, 3, 8], device=device, dtype=torch.int32)
    try:
        _VARLEN(q, kv, kv, cu, 5, None)
    except (RuntimeError, TypeError, ValueError, NotImplementedError) as e:
        log.warning("varlen attention failed (%s); one SDPA call per sequence instead", e)
        return False
    return True


def note_attention_path(model: nn.Module, device: torch.device, dtype: torch.dtype) -> None:
    """Record the kernel a packed forward of `model` took (after `check_varlen`)."""
    usable = _varlen_usable.get(_shape_of(model, device, dtype), False)
    attention_paths.add("varlen" if usable else "sdpa-per-sequence")


def packed_attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-function interface: query [1, Hq, S, D], key/value
    [1, Hkv, S, D] -> output [1, S, Hq, D]. Packed (`cu_seq_lens_q` given): causal attention
    within each sequence, by varlen attention where `check_varlen` found it usable; otherwise
    transformers' SDPA path. No side effects (see `check_varlen`)."""
    cu = kwargs.get("cu_seq_lens_q")
    if cu is None:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    if query.shape[0] != 1:
        raise ValueError(f"packed attention needs one row, got batch {query.shape[0]}")
    dtype, where = query.dtype, query.device.type
    if torch.is_autocast_enabled(where):
        dtype = torch.get_autocast_dtype(where)  # rotary embeddings promoted q and k
    shape = (where, query.shape[1], key.shape[1], query.shape[-1], dtype)
    if _VARLEN is not None and _varlen_usable.get(shape, False):  # only GPUs (check_varlen)
        q, k, v = (t[0].transpose(0, 1).to(dtype).contiguous() for t in (query, key, value))
        out = _VARLEN(q, k, v, cu, int(kwargs["max_length_q"]), scaling)  # [S, H, D]
        return out.unsqueeze(0), None
    bounds = cu.tolist()
    parts = [
        F.scaled_dot_product_attention(
            query[:, :, a:b], key[:, :, a:b], value[:, :, a:b],
            is_causal=True, scale=scaling, enable_gqa=key.shape[1] != query.shape[1],
        )
        for a, b in zip(bounds, bounds[1:], strict=False)
    ]  # fmt: skip
    return torch.cat(parts, dim=2).transpose(1, 2).contiguous(), None


def _packed_mask(**kwargs: Any) -> torch.Tensor | None:
    """The mask function for `rstar2_packed`: none for a packed row (attention_mask None: the
    attention function keeps sequences apart), SDPA's for a padded batch."""
    if kwargs.get("attention_mask") is None:
        return None
    from transformers.masking_utils import sdpa_mask

    return sdpa_mask(**kwargs)


def _register() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(PACKED_ATTENTION, packed_attention)
    AttentionMaskInterface.register(PACKED_ATTENTION, _packed_mask)


def use_packed_attention(model: nn.Module) -> bool:
    """Switch a Hugging Face model to `rstar2_packed` attention (registered with transformers on
    first use); False (model untouched) for a model without a transformers config."""
    config = getattr(model, "config", None)
    if config is None or not hasattr(config, "_attn_implementation"):
        return False
    _register()
    try:
        model.set_attn_implementation(PACKED_ATTENTION)  # type: ignore[operator]
    except (AttributeError, ValueError, TypeError, KeyError):
        config._attn_implementation = PACKED_ATTENTION  # transformers without the setter
    return config._attn_implementation == PACKED_ATTENTION
