"""The decoder forward pass of a Hugging Face Llama/Qwen2/Qwen3 causal LM, over its own weights.

Supports what those architectures use: token embeddings, RMSNorm, rotary position embeddings
(the module's own `inv_freq` and attention scaling, so `rope_theta` and static rope scaling
carry over), grouped-query attention, optional q/k/v/o biases (Qwen2), per-head q/k RMSNorm
(Qwen3), SwiGLU MLPs and tied or separate LM heads. The engine shares the module's parameter
tensors (no copy): in-place changes to them (an optimizer step, `load_state_dict`) are seen
by the next step. Attention reads K/V from the engine's paged cache (`KVCache`) as laid out
by a `StepBatch`; logits are computed only for each request's last token.

What it does not do: sliding-window attention, dynamic rope scaling, MoE layers or any
activation other than SiLU; such models are rejected with a ValueError.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from rstar2.engine.kv_cache import KVCache
from rstar2.engine.step_batch import PrefillGroup, StepBatch

SUPPORTED_MODEL_TYPES = ("llama", "qwen2", "qwen3", "mistral")


@dataclass
class LayerWeights:
    input_norm: torch.Tensor
    q: nn.Linear
    k: nn.Linear
    v: nn.Linear
    o: nn.Linear
    q_norm: torch.Tensor | None
    k_norm: torch.Tensor | None
    post_norm: torch.Tensor
    gate: torch.Tensor
    up: torch.Tensor
    down: torch.Tensor


def check_supported(model: nn.Module) -> None:
    """Raise ValueError unless `model` is a decoder this forward pass computes exactly."""
    cfg = getattr(model, "config", None)
    model_type = getattr(cfg, "model_type", None)
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise ValueError(
            f"unsupported model type {model_type!r} (supported: {', '.join(SUPPORTED_MODEL_TYPES)})"
        )
    if getattr(cfg, "hidden_act", "silu") != "silu":
        raise ValueError(f"unsupported activation {cfg.hidden_act!r} (only silu)")
    if getattr(cfg, "use_sliding_window", False) and getattr(cfg, "sliding_window", None):
        raise ValueError("sliding-window attention is not supported by the embedded engine")
    rope_type = getattr(model.model.rotary_emb, "rope_type", "default")
    if "dynamic" in str(rope_type) or rope_type == "longrope":
        raise ValueError(f"rope type {rope_type!r} changes with length and is not supported")


class Transformer:
    def __init__(self, model: nn.Module, max_positions: int) -> None:
        check_supported(model)
        cfg = model.config
        self.model = model
        self.num_heads = cfg.num_attention_heads
        self.num_kv_heads = getattr(cfg, "num_key_value_heads", None) or self.num_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.num_heads
        self.eps = cfg.rms_norm_eps
        self.hidden = cfg.hidden_size
        self.num_layers = cfg.num_hidden_layers
        self.dtype = model.model.embed_tokens.weight.dtype
        self.layers = [_layer_weights(layer) for layer in model.model.layers]
        self.cos, self.sin = _rope_tables(model.model.rotary_emb, max_positions, self.dtype)

    @torch.inference_mode()
    def forward(self, batch: StepBatch, cache: KVCache) -> torch.Tensor:
        """Logits `[num_requests, vocab]` at each request's last scheduled token."""

        # a continuation group's mask folded once a step (`_attention` folds the query heads
        # that share a KV head into the query length)
        heads = self.num_heads // self.num_kv_heads
        masks = [None if g.mask is None else _fold_mask(g.mask, heads) for g in batch.prefill]

        def attend(layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            return self._attention(layer, q, k, v, batch, masks, cache)

        x = self._layers(batch.input_ids, batch.positions, batch.write_rows, cache, attend)
        return self._logits(x[batch.last_index])

    def decode_fixed(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        write_rows: torch.Tensor,
        block_rows: torch.Tensor,
        mask: torch.Tensor,
        cache: KVCache,
    ) -> torch.Tensor:
        """Logits `[B, vocab]` of B requests decoding one token each, every tensor of a fixed
        shape (so the call can be captured in a CUDA graph): `block_rows` the KV rows of W
        blocks per request (`KVCache.block_rows`), `mask` bool `[B, 1, 1, W * block_size]`.
        One batched attention call per layer; the caller runs it under inference mode."""
        n = input_ids.shape[0]
        hq, hkv, d = self.num_heads, self.num_kv_heads, self.head_dim

        def attend(layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            kk, vv = cache.gather(layer, block_rows, n)
            out = F.scaled_dot_product_attention(q.view(n, hkv, hq // hkv, d), kk, vv, mask)
            return out.reshape(n, hq * d)

        return self._logits(self._layers(input_ids, positions, write_rows, cache, attend))

    def prefill_fixed(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        write_rows: torch.Tensor,
        last: torch.Tensor,
        block_rows: torch.Tensor,
        mask: torch.Tensor,
        cache: KVCache,
    ) -> torch.Tensor:
        """Logits `[R, vocab]` of R requests prefilling up to L new tokens each (their slots
        flattened row by row: `input_ids`, `positions`, `write_rows` of R * L tokens; `last`
        the index of each row's last real slot), every tensor of a fixed shape (so the call can
        be captured in a CUDA graph): each slot's K/V written to its row's blocks, then one
        batched attention call per layer over the W gathered blocks of each row
        (`block_rows`), `mask` bool `[R, L, W * block_size]` (a slot attends up to its own
        position). The G query heads sharing a KV head are folded into the query length, as
        in `_attention`. The caller runs it under inference mode."""
        rows, tokens = mask.shape[0], mask.shape[1]
        folded = _fold_mask(mask.unsqueeze(1), self.num_heads // self.num_kv_heads)

        def attend(layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            kk, vv = cache.gather(layer, block_rows, rows)
            qq = q.view(rows, tokens, self.num_heads, self.head_dim).transpose(1, 2)
            out = _folded_attention(qq, kk, vv, folded)
            return out.transpose(1, 2).reshape(rows * tokens, self.num_heads * self.head_dim)

        x = self._layers(input_ids, positions, write_rows, cache, attend)
        return self._logits(x[last])

    def _layers(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        write_rows: torch.Tensor,
        cache: KVCache,
        attend: Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
    ) -> torch.Tensor:
        """The decoder layers over every token of the step (K/V written to the cache at
        `write_rows` before `attend` reads them); hidden states before the final norm."""
        n = input_ids.shape[0]
        x = self.model.model.embed_tokens.weight[input_ids]
        cos = self.cos[positions].unsqueeze(1)
        sin = self.sin[positions].unsqueeze(1)
        for i, w in enumerate(self.layers):
            h = _rms_norm(x, w.input_norm, self.eps)
            q = F.linear(h, w.q.weight, w.q.bias).view(n, self.num_heads, self.head_dim)
            k = F.linear(h, w.k.weight, w.k.bias).view(n, self.num_kv_heads, self.head_dim)
            v = F.linear(h, w.v.weight, w.v.bias).view(n, self.num_kv_heads, self.head_dim)
            if w.q_norm is not None and w.k_norm is not None:
                q = _rms_norm(q, w.q_norm, self.eps)
                k = _rms_norm(k, w.k_norm, self.eps)
            q = _rotate(q, cos, sin)
            k = _rotate(k, cos, sin)
            cache.write(i, write_rows, k, v)
            x = x + F.linear(attend(i, q, k, v), w.o.weight, w.o.bias)
            h = _rms_norm(x, w.post_norm, self.eps)
            x = x + F.linear(F.silu(F.linear(h, w.gate)) * F.linear(h, w.up), w.down)
        return x

    def _logits(self, x: torch.Tensor) -> torch.Tensor:
        x = _rms_norm(x, self.model.model.norm.weight, self.eps)
        return F.linear(x, self.model.lm_head.weight)

    def _attention(
        self,
        layer: int,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        batch: StepBatch,
        masks: list[torch.Tensor | None],
        cache: KVCache,
    ) -> torch.Tensor:
        """The step's attention: one call per decode bucket and per prefill group, none with
        `enable_gqa` (on CUDA the memory-efficient kernel refuses grouped heads and flash any
        mask, which left the math kernel, several launches and K/V copied for each query
        head): decodes and continuations fold the G query heads sharing a KV head into the
        query length (continuations with `masks`, their groups' masks repeated G times), a
        fresh prompt's own K/V, which it computed this step, is repeated for its query heads."""
        hq, hkv, d = self.num_heads, self.num_kv_heads, self.head_dim
        heads = hq // hkv
        outs = []
        for b in batch.decode:
            # one query per sequence: the heads sharing a KV head act as that head's queries
            n = b.end - b.start
            kk, vv = cache.gather(layer, b.rows, n)
            qq = q[b.start : b.end].view(n, hkv, hq // hkv, d)
            out = F.scaled_dot_product_attention(qq, kk, vv, attn_mask=b.mask)
            outs.append(out.reshape(n, hq * d))
        if not batch.prefill:
            return outs[0] if len(outs) == 1 else torch.cat(outs)
        attended = q.new_empty(q.shape[0], hq * d)
        if outs:
            attended[: batch.decode[-1].end] = outs[0] if len(outs) == 1 else torch.cat(outs)
        for g, mask in zip(batch.prefill, masks, strict=True):
            s, width = g.size
            qq = _slots(q, g)
            if g.rows is None:  # fresh prompts: causal over their own (right-padded) tokens
                kk, vv = _slots(k, g), _slots(v, g)
                if heads > 1:
                    kk, vv = kk.repeat_interleave(heads, 1), vv.repeat_interleave(heads, 1)
                out = F.scaled_dot_product_attention(qq, kk, vv, is_causal=True)
            else:
                kk, vv = cache.gather(layer, g.rows, s)
                out = _folded_attention(qq, kk, vv, mask)
            flat = out.transpose(1, 2).reshape(s * width, hq * d)
            if g.span is not None:
                attended[g.span[0] : g.span[1]] = flat
            else:
                assert g.targets is not None and g.real is not None
                attended.index_copy_(0, g.targets, flat.index_select(0, g.real))
        return attended


def _fold_mask(mask: torch.Tensor, heads: int) -> torch.Tensor:
    """A bool mask `[S, 1, L, W]` for `_folded_attention` with `heads` query heads a KV head:
    `[S, 1, heads * L, W]`, row j * L + i the mask of slot i."""
    return mask.repeat(1, 1, heads, 1)


def _folded_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """Attention of `q` `[S, Hq, L, D]` over `k`/`v` `[S, Hkv, W, D]`, the Hq / Hkv query heads
    sharing a KV head folded into the query length (row j * L + i of KV head h: query head
    h * Hq / Hkv + j, slot i; `mask` from `_fold_mask`), so no call asks for grouped heads
    (`enable_gqa`), which CUDA's memory-efficient kernel refuses: `[S, Hq, L, D]`. A reshape,
    not a view: CUDA's kernels return the output heads-strided (`[S, W', Hkv, D]` in memory),
    which no view regroups by query head."""
    s, hq, length, d = q.shape
    out = F.scaled_dot_product_attention(
        q.reshape(s, k.shape[1], hq // k.shape[1] * length, d), k, v, attn_mask=mask
    )
    return out.reshape(s, hq, length, d)


def _slots(x: torch.Tensor, group: PrefillGroup) -> torch.Tensor:
    """`x`'s rows `[N, heads, dim]` at a prefill group's slots, `[S, heads, L, dim]`."""
    if group.span is not None:
        return x[group.span[0] : group.span[1]].transpose(0, 1).unsqueeze(0)
    assert group.slots is not None
    return x[group.slots].transpose(1, 2)


def _layer_weights(layer: nn.Module) -> LayerWeights:
    attn, mlp = layer.self_attn, layer.mlp
    q_norm = getattr(attn, "q_norm", None)
    k_norm = getattr(attn, "k_norm", None)
    return LayerWeights(
        input_norm=layer.input_layernorm.weight,
        q=attn.q_proj,
        k=attn.k_proj,
        v=attn.v_proj,
        o=attn.o_proj,
        q_norm=None if q_norm is None else q_norm.weight,
        k_norm=None if k_norm is None else k_norm.weight,
        post_norm=layer.post_attention_layernorm.weight,
        gate=mlp.gate_proj.weight,
        up=mlp.up_proj.weight,
        down=mlp.down_proj.weight,
    )


def _rope_tables(
    rotary: nn.Module, max_positions: int, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin `[max_positions, head_dim]`, computed in float32 like the HF module does, on
    the module's device."""
    inv_freq = rotary.inv_freq.float()
    scaling = float(getattr(rotary, "attention_scaling", 1.0))
    positions = torch.arange(max_positions, dtype=torch.float32, device=inv_freq.device)
    freqs = positions.view(-1, 1) * inv_freq.view(1, -1)
    emb = torch.cat([freqs, freqs], dim=-1)
    return (emb.cos() * scaling).to(dtype), (emb.sin() * scaling).to(dtype)


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm as the HF modules compute it: normalise in float32, scale in the input dtype."""
    if x.dtype == torch.float32:
        return F.rms_norm(x, (x.shape[-1],), weight, eps)
    return weight * F.rms_norm(x.float(), (x.shape[-1],), None, eps).to(x.dtype)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin
