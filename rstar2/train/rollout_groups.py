"""A batch of rollouts by prompt and sample: the tasks, and their results grouped back.

`rollout_tasks` numbers a batch's tasks (`samples` per problem: `RolloutTask.prompt` and
`sample`, trajectory ids `kind/step/prompt/sample`, seeds derived from the same parts);
`group_results` groups their results by the integer numbering in a fixed order (prompts in order, each group's samples in order)
whatever order the trajectories finished in: the controller groups once and hands the groups
on (staleness filter, `Update`, `RunState.train_on`); `unsolved` is the solved-filter over a
probe's groups. What it does not do: select, weigh or drop rollouts (`rstar2.rl`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from rstar2.problem import Problem
from rstar2.train.seeds import derive_seed
from rstar2.wire import RolloutTask, TrajectoryResult

Encode = Callable[[Problem], list[int]]
"""A problem's prompt as token ids (the chat template applied)."""


def rollout_tasks(
    problems: Sequence[Problem],
    encode: Encode,
    seed: int,
    step: int,
    kind: str,
    samples: int,
    temperature: float,
    max_response_tokens: int = 0,
    max_turns: int = 0,
    seed_step: int | None = None,
) -> list[RolloutTask]:
    """`samples` tasks per problem, trajectory ids `kind/step/prompt/sample`; sampling
    seeds from (seed, kind, `seed_step` (default: `step`), prompt, sample)."""
    seed_at = step if seed_step is None else seed_step
    return [
        RolloutTask(
            traj_id=f"{kind}/{step}/{i}/{s}",
            prompt_id=f"{kind}/{step}/{i}",
            sample=s,
            step=step,
            prompt_ids=encode(p),
            answer=p.answer,
            seed=derive_seed(seed, kind, seed_at, i, s),
            kind=kind,
            temperature=temperature,
            max_response_tokens=max_response_tokens,
            max_turns=max_turns,
            prompt=i,
        )
        for i, p in enumerate(problems)
        for s in range(samples)
    ]


def group_results(results: Sequence[TrajectoryResult]) -> list[list[TrajectoryResult]]:
    """Rollouts grouped by prompt, groups in prompt order, each sorted by sample: a fixed
    order whatever order the trajectories finished in."""
    groups: dict[int, list[TrajectoryResult]] = {}
    for r in results:
        if r.prompt < 0:
            raise ValueError(f"result {r.traj_id!r} has no prompt index (RolloutTask.prompt)")
        groups.setdefault(r.prompt, []).append(r)
    return [sorted(groups[i], key=lambda r: r.trajectory.sample) for i in sorted(groups)]


def unsolved(problems: Sequence[Problem], results: Sequence[TrajectoryResult]) -> list[str]:
    """The solved-filter: ids of the probed problems that some sample failed (reward <= 0).
    `results` are the probe's rollouts, prompt `i` being `problems[i]`."""
    groups = group_results(results)
    return [
        p.id
        for p, g in zip(problems, groups, strict=True)
        if not all(r.trajectory.reward > 0 for r in g)
    ]
