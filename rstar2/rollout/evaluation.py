"""Evaluation: K rollouts per problem, scored, and the summary figures of `rstar2 eval`.

`evaluate` runs the (problem, sample) rollouts over one engine and one tool executor with a
fixed pool of `concurrency` workers, each pulling the next (problem, sample) from one shared
iterator, so the work in flight, and the memory, stay bounded by `concurrency` whatever the
count (10^6 samples start as many tasks as 10 do). Each worker scores its finished rollout with
the reward scorer (a truncated rollout is scored 0 without asking it), adds it to the running
`EvalTally` and reports it (`on_done`, e.g. to write it out); no trajectory is kept after that.
The figures, from the tally (`summarize` is the same over a list):

- pass_at_1:              mean over problems of the mean reward of its samples (avg pass@1);
- mean_response_tokens:   mean tokens after the prompt (model and tool tokens);
- tool_calls_per_problem: mean tool calls per rollout (one attempt at a problem);
- tool_error_rate:        failed calls (errors and timeouts) / all calls, over every rollout
                          (0.0 with no calls);
- prompts_too_long:       problems whose prompt leaves no room under the context limit; they
                          are kept in every figure above, scored 0 with no response (finish
                          reason "prompt_too_long"), so pass@1 stays over all the problems.

The tally keeps two numbers per problem and a few counters, so its memory grows with the
problems (already in memory as the problem set), not with the samples.

What it does not do: load models, data or sandboxes (the `eval` command does), or write files.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import anyio

from rstar2.engine.protocol import Engine
from rstar2.finish_reason import TRUNCATED_REASONS
from rstar2.reward.infra_failure import infra_failure_of
from rstar2.rollout.agent_loop import ToolExecutor, run_trajectory
from rstar2.rollout.config import RolloutConfig
from rstar2.rollout.token_codec import TokenCodec
from rstar2.wire import Trajectory


class Score(Protocol):
    """What a reward scorer returns (the reward pool's `RewardResult` fits)."""

    reward: float
    status: str


class Scorer(Protocol):
    """Scores one response against a reference answer (the reward pool fits)."""

    async def score(self, response: str, reference: str) -> Score: ...


@dataclass(frozen=True)
class EvalItem:
    """One problem to evaluate: its id, rendered prompt and reference answer."""

    prompt_id: str
    prompt_ids: list[int]
    reference: str


@dataclass
class EvalSummary:
    """The figures `rstar2 eval --json` prints."""

    pass_at_1: float
    samples: int
    problems: int
    mean_response_tokens: float
    tool_calls_per_problem: float
    tool_error_rate: float
    finish_reasons: dict[str, int] = field(default_factory=dict)
    prompts_too_long: int = 0


class EvalTally:
    """The running sums behind `EvalSummary`: `add` one scored trajectory at a time, `summary`
    at any point. Keeps (reward sum, rollouts) per problem and a few counters, never the
    trajectories."""

    def __init__(self) -> None:
        self.rollouts = 0
        self.response_tokens = 0
        self.tool_calls = 0
        self.failed_tool_calls = 0
        self.finish_reasons: Counter[str] = Counter()
        self.reward_by_problem: dict[str, list[float]] = {}  # prompt_id -> [sum, rollouts]
        self.too_long: set[str] = set()

    def add(self, t: Trajectory) -> None:
        self.rollouts += 1
        self.response_tokens += t.response_tokens
        self.tool_calls += t.tool_calls
        self.failed_tool_calls += t.failed_tool_calls
        self.finish_reasons[t.finish_reason] += 1
        sums = self.reward_by_problem.setdefault(t.prompt_id, [0.0, 0])
        sums[0] += t.reward
        sums[1] += 1
        if t.finish_reason == "prompt_too_long":
            self.too_long.add(t.prompt_id)

    def summary(self, samples: int) -> EvalSummary:
        if samples < 1:
            raise ValueError(f"samples must be >= 1, got {samples}")
        if not self.rollouts:
            raise ValueError("no trajectories to summarize")
        problems = self.reward_by_problem.values()
        n, calls = self.rollouts, self.tool_calls
        return EvalSummary(
            pass_at_1=sum(total / count for total, count in problems) / len(problems),
            samples=samples,
            problems=len(problems),
            mean_response_tokens=self.response_tokens / n,
            tool_calls_per_problem=calls / n,
            tool_error_rate=self.failed_tool_calls / calls if calls else 0.0,
            finish_reasons=dict(self.finish_reasons),
            prompts_too_long=len(self.too_long),
        )


def summarize(trajectories: Iterable[Trajectory], samples: int) -> EvalSummary:
    """Aggregate scored trajectories (rewards already set) into the eval figures."""
    tally = EvalTally()
    for t in trajectories:
        tally.add(t)
    return tally.summary(samples)


async def evaluate(
    engine: Engine,
    tools: ToolExecutor,
    scorer: Scorer,
    codec: TokenCodec,
    items: Sequence[EvalItem],
    cfg: RolloutConfig,
    *,
    samples: int,
    seed: int = 0,
    concurrency: int = 64,
    context_limit: int | None = None,
    on_done: Callable[[Trajectory, EvalItem], None] | None = None,
) -> EvalTally:
    """Roll out and score `samples` trajectories per item with `concurrency` workers; each
    finished one goes to `on_done` (in the order they finish) and into the returned tally.

    Rollout `sample` of item `i` uses the seed `seed + i * samples + sample`, whichever worker
    runs it. `context_limit`: the engine's longest sequence, passed on to `run_trajectory`.
    """
    if samples < 1:
        raise ValueError(f"samples must be >= 1, got {samples}")
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    # one iterator shared by the workers: next() never awaits, so each item goes to one worker
    work = ((i * samples + k, item, k) for i, item in enumerate(items) for k in range(samples))
    tally = EvalTally()

    async def worker() -> None:
        for index, item, sample in work:
            traj = await run_trajectory(
                engine, tools, codec, item.prompt_ids, cfg,
                prompt_id=item.prompt_id, sample=sample, seed=seed + index,
                context_limit=context_limit,
            )  # fmt: skip
            await score_trajectory(scorer, traj, item.reference)
            tally.add(traj)
            if on_done is not None:
                on_done(traj, item)

    async with anyio.create_task_group() as tg:
        for _ in range(min(concurrency, len(items) * samples)):
            tg.start_soon(worker)
    return tally


async def score_trajectory(scorer: Scorer, traj: Trajectory, reference: str) -> None:
    """Set `traj.reward` / `reward_status` (and `infra_failure` for a verification that did not
    finish); truncated rollouts get 0 without scoring."""
    if traj.finish_reason in TRUNCATED_REASONS:
        traj.reward, traj.reward_status = 0.0, "truncated"
        return
    result = await scorer.score(traj.response_text, reference)
    traj.reward, traj.reward_status = float(result.reward), result.status
    traj.infra_failure = infra_failure_of(result.status, traj.infra_failure)
