"""Evaluation: K rollouts per problem, scored, and the summary figures of `rstar2 eval`.

`evaluate` runs every (problem, sample) rollout as its own task over one engine and one tool
executor (at most `concurrency` at once), scores each finished rollout with the reward scorer
(a truncated rollout is scored 0 without asking it) and reports each one as it finishes.
`summarize` is the pure aggregation:

- pass_at_1:              mean over problems of the mean reward of its samples (avg pass@1);
- mean_response_tokens:   mean tokens after the prompt (model and tool tokens);
- tool_calls_per_problem: mean tool calls per rollout (one attempt at a problem);
- tool_error_rate:        failed calls (errors and timeouts) / all calls, over every rollout
                          (0.0 with no calls);
- prompts_too_long:       problems whose prompt leaves no room under the context limit; they
                          are kept in every figure above, scored 0 with no response (finish
                          reason "prompt_too_long"), so pass@1 stays over all the problems.

What it does not do: load models, data or sandboxes (the `eval` command does), or write files.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import anyio

from rstar2.engine.protocol import Engine
from rstar2.reward.infra_failure import infra_failure_of
from rstar2.rollout.agent_loop import ToolExecutor, run_trajectory
from rstar2.rollout.config import RolloutConfig
from rstar2.rollout.token_codec import TokenCodec
from rstar2.rollout.trajectory import Trajectory


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


def summarize(trajectories: Sequence[Trajectory], samples: int) -> EvalSummary:
    """Aggregate scored trajectories (rewards already set) into the eval figures."""
    if samples < 1:
        raise ValueError(f"samples must be >= 1, got {samples}")
    if not trajectories:
        raise ValueError("no trajectories to summarize")
    by_problem: dict[str, list[float]] = defaultdict(list)
    for t in trajectories:
        by_problem[t.prompt_id].append(t.reward)
    n = len(trajectories)
    calls = sum(t.tool_calls for t in trajectories)
    errors = sum(t.failed_tool_calls for t in trajectories)
    return EvalSummary(
        pass_at_1=sum(sum(r) / len(r) for r in by_problem.values()) / len(by_problem),
        samples=samples,
        problems=len(by_problem),
        mean_response_tokens=sum(t.response_tokens for t in trajectories) / n,
        tool_calls_per_problem=calls / n,
        tool_error_rate=errors / calls if calls else 0.0,
        finish_reasons=dict(Counter(t.finish_reason for t in trajectories)),
        prompts_too_long=len(
            {t.prompt_id for t in trajectories if t.finish_reason == "prompt_too_long"}
        ),
    )


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
) -> list[Trajectory]:
    """Roll out and score `samples` trajectories per item; returns them in (item, sample) order.

    `context_limit`: the engine's longest sequence, passed on to `run_trajectory`.
    """
    if samples < 1:
        raise ValueError(f"samples must be >= 1, got {samples}")
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    limiter = anyio.CapacityLimiter(concurrency)
    results: list[Trajectory | None] = [None] * (len(items) * samples)

    async def one(index: int, item: EvalItem, sample: int) -> None:
        async with limiter:
            traj = await run_trajectory(
                engine, tools, codec, item.prompt_ids, cfg,
                prompt_id=item.prompt_id, sample=sample, seed=seed + index,
                context_limit=context_limit,
            )  # fmt: skip
        await score_trajectory(scorer, traj, item.reference)
        results[index] = traj
        if on_done is not None:
            on_done(traj, item)

    async with anyio.create_task_group() as tg:
        for i, item in enumerate(items):
            for k in range(samples):
                tg.start_soon(one, i * samples + k, item, k)
    return [t for t in results if t is not None]


async def score_trajectory(scorer: Scorer, traj: Trajectory, reference: str) -> None:
    """Set `traj.reward` / `reward_status` (and `infra_failure` for a verification that did not
    finish); truncated rollouts get 0 without scoring."""
    if traj.truncated:
        traj.reward, traj.reward_status = 0.0, "truncated"
        return
    result = await scorer.score(traj.response_text, reference)
    traj.reward, traj.reward_status = float(result.reward), result.status
    traj.infra_failure = infra_failure_of(result.status, traj.infra_failure)
