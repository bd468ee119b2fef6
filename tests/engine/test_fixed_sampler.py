"""Fixed-shape sampling (`sampler.sample_fixed`) on hand-made logits: the counter hash, greedy
rows, draws that follow the distribution, nucleus, log-probs, no dependence on the batch."""

from __future__ import annotations

import random

import pytest
import torch

from rstar2.engine.sampler import counter_uniform, mix32, sample_fixed

M32 = 0xFFFFFFFF


def lowbias32(x: int) -> int:
    """Wellons' lowbias32 in plain Python integers (the reference `mix32` must equal)."""
    x ^= x >> 16
    x = (x * 0x7FEB352D) & M32
    x ^= x >> 15
    x = (x * 0x846CA68B) & M32
    return x ^ (x >> 16)


def draw(logits: list[float], n: int, temperature: float = 1.0, top_p: float = 1.0, seed: int = 7):
    """`n` draws of one row, counters 0..n-1, in one batch of n rows."""
    x = torch.tensor([logits] * n, dtype=torch.float32)
    out = sample_fixed(
        x,
        torch.full((n,), temperature),
        torch.full((n,), top_p),
        torch.full((n,), seed & M32, dtype=torch.int64),
        torch.full((n,), seed >> 32, dtype=torch.int64),
        torch.arange(n, dtype=torch.int64),
        nucleus=top_p < 1.0,
    )
    return out[0].long(), out[1]


def test_mix32_is_lowbias32_without_int64_overflow() -> None:
    rng = random.Random(0)
    values = [0, 1, M32, 0x80000000, *[rng.getrandbits(32) for _ in range(2000)]]
    got = mix32(torch.tensor(values, dtype=torch.int64)).tolist()
    assert got == [lowbias32(v) for v in values]


def test_counter_uniforms_are_in_the_open_interval_and_spread() -> None:
    n = 50_000
    u = counter_uniform(
        torch.full((n,), 3, dtype=torch.int64),
        torch.zeros(n, dtype=torch.int64),
        torch.arange(n, dtype=torch.int64),
    )
    assert u.dtype == torch.float64 and 0.0 < u.min() and u.max() < 1.0
    counts = torch.histc(u.float(), bins=10, min=0.0, max=1.0)
    assert ((counts - n / 10).abs() < 0.05 * n / 10).all()  # ~5 standard deviations


def test_draws_follow_the_distribution_at_each_temperature() -> None:
    logits = [0.0, 1.0, 2.0, -1.0, 0.5]
    n = 40_000
    for temperature in (1.0, 0.5):
        tokens, _ = draw(logits, n, temperature)
        freq = torch.bincount(tokens, minlength=5).double() / n
        want = torch.softmax(torch.tensor(logits, dtype=torch.float64) / temperature, dim=0)
        # binomial standard deviation at most 0.0025: 0.012 is about 5 of them
        assert (freq - want).abs().max() < 0.012, (temperature, freq, want)


def test_nucleus_draws_only_inside_the_smallest_set_reaching_top_p() -> None:
    probs = torch.tensor([0.1, 0.5, 0.3, 0.04, 0.06], dtype=torch.float64)
    tokens, logprobs = draw(probs.log().tolist(), 20_000, top_p=0.75)  # 0.8 is a rounding edge
    freq = torch.bincount(tokens, minlength=5).double() / 20_000
    assert set(tokens.tolist()) == {1, 2}
    assert freq[1] == pytest.approx(0.5 / 0.8, abs=0.02)
    # the log-prob is the model's, not the renormalised nucleus'
    assert torch.allclose(logprobs, probs.log()[tokens], atol=1e-6)


def test_greedy_rows_take_the_argmax_beside_sampled_rows() -> None:
    x = torch.tensor([[0.0, 3.0, 1.0], [0.0, 3.0, 1.0], [2.0, 0.0, 1.0]])
    out = sample_fixed(
        x,
        torch.tensor([0.0, 1.0, 0.0]),
        torch.ones(3),
        torch.tensor([1, 1, 1]),
        torch.zeros(3, dtype=torch.int64),
        torch.tensor([0, 0, 5]),
        nucleus=False,
    )
    assert out.dtype == torch.float64 and out.shape == (2, 3)
    assert out[0, 0] == 1 and out[0, 2] == 0
    assert torch.allclose(out[1].float(), torch.log_softmax(x, -1)[[0, 1, 2], out[0].long()])


def test_a_rows_draw_depends_on_its_seed_and_counter_only() -> None:
    logits = torch.randn(6, 50, generator=torch.Generator().manual_seed(0))
    seeds = torch.tensor([11, 12, 13, 14, 15, 16])
    counters = torch.tensor([0, 3, 9, 2, 2, 7])

    def run(rows: list[int]) -> list[int]:
        out = sample_fixed(
            logits[rows],
            torch.ones(len(rows)),
            torch.ones(len(rows)),
            seeds[rows],
            torch.zeros(len(rows), dtype=torch.int64),
            counters[rows],
            nucleus=False,
        )
        return out[0].long().tolist()

    alone = [run([i])[0] for i in range(6)]
    assert run([5, 4, 3, 2, 1, 0]) == alone[::-1]
    assert run([0, 2, 4]) == [alone[0], alone[2], alone[4]]
    moved = sample_fixed(
        logits[:1],
        torch.ones(1),
        torch.ones(1),
        seeds[:1],
        torch.zeros(1, dtype=torch.int64),
        torch.tensor([1]),
        nucleus=False,
    )
    draws = {int(moved[0, 0])} | {
        int(
            sample_fixed(
                logits[:1],
                torch.ones(1),
                torch.ones(1),
                seeds[:1],
                torch.zeros(1, dtype=torch.int64),
                torch.tensor([c]),
                nucleus=False,
            )[0, 0]
        )
        for c in range(2, 12)
    }
    assert len(draws) > 3  # another counter draws anew


def test_a_full_distribution_rows_draw_does_not_depend_on_a_nucleus_beside_it() -> None:
    """A top_p = 1 row draws the same token whether or not its batch holds a row that keeps a
    nucleus (which sends the batch through the sort): its draw is its own, with or without
    the sort (the draws of 64 counters, where an order-dependent draw would differ)."""
    logits = torch.randn(2, 50, generator=torch.Generator().manual_seed(1))
    n = 64

    def run(top_p: float, nucleus: bool) -> list[int]:
        out = sample_fixed(
            torch.cat([logits[:1].expand(n, -1), logits[1:]]),
            torch.ones(n + 1),
            torch.tensor([1.0] * n + [top_p]),
            torch.full((n + 1,), 5, dtype=torch.int64),
            torch.zeros(n + 1, dtype=torch.int64),
            torch.arange(n + 1, dtype=torch.int64),
            nucleus=nucleus,
        )
        return out[0].long().tolist()[:n]

    assert run(0.5, nucleus=True) == run(1.0, nucleus=False)
