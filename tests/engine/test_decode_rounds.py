"""Rounds of several decode steps on the fixed path (`engine.decode_steps`): the same outputs
as one step at a time, the scheduler's reservation and bookkeeping, the config's checks."""

from __future__ import annotations

import random

import pytest
import torch
from transformers import Qwen2ForCausalLM

from rstar2.config import ConfigError
from rstar2.engine.config import EngineConfig
from rstar2.engine.core import EngineCore
from rstar2.engine.decode_graphs import FixedDecoder
from rstar2.engine.protocol import GenerationOutput, SamplingParams
from rstar2.engine.request import Request
from rstar2.engine.scheduler import Scheduler
from tests.engine.factories import random_prompts

DECODE_ROUND = FixedDecoder.decode_round


def mixed_params(n: int) -> list[SamplingParams]:
    """Greedy and sampled rows, with and without a nucleus, stop tokens, lengths 1..37."""
    return [
        SamplingParams(
            max_tokens=1 + (7 * i) % 37,
            temperature=(0.0, 1.0, 0.8)[i % 3],
            top_p=(1.0, 0.9)[i % 2],
            seed=i,
            stop_token_ids=(5, 17),
        )
        for i in range(n)
    ]


def run(
    model: Qwen2ForCausalLM, steps: int, budget: int, monkeypatch: pytest.MonkeyPatch
) -> tuple[list[GenerationOutput], EngineCore, list[int]]:
    """Outputs of 40 mixed requests at `steps` decode steps a round; the rounds' lengths."""
    rounds: list[int] = []

    def counted(self: FixedDecoder, rows: list, seeds: list, counts: list[int]) -> torch.Tensor:
        rounds.append(max(counts))
        return DECODE_ROUND(self, rows, seeds, counts)

    monkeypatch.setattr(FixedDecoder, "decode_round", counted)
    cfg = EngineConfig(
        kv_budget_tokens=budget, decode="fixed", decode_steps=steps, max_model_len=48
    )
    core = EngineCore(model, cfg)
    outs = core.generate(random_prompts(40, seed=3, high=20), mixed_params(40))
    return outs, core, rounds


@pytest.mark.parametrize("budget", [4096, 160], ids=["roomy", "preempting"])
@pytest.mark.parametrize("steps", [2, 8])
def test_rounds_give_the_outputs_of_single_steps(
    qwen2: Qwen2ForCausalLM, steps: int, budget: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tokens, finish reasons and log-probs as one step at a time, with stop tokens, max_tokens
    ending requests inside a round, max_model_len, and (160 tokens for 40 requests)
    preemptions; every block is back in the pool at the end."""
    single, _, no_rounds = run(qwen2, 1, budget, monkeypatch)
    outs, core, rounds = run(qwen2, steps, budget, monkeypatch)
    assert no_rounds == [] and max(rounds) == steps
    assert [(o.token_ids, o.finish_reason) for o in outs] == [
        (o.token_ids, o.finish_reason) for o in single
    ]
    for a, b in zip(outs, single, strict=True):
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-6)
    stats = core.stats()
    assert stats.kv_free_tokens == stats.kv_capacity_tokens
    if budget == 160:
        assert stats.preemptions > 0


def test_a_continuation_reuses_the_cache_of_a_request_that_ended_inside_a_round(
    qwen2: Qwen2ForCausalLM,
) -> None:
    """A request that reaches max_tokens inside a round (3 steps of a round of 8) parks its
    blocks; its later steps in the round wrote nothing there, so a continuation that takes
    them computes what a fresh prefill does."""
    prompt = random_prompts(1, seed=4, low=12, high=13)[0]
    greedy = SamplingParams(4, 0.0)
    core = EngineCore(qwen2, EngineConfig(decode="fixed", decode_steps=8))
    first, _ = core.generate([prompt, [7, 8, 9]], [greedy, SamplingParams(20, 0.0)])
    follow = prompt + first.token_ids + [3, 4, 5]
    (again,) = core.generate([follow], SamplingParams(12, 0.0))
    assert core.scheduler.prefix_cache.hits == 1
    fresh = EngineCore(qwen2, EngineConfig(decode="fixed", prefix_cache_entries=0))
    assert again.token_ids == fresh.generate([follow], SamplingParams(12, 0.0))[0].token_ids


def staggered(
    model: Qwen2ForCausalLM, steps: int
) -> tuple[list[GenerationOutput], EngineCore, list[int]]:
    """8 mixed requests arriving one by one while others decode (as new turns do in
    training), each as soon as the one before was admitted; the outputs, the core, and how
    many `step()` calls each request waited before it was admitted."""
    prompts, params = random_prompts(8, seed=11), mixed_params(8)
    core = EngineCore(model, EngineConfig(decode="fixed", decode_steps=steps))
    done: dict[str, GenerationOutput] = {}
    waited = []
    for i in range(8):
        core.add_request(str(i), prompts[i], params[i])
        calls = 0
        while any(r.request_id == str(i) for r in core.scheduler.waiting):
            done.update((o.request_id, o) for o in core.step())
            calls += 1
        waited.append(calls)
    while core.has_unfinished():
        done.update((o.request_id, o) for o in core.step())
    return [done[str(i)] for i in range(8)], core, waited


def test_newcomers_wait_at_most_one_round_and_change_no_output(qwen2: Qwen2ForCausalLM) -> None:
    """With requests arriving between steps, a step that admitted newcomers is followed by a
    round that admits nobody (otherwise rounds would never run while new turns keep coming):
    rounds run, a newcomer is admitted by the second call after its arrival, and every output
    is the single steps' one."""
    single, _, waited_single = staggered(qwen2, 1)
    outs, core, waited = staggered(qwen2, 4)
    assert [o.token_ids for o in outs] == [o.token_ids for o in single]
    for a, b in zip(outs, single, strict=True):
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-6)  # other batches, other sums
    assert waited_single == [1] * 8
    assert core.clock.round_steps > 0 and max(waited) == 2 and min(waited) == 1


def req(rid: str, prompt: int, max_tokens: int) -> Request:
    return Request(
        rid, list(range(prompt)), SamplingParams(max_tokens, 0.0, stop_token_ids=(9,)), 0
    )


def decoding(sched: Scheduler, *requests: Request) -> list[Request]:
    """`requests` admitted, prefilled (token 1 each) and scheduled for their first decode."""
    for r in requests:
        sched.add(r)
    first = sched.schedule()
    sched.update(first.scheduled, [1] * len(requests), [0.0] * len(requests))
    return [r for r, _ in sched.schedule().scheduled]


def test_reserve_gives_blocks_for_each_rows_steps_without_preempting() -> None:
    sched = Scheduler(20, 4, 8, 1000, max_model_len=40, prefix_entries=4)
    a, b, c = req("a", 3, 100), req("b", 2, 3), req("c", 36, 100)
    rows = decoding(sched, a, b, c)
    # after the prefill each has drawn one token; b may draw 2 more (max_tokens 3), c 3 more
    # (37 of max_model_len 40 tokens)
    counts = sched.reserve(rows, 6)
    assert counts == [6, 2, 3]
    assert [len(r.blocks) for r in rows] == [3, 1, 10]  # positions 3..8, 2..3, 36..38
    assert sched.pool.num_free == 6
    before = sched.pool.num_free, [list(r.blocks) for r in rows]
    assert sched.reserve(rows, 40) is None  # a would need 7 more blocks: nothing changes
    assert (sched.pool.num_free, [r.blocks for r in rows]) == before
    assert sched.preemptions == 0


def test_update_round_keeps_what_single_steps_would_and_frees_the_rest() -> None:
    """A round's tokens past a request's stop token are dropped, its blocks reserved past the
    finish go back to the pool, and its computed ones are parked as step by step."""
    sched = Scheduler(10, 4, 8, 1000, max_model_len=100, prefix_entries=4)
    a, b = req("a", 3, 100), req("b", 2, 100)
    rows = decoding(sched, a, b)
    counts = sched.reserve(rows, 8)
    assert counts == [8, 8] and sched.pool.num_free == 10 - 3 - 3
    tokens = [[11, 21], [12, 9], [13, 22], [14, 23], [15, 24], [16, 25], [17, 26], [18, 27]]
    logprobs = [[-float(j), -float(j)] for j in range(8)]
    finished = sched.update_round(rows, counts, tokens, logprobs)
    assert finished == [b] and b.finish_reason == "stop"
    assert b.output_ids == [1, 21, 9] and b.logprobs == [0.0, -0.0, -1.0]
    assert a.output_ids == [1, 11, 12, 13, 14, 15, 16, 17, 18] and a.num_computed == 11
    # b computed 4 tokens (its prompt, its first two draws): one block parked, two freed
    (entry,) = sched.prefix_cache._entries.values()
    assert entry.tokens == [0, 1, 1, 21] and len(entry.blocks) == 1
    assert sched.pool.num_free == 10 - 3 - 1
    assert sched.running == [a] and sched.generated_tokens == 2 + 8 + 2


def _state(sched: Scheduler, rows: list[Request]) -> list[object]:
    """Everything `update_round` may change, comparable across two schedulers (the parked
    entries in any order: a round parks its finished rows in row order, steps in step order)."""
    entries = sorted((e.tokens, len(e.blocks)) for e in sched.prefix_cache._entries.values())
    per_row = [
        (r.output_ids, r.logprobs, r.num_computed, r.finish_reason, len(r.blocks)) for r in rows
    ]
    running = [r.request_id for r in sched.running]
    return [per_row, running, entries, sched.pool.num_free, sched.generated_tokens]


def test_update_round_equals_update_step_by_step() -> None:
    """Random rounds (stop tokens anywhere, several stop ids, rows at their max_tokens or
    max_model_len): recording a round at once leaves the scheduler exactly as recording it
    one step at a time with `update` would."""
    rng = random.Random(5)
    for _ in range(200):
        max_model_len, steps = rng.randint(6, 30), rng.randint(1, 8)
        specs = [
            (rng.randint(1, max_model_len - 2), rng.randint(2, 12))
            for _ in range(rng.randint(1, 6))
        ]
        twins = []
        for _ in range(2):
            sched = Scheduler(64, 4, 8, 1000, max_model_len=max_model_len, prefix_entries=8)
            rows = [
                Request(f"r{i}", list(range(n)), SamplingParams(m, 0.0, stop_token_ids=(9, 7)), i)
                for i, (n, m) in enumerate(specs)
            ]
            twins.append((sched, decoding(sched, *rows)))
        (a, rows_a), (b, rows_b) = twins
        counts = a.reserve(rows_a, steps)
        assert counts is not None and b.reserve(rows_b, steps) == counts
        tokens = [[rng.choice((7, 9, 3, 4, 5)) for _ in rows_a] for _ in range(max(counts))]
        logprobs = [[-rng.random() for _ in rows_a] for _ in range(max(counts))]
        finished_a = a.update_round(rows_a, counts, tokens, logprobs)
        finished_b = []
        for j in range(max(counts)):
            live = [(i, r) for i, r in enumerate(rows_b) if j < counts[i] and not r.finish_reason]
            finished_b += b.update(
                [(r, 1) for _, r in live],
                [tokens[j][i] for i, _ in live],
                [logprobs[j][i] for i, _ in live],
            )
        assert sorted(r.request_id for r in finished_a) == sorted(r.request_id for r in finished_b)
        assert _state(a, rows_a) == _state(b, rows_b)


def test_decode_steps_is_checked() -> None:
    with pytest.raises(ConfigError, match="decode_steps"):
        EngineConfig(decode_steps=0).validate()
    with pytest.raises(ConfigError, match="decode_steps"):
        EngineConfig(decode="dynamic", decode_steps=4).validate()
    cpu = torch.device("cpu")
    assert EngineConfig(decode_steps=4).round_steps(cpu) == 1  # auto: dynamic on the CPU
    assert EngineConfig(decode="fixed", decode_steps=4).round_steps(cpu) == 4
