"""The instant engine: scripted turns the agent loop reads as tool calls and an answer."""

from __future__ import annotations

import pytest

from rstar2.config import ConfigError
from rstar2.engine.config import EngineConfig
from rstar2.engine.protocol import SamplingParams
from rstar2.rollout.agent_loop import run_trajectory, turn_of
from rstar2.rollout.config import RolloutConfig
from rstar2.rollout.instant_engine import LOGPROB, InstantEngine, scripted_turns
from rstar2.rollout.token_codec import TokenCodec
from rstar2.rollout.tool_call import extract_call_body, parse_tool_call
from tests.rollout.fakes import CharTokenizer, FakeExecutor

pytestmark = pytest.mark.anyio


def _engine(codec: TokenCodec, tool_calls: int, turn_tokens: int) -> InstantEngine:
    call, answer = scripted_turns(codec.encode_markup, turn_tokens)
    return InstantEngine(call, answer, tool_calls, kv_capacity_tokens=4096, max_model_len=4096)


def test_the_turns_are_a_call_of_the_code_tool_and_an_answer_padded_in_front() -> None:
    codec = TokenCodec(CharTokenizer())
    call, answer = scripted_turns(codec.encode_markup, 120)
    assert len(call) == len(answer) == 120
    parsed = parse_tool_call(extract_call_body(codec.decode(call)) or "")
    assert parsed.code == "print(2 + 3)"  # type: ignore[union-attr]
    assert call[-1] == codec.call_end_id and answer[-1] in codec.end_ids
    assert codec.decode(answer).endswith("<answer>\\boxed{5}</answer><|im_end|>")
    short_call, short_answer = scripted_turns(codec.encode_markup, 1)  # never cut
    assert short_call == call[-len(short_call) :] and short_answer == answer[-len(short_answer) :]


def test_the_turn_comes_from_the_request_id() -> None:
    assert [turn_of(r) for r in ("p/0/t0", "p/3/t2", "train/1/4/0/t11", "other")] == [0, 2, 11, 0]


@pytest.mark.parametrize("tool_calls", [0, 1, 3])
async def test_a_rollout_makes_the_scripted_calls_then_answers(tool_calls: int) -> None:
    codec = TokenCodec(CharTokenizer())
    engine = _engine(codec, tool_calls, turn_tokens=100)
    tools = FakeExecutor()
    traj = await run_trajectory(
        engine, tools, codec, codec.encode_markup("<|im_start|>assistant\n"),
        RolloutConfig(max_turns=5, max_response_tokens=2000), prompt_id="p", sample=0,
    )  # fmt: skip
    assert (traj.turns, traj.tool_calls, traj.finish_reason) == (
        tool_calls + 1, tool_calls, "answer"
    )  # fmt: skip
    assert [r.code for r in tools.requests] == ["print(2 + 3)"] * tool_calls
    assert sum(traj.loss_mask) == 100 * (tool_calls + 1)  # generated; tool responses masked
    assert {lp for lp, m in zip(traj.logprobs, traj.loss_mask, strict=True) if m} == {LOGPROB}
    assert engine.stats().generated_tokens == 100 * (tool_calls + 1)
    assert engine.stats().running == 0


async def test_a_turn_is_cut_at_max_tokens() -> None:
    codec = TokenCodec(CharTokenizer())
    engine = _engine(codec, 1, turn_tokens=100)
    out = await engine.generate("p/0/t0", [1], SamplingParams(max_tokens=30))
    assert (len(out.token_ids), out.finish_reason) == (30, "length")
    out = await engine.generate("p/0/t1", [1], SamplingParams(max_tokens=100))
    assert (len(out.token_ids), out.finish_reason) == (100, "stop")


def test_the_script_is_validated() -> None:
    with pytest.raises(ConfigError, match="instant_turn_tokens"):
        EngineConfig(instant_turn_tokens=0).validate()
    with pytest.raises(ConfigError, match="instant_tool_calls"):
        EngineConfig(instant_tool_calls=-1).validate()
