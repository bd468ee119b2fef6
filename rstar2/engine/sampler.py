"""Next-token sampling for a batch of requests with per-request parameters and RNGs.

Greedy rows (temperature 0) take the argmax. Other rows divide by their temperature, keep the
nucleus (top_p) and draw by the Gumbel-max trick: argmax(log p + g) with g = -log(-log u) and
u uniform is an exact sample from p. Each row's uniforms come from its own seeded
`torch.Generator` (one small call per row; the rest is batched), so a request's draws never
depend on which other requests share the batch. Rows without a seed share the engine's
generator. The logprob returned for every row is log p(token) under the
unmodified model distribution (temperature 1, no top_p): the behaviour policy RL needs.
Everything is computed on the logits' device (the generators must live there too); tokens and
logprobs come back as Python lists.

What it does not do: repetition penalties, top_k, min_p or logit bias.
"""

from __future__ import annotations

import torch

from rstar2.engine.request import Request


def top_p_filter(probs: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Zero the tail of each row outside the smallest set whose mass reaches `top_p[row]`."""
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs
    limit = torch.where(top_p >= 1.0, torch.inf, top_p)  # rounding must not cut a top_p=1 row
    drop_sorted = mass_before >= limit.view(-1, 1)
    drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
    return probs.masked_fill(drop, 0.0)


def sample(
    logits: torch.Tensor, requests: list[Request], shared: torch.Generator
) -> tuple[list[int], list[float]]:
    """One token and its temperature-1 logprob per row of `logits` ([len(requests), vocab])."""
    if logits.shape[0] != len(requests):
        raise ValueError(f"{logits.shape[0]} logit rows for {len(requests)} requests")
    logprobs = torch.log_softmax(logits, dim=-1)
    tokens = logits.argmax(dim=-1)
    rows = [i for i, r in enumerate(requests) if r.params.temperature > 0.0]
    if rows:
        temps = torch.tensor(
            [requests[i].params.temperature for i in rows], dtype=logits.dtype, device=logits.device
        )
        scaled = torch.log_softmax(logits[rows] / temps.view(-1, 1), dim=-1)
        top_p = [requests[i].params.top_p for i in rows]
        if min(top_p) < 1.0:
            limit = torch.tensor(top_p, dtype=scaled.dtype, device=scaled.device)
            kept = top_p_filter(scaled.exp(), limit)
            scaled = scaled.masked_fill(kept == 0.0, -torch.inf)
        noise = torch.empty_like(scaled)
        for j, i in enumerate(rows):
            noise[j].uniform_(generator=requests[i].generator or shared)
        gumbel = -torch.log(-torch.log(noise))
        tokens[rows] = (scaled + gumbel).argmax(dim=-1)
    chosen = logprobs.gather(1, tokens.view(-1, 1)).view(-1)
    return tokens.tolist(), chosen.tolist()


# Fixed-shape sampling (`decode_graphs.py`): every input a tensor, no host synchronisation, so
# the call can sit inside a CUDA graph. A row's draw is one uniform from a counter-based hash of
# (its request's seed, the index of the token being drawn), turned into a token by inverse
# transform sampling over the row's (nucleus-filtered) distribution: the same request draws the
# same token at the same index whatever shares the batch, after a preemption too, on any
# device (floating-point sums aside). The draws differ from `sample`'s generator-based ones.

M32 = 0xFFFFFFFF
"""The mask of the hash's 32-bit arithmetic; a 64-bit seed reaches `sample_fixed` as its two
32-bit halves (`seed & M32`, `(seed >> 32) & M32`)."""


def _mul32(x: torch.Tensor, c: int) -> torch.Tensor:
    """`x * c mod 2**32` for `x` in [0, 2**32) held in int64, without int64 overflow."""
    lo, hi = x & 0xFFFF, x >> 16
    return (lo * c + (((hi * c) & 0xFFFF) << 16)) & M32


def mix32(x: torch.Tensor) -> torch.Tensor:
    """A bijective 32-bit integer hash (Wellons' lowbias32) of int64 values in [0, 2**32)."""
    x = x ^ (x >> 16)
    x = _mul32(x, 0x7FEB352D)
    x = x ^ (x >> 15)
    x = _mul32(x, 0x846CA68B)
    return x ^ (x >> 16)


def counter_uniform(
    seed_lo: torch.Tensor, seed_hi: torch.Tensor, counter: torch.Tensor
) -> torch.Tensor:
    """One float64 uniform in (0, 1) per row from int64 `seed_lo`, `seed_hi` (the seed's two
    32-bit halves) and `counter` (in [0, 2**32))."""
    h = mix32(mix32(mix32(seed_lo) ^ seed_hi) ^ counter)
    return (h.double() + 0.5) / 2.0**32


def sample_fixed(
    logits: torch.Tensor,
    temperature: torch.Tensor,
    top_p: torch.Tensor,
    seed_lo: torch.Tensor,
    seed_hi: torch.Tensor,
    counter: torch.Tensor,
    nucleus: bool,
) -> torch.Tensor:
    """float64 `[2, B]`: each row's token and its temperature-1 log-prob under the model.

    Rows with temperature 0 take the argmax; the others sample from softmax(logits / T),
    those with `top_p` < 1 restricted to the nucleus of that mass when `nucleus` is set (a
    sort over the vocabulary, skipped when no row needs it). A row's token depends on its own
    inputs only, never on whether other rows of the batch keep a nucleus."""
    x = logits.to(torch.promote_types(logits.dtype, torch.float32))
    logprobs = torch.log_softmax(x, dim=-1)
    greedy = x.argmax(dim=-1)
    hot = temperature > 0.0
    probs = torch.softmax(x / torch.where(hot, temperature, 1.0).view(-1, 1), dim=-1)
    u = counter_uniform(seed_lo, seed_hi, counter).view(-1, 1)
    last = x.shape[-1] - 1
    cdf = probs.cumsum(dim=-1)
    drawn = torch.searchsorted(cdf, (u * cdf[:, -1:].double()).to(cdf.dtype)).clamp_(max=last)
    drawn = drawn.view(-1)
    if nucleus:
        # only the rows that keep a nucleus draw from the sorted order: a top_p = 1 row draws
        # the same token whether or not its batch has such rows
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs
        cut = (sorted_probs * (mass_before < top_p.view(-1, 1))).cumsum(dim=-1)
        index = torch.searchsorted(cut, (u * cut[:, -1:].double()).to(cut.dtype))
        in_nucleus = order.gather(1, index.clamp_(max=last)).view(-1)
        drawn = torch.where(top_p < 1.0, in_nucleus, drawn)
    tokens = torch.where(hot, drawn, greedy)
    chosen = logprobs.gather(1, tokens.view(-1, 1)).view(-1)
    return torch.stack([tokens.double(), chosen.double()])
