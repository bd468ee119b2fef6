"""Eval aggregation (exact figures) and the evaluate driver over fakes."""

from __future__ import annotations

from dataclasses import dataclass

import anyio
import pytest

from rstar2.engine.protocol import GenerationOutput, SamplingParams
from rstar2.rollout.config import RolloutConfig
from rstar2.rollout.evaluation import EvalItem, evaluate, summarize
from rstar2.rollout.token_codec import TokenCodec
from rstar2.rollout.trajectory import Trajectory
from tests.rollout.fakes import CharTokenizer, FakeExecutor, ScriptedEngine
from tests.trajectories import trajectory


def traj(
    pid: str, reward: float, tokens: int, calls: int = 0, errors: int = 0, timeouts: int = 0
) -> Trajectory:
    n = 2 + tokens
    return trajectory(
        prompt_id=pid, token_ids=[1] * n, loss_mask=[0] * n, logprobs=[0.0] * n, prompt_len=2,
        tool_calls=calls, tool_errors=errors, tool_timeouts=timeouts, reward=reward,
    )  # fmt: skip


def test_summarize_exact_figures():
    s = summarize(
        [
            traj("a", 1.0, 10, 2, 1),
            traj("a", 0.0, 20, 0),
            traj("b", 1.0, 30, 2, 0, 1),
            traj("b", 1.0, 40, 0),
        ],
        samples=2,
    )
    assert s.pass_at_1 == pytest.approx(0.75)  # (0.5 + 1.0) / 2
    assert (s.samples, s.problems) == (2, 2)
    assert s.mean_response_tokens == pytest.approx(25.0)
    assert s.tool_calls_per_problem == pytest.approx(1.0)
    assert s.tool_error_rate == pytest.approx(0.5)  # 1 error + 1 timeout of 4 calls
    assert s.finish_reasons == {"answer": 4}


def test_summarize_without_tool_calls_has_zero_error_rate():
    assert summarize([traj("a", 0.0, 5)], samples=1).tool_error_rate == 0.0


def test_summarize_rejects_bad_input():
    with pytest.raises(ValueError, match="no trajectories"):
        summarize([], samples=1)
    with pytest.raises(ValueError, match="samples"):
        summarize([traj("a", 0.0, 1)], samples=0)


@dataclass
class Score:
    reward: float
    status: str


class FakeScorer:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    async def score(self, response: str, reference: str) -> Score:
        self.calls.append((response, reference))
        return Score(1.0 if f"\\boxed{{{reference}}}" in response else 0.0, "ok")


@pytest.mark.anyio
async def test_evaluate_scores_every_sample_and_zeroes_truncated():
    tok = CharTokenizer()
    right, wrong = "<answer>\\boxed{5}</answer><|im_end|>", "<answer>\\boxed{6}</answer><|im_end|>"
    engine = ScriptedEngine(
        tok, {"a/0": [right], "a/1": [wrong], "b/0": ["x" * 40], "b/1": [right]}
    )
    items = [EvalItem("a", tok.encode("qa"), "5"), EvalItem("b", tok.encode("qb"), "5")]
    scorer, seen = FakeScorer(), []
    tally = await evaluate(
        engine, FakeExecutor(), scorer, TokenCodec(tok), items,
        RolloutConfig(max_response_tokens=30), samples=2, concurrency=3,
        on_done=lambda t, item: seen.append(t),
    )  # fmt: skip
    trajs = sorted(seen, key=lambda t: (t.prompt_id, t.sample))
    assert [(t.prompt_id, t.sample) for t in trajs] == [("a", 0), ("a", 1), ("b", 0), ("b", 1)]
    assert [t.reward for t in trajs] == [1.0, 0.0, 0.0, 1.0]
    assert trajs[2].reward_status == "truncated" and len(scorer.calls) == 3
    assert tally.summary(2) == summarize(trajs, samples=2)
    assert summarize(trajs, samples=2).pass_at_1 == pytest.approx(0.5)


@pytest.mark.anyio
async def test_evaluate_scores_an_overlong_prompt_zero_and_goes_on():
    """One problem over the context limit among normal ones: every rollout finishes, the long
    one as "prompt_too_long" with reward 0 (never sent to the scorer), and it is counted."""
    tok = CharTokenizer()
    right = "<answer>\\boxed{5}</answer><|im_end|>"
    engine = ScriptedEngine(tok, {"a/0": [right], "a/1": [right], "c/0": [right], "c/1": [right]})
    items = [
        EvalItem("a", tok.encode("qa"), "5"),
        EvalItem("long", tok.encode("q" * 200), "5"),
        EvalItem("c", tok.encode("qc"), "5"),
    ]
    scorer, seen = FakeScorer(), []
    await evaluate(
        engine, FakeExecutor(), scorer, TokenCodec(tok), items,
        RolloutConfig(max_response_tokens=30), samples=2, context_limit=100,
        on_done=lambda t, item: seen.append(t),
    )  # fmt: skip
    order = {"a": 0, "long": 1, "c": 2}
    trajs = sorted(seen, key=lambda t: (order[t.prompt_id], t.sample))
    assert [t.finish_reason for t in trajs[2:4]] == ["prompt_too_long"] * 2
    assert [t.reward for t in trajs] == [1.0, 1.0, 0.0, 0.0, 1.0, 1.0]
    assert trajs[2].reward_status == "truncated" and len(scorer.calls) == 4
    summary = summarize(trajs, samples=2)
    assert (summary.problems, summary.prompts_too_long) == (3, 1)
    assert summary.pass_at_1 == pytest.approx(2 / 3)
    assert summary.finish_reasons == {"answer": 4, "prompt_too_long": 2}


class AnswerEngine:
    """Answers every request at once with a boxed 5; counts the requests."""

    def __init__(self, tok: CharTokenizer) -> None:
        self.ids = tok.encode("<answer>\\boxed{5}</answer><|im_end|>")
        self.requests = 0

    async def generate(
        self, request_id: str, prompt_ids: list[int], params: SamplingParams
    ) -> GenerationOutput:
        self.requests += 1
        await anyio.lowlevel.checkpoint()
        return GenerationOutput(request_id, self.ids, [-0.1] * len(self.ids), "stop")

    async def abort(self, request_id: str) -> None:
        pass


@pytest.mark.anyio
async def test_a_million_samples_keep_the_work_in_flight_bounded():
    """Issue 34 row 2: 10^6 samples started 10^6 tasks before the first rollout ran (memory
    grew ~80 MB/s and Ctrl-C waited for them); the tasks alive stay within the workers and a
    cancelled run stops at once."""
    tok = CharTokenizer()
    engine, done = AnswerEngine(tok), 0
    items = [EvalItem("a", tok.encode("qa"), "5"), EvalItem("b", tok.encode("qb"), "5")]
    with anyio.CancelScope() as scope:

        def on_done(t: Trajectory, item: EvalItem) -> None:
            nonlocal done
            done += 1
            assert len(anyio.get_running_tasks()) <= 4 + 3  # the workers, the test's own
            if done == 300:
                scope.cancel()

        await evaluate(
            engine, FakeExecutor(), FakeScorer(), TokenCodec(tok), items,
            RolloutConfig(max_response_tokens=30), samples=10**6, concurrency=4,
            on_done=on_done,
        )  # fmt: skip
    assert scope.cancelled_caught and done == 300 and engine.requests <= 300 + 4
