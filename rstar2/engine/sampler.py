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
