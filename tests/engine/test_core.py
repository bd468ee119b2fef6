"""EngineCore end to end on tiny random decoders: exactness, batching, preemption, sampling."""

from __future__ import annotations

import time

import pytest
import torch
from transformers import Qwen2ForCausalLM

from rstar2.engine.config import EngineConfig
from rstar2.engine.core import EngineCore
from rstar2.engine.protocol import GenerationOutput, SamplingParams
from tests.engine.conftest import ROUND_PATHS
from tests.engine.factories import VOCAB, random_prompts, tiny_llama, tiny_qwen2, tiny_qwen3

GREEDY = SamplingParams(max_tokens=12, temperature=0.0)
pytestmark = pytest.mark.usefixtures("decode_path")


def hf_greedy(model: torch.nn.Module, prompt: list[int], n: int) -> list[int]:
    ids = torch.tensor([prompt])
    out = model.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=0)
    return out[0, len(prompt) :].tolist()


def alone(model: torch.nn.Module, prompt: list[int], params: SamplingParams) -> GenerationOutput:
    return EngineCore(model, EngineConfig(kv_budget_tokens=1024)).generate([prompt], params)[0]


@pytest.mark.parametrize(
    "factory", [tiny_qwen2, tiny_llama, tiny_qwen3], ids=["qwen2", "llama", "qwen3"]
)
def test_greedy_matches_hf_generate(factory) -> None:
    model = factory()
    prompts = random_prompts(3, seed=1)
    outs = EngineCore(model).generate(prompts, GREEDY)
    for prompt, out in zip(prompts, outs, strict=True):
        assert out.token_ids == hf_greedy(model, prompt, GREEDY.max_tokens)
        assert out.finish_reason == "length"


def test_float32_greedy_matches_hf_generate() -> None:
    model = tiny_qwen2(seed=3, dtype=torch.float32)
    prompts = random_prompts(3, seed=2)
    outs = EngineCore(model).generate(prompts, GREEDY)
    assert [o.token_ids for o in outs] == [hf_greedy(model, p, 12) for p in prompts]


def test_logprobs_are_the_models_at_temperature_one(qwen2: Qwen2ForCausalLM) -> None:
    prompt = random_prompts(1, seed=4)[0]
    out = EngineCore(qwen2).generate([prompt], SamplingParams(10, temperature=0.7, seed=1))[0]
    with torch.no_grad():
        logits = qwen2(torch.tensor([prompt + out.token_ids])).logits[0]
    expected = torch.log_softmax(logits[len(prompt) - 1 : -1], dim=-1)
    expected = expected.gather(1, torch.tensor(out.token_ids).view(-1, 1)).view(-1)
    assert torch.allclose(torch.tensor(out.logprobs, dtype=torch.float64), expected, atol=1e-9)


def test_continuous_batching_matches_sequential(qwen2: Qwen2ForCausalLM) -> None:
    prompts = random_prompts(10, seed=5)
    params = [SamplingParams(max_tokens=3 + 4 * (i % 4), temperature=0.0) for i in range(10)]
    sequential = [alone(qwen2, p, sp).token_ids for p, sp in zip(prompts, params, strict=True)]
    core = EngineCore(qwen2, EngineConfig(max_num_seqs=4))
    done: dict[str, list[int]] = {}
    # requests arrive while others decode, and leave at different steps
    for i in range(10):
        core.add_request(str(i), prompts[i], params[i])
        if i % 3 == 2:
            for out in core.step():
                done[out.request_id] = out.token_ids
    while core.has_unfinished():
        for out in core.step():
            done[out.request_id] = out.token_ids
    assert [done[str(i)] for i in range(10)] == sequential


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_preemption_and_recompute_give_the_same_output(
    qwen2: Qwen2ForCausalLM, temperature: float
) -> None:
    prompts = random_prompts(6, seed=6, low=10, high=20)
    params = [SamplingParams(30, temperature=temperature, seed=i) for i in range(6)]
    roomy = EngineCore(qwen2, EngineConfig(kv_budget_tokens=4096)).generate(prompts, params)
    tight = EngineCore(qwen2, EngineConfig(kv_budget_tokens=128))  # 8 blocks for 6 x ~45 tokens
    outs = tight.generate(prompts, params)
    assert [o.token_ids for o in outs] == [o.token_ids for o in roomy]
    for a, b in zip(outs, roomy, strict=True):
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-9)
    stats = tight.stats()
    assert stats.preemptions > 0 and stats.recomputed_tokens > 0
    assert stats.kv_free_tokens == stats.kv_capacity_tokens == 128


def test_seeded_sampling_does_not_depend_on_the_batch(qwen2: Qwen2ForCausalLM) -> None:
    prompt = random_prompts(1, seed=7)[0]
    params = SamplingParams(20, temperature=1.5, top_p=0.9, seed=42)
    solo = alone(qwen2, prompt, params).token_ids
    others = random_prompts(5, seed=8)
    batch = EngineCore(qwen2).generate(
        others + [prompt], [SamplingParams(20, 1.0, seed=i) for i in range(5)] + [params]
    )
    assert batch[-1].token_ids == solo
    other_seed = alone(qwen2, prompt, SamplingParams(20, 1.5, top_p=0.9, seed=43)).token_ids
    assert other_seed != solo


def test_stop_token_is_included_and_ends_the_request(qwen2: Qwen2ForCausalLM) -> None:
    prompt = random_prompts(1, seed=9)[0]
    ref = alone(qwen2, prompt, GREEDY).token_ids
    stop = ref[4]
    out = alone(qwen2, prompt, SamplingParams(12, 0.0, stop_token_ids=(stop,)))
    assert out.finish_reason == "stop"
    assert out.token_ids == ref[: ref.index(stop) + 1]


def test_abort_returns_partial_output_and_frees_blocks(
    qwen2: Qwen2ForCausalLM, decode_path: str
) -> None:
    core = EngineCore(qwen2, EngineConfig(kv_budget_tokens=512))
    core.add_request("a", [1, 2, 3], SamplingParams(50, 0.0))
    core.add_request("b", [4, 5], SamplingParams(10, 0.0))
    for _ in range(3):
        core.step()
    out = core.abort("a")
    # one token a decode step (a round of several steps is one `step()` call, counted by each)
    assert out is not None and out.finish_reason == "abort"
    assert len(out.token_ids) == core.clock.steps == (7 if decode_path in ROUND_PATHS else 3)
    assert core.abort("a") is None
    finished = []
    while core.has_unfinished():
        finished += core.step()
    assert [o.request_id for o in finished] == ["b"]
    assert core.stats().kv_free_tokens == 512


def test_stats_count_queues_and_tokens(qwen2: Qwen2ForCausalLM) -> None:
    core = EngineCore(qwen2, EngineConfig(kv_budget_tokens=256, max_num_seqs=2))
    for i in range(3):
        core.add_request(str(i), [1] * 20, SamplingParams(4, 0.0))
    assert (core.stats().running, core.stats().waiting) == (0, 3)
    core.step()
    s = core.stats()
    assert (s.running, s.waiting, s.generated_tokens) == (2, 1, 2)
    assert s.kv_free_tokens == 256 - 2 * 32  # 21 tokens each -> 2 blocks each
    while core.has_unfinished():
        core.step()
    s = core.stats()
    assert (s.running, s.waiting, s.generated_tokens, s.preemptions) == (0, 0, 12, 0)


def test_weight_update_changes_the_output() -> None:
    model, other = tiny_qwen2(seed=0), tiny_qwen2(seed=1)
    prompt = random_prompts(1, seed=10)[0]
    core = EngineCore(model)
    before = core.generate([prompt], GREEDY)[0].token_ids
    core.load_state_dict(other.state_dict())
    after = core.generate([prompt], GREEDY)[0].token_ids
    assert after != before
    assert after == alone(other, prompt, GREEDY).token_ids


def test_bad_weights_are_rejected_before_any_copy(qwen2: Qwen2ForCausalLM) -> None:
    core = EngineCore(qwen2)
    good = qwen2.model.norm.weight.detach().clone()
    with pytest.raises(ValueError, match="unknown parameter"):
        core.load_state_dict({"model.norm.weight": good + 1, "nope": good})
    with pytest.raises(ValueError, match="shape"):
        core.load_state_dict({"model.norm.weight": torch.zeros(3)})
    assert torch.equal(qwen2.model.norm.weight, good)


def test_output_stops_at_max_model_len(qwen2: Qwen2ForCausalLM) -> None:
    core = EngineCore(qwen2, EngineConfig(max_model_len=20))
    out = core.generate([[1] * 15], SamplingParams(100, 0.0))[0]
    assert out.finish_reason == "length" and len(out.token_ids) == 5


@pytest.mark.parametrize(
    ("prompt", "error"),
    [
        ([], ValueError),
        ([1, VOCAB], ValueError),
        ([1, -1], ValueError),
        ([1, 2.0], TypeError),
        ([1, True], TypeError),
    ],
)
def test_bad_prompts_are_rejected(qwen2: Qwen2ForCausalLM, prompt: list, error: type) -> None:
    with pytest.raises(error):
        EngineCore(qwen2).add_request("x", prompt, GREEDY)


def test_duplicate_and_overlong_requests_are_rejected(qwen2: Qwen2ForCausalLM) -> None:
    core = EngineCore(qwen2, EngineConfig(max_model_len=16))
    core.add_request("x", [1], GREEDY)
    with pytest.raises(ValueError, match="already"):
        core.add_request("x", [1], GREEDY)
    with pytest.raises(ValueError, match="max_model_len"):
        core.add_request("y", [1] * 16, GREEDY)


@pytest.mark.parametrize(
    "kwargs",
    [{"max_tokens": 0}, {"max_tokens": 1, "temperature": -1.0}, {"max_tokens": 1, "top_p": 0.0}],
)
def test_sampling_params_are_validated(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        SamplingParams(**kwargs)
    with pytest.raises(TypeError):
        SamplingParams(max_tokens=1, stop_token_ids=[1])  # type: ignore[arg-type]


def test_the_step_clock_counts_steps_and_the_wait_for_the_device(
    qwen2: Qwen2ForCausalLM, decode_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every step is counted with its wall time; on the fixed path the wait in the step's one
    transfer is `wait_s` (a transfer made to take 20 ms here, as a GPU still computing would)."""
    core = EngineCore(qwen2, EngineConfig(kv_budget_tokens=1024))
    if core.fixed is not None:
        decode, decode_round = core.fixed.decode, core.fixed.decode_round

        class SlowTransfer:
            def __init__(self, t: torch.Tensor) -> None:
                self.t = t

            def tolist(self) -> list:
                time.sleep(0.02)
                return self.t.tolist()

        monkeypatch.setattr(core.fixed, "decode", lambda *a: SlowTransfer(decode(*a)))
        monkeypatch.setattr(core.fixed, "decode_round", lambda *a: SlowTransfer(decode_round(*a)))
    core.generate([[1, 2, 3], [4, 5]], SamplingParams(max_tokens=5, temperature=0.0))
    clock = core.clock
    assert clock.steps == 5  # one token per request and step, the first from the prefill
    assert clock.seconds > clock.wait_s >= 0.0
    if decode_path == "fixed":
        assert clock.wait_s >= 4 * 0.02  # the 4 decode-only steps
    elif decode_path in ROUND_PATHS:
        assert clock.wait_s >= 2 * 0.02  # a round of 3 decode steps, then one step
    else:
        assert clock.wait_s == 0.0
    # the first step prefilled both prompts; with a third prompt arriving later, its step too
    assert clock.prefill_steps == 1 and 0.0 < clock.prefill_s < clock.seconds
    core.add_request("late", [6, 7, 8, 9], SamplingParams(max_tokens=2, temperature=0.0))
    while core.has_unfinished():
        core.step()
    assert clock.prefill_steps == 2
    stats = core.stats()
    assert (stats.steps, stats.step_s, stats.wait_s) == (7, clock.seconds, clock.wait_s)
    assert (stats.prefill_steps, stats.prefill_s) == (2, clock.prefill_s)
