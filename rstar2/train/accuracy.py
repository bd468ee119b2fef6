"""Evaluation accuracy with a 95% confidence interval, and the evaluation splits of a run.

`score(results)` is avg@k (with the evaluation's response length and tool use beside it): each problem's pass rate over its k samples (reward > 0), averaged
over problems (the paper's avg@k; pass@1 when k = 1). The interval treats problems as the unit
of sampling - the question an evaluation answers is "how would this policy do on other
problems like these", and the k samples of one problem are not independent draws of that:

    p_i = mean reward>0 over problem i's samples,  mean = sum(p_i) / n
    se  = sd(p_i, ddof=1) / sqrt(n),                ci95 = mean +- 1.96 * se   (clipped to [0, 1])

(the clustered standard error of Miller, "Adding Error Bars to Evals", 2024). With k > 1 the
within-problem sampling noise shrinks se; with one problem there is no interval (0 width).

Beside it, pass@k: the share of problems at least one of whose k samples is correct - what the
policy's sampling covers. RL that only sharpens the policy's choices among what it already
samples reaches at most the pass@k of where it started (Yue et al. 2025, "Does Reinforcement
Learning Really Incentivize Reasoning Capacity in LLMs Beyond the Base Model?"): an RL pass@1
near the SFT model's pass@k says the gain is bounded by exploration, not by steps.

`eval_splits(cfg, train)`: the validation split (evaluated during training; the one to tune on)
and the test split (evaluated after SFT and at the end only, the reported result), each the
`heldout_problems` / `test_problems` first problems of its source: `test_data` for the test
split when given, else the held-out source (`heldout_data`, else the embedded task's held-out
split) continues after the validation problems. No test problem may appear in training or
validation (compared by problem text): a leak is an error naming how many and one of them.

What it does not do: sample anything (the controller's tasks, seeded without the step so every
evaluation of a split uses the same seeds) or decide when to evaluate (the controller).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from rstar2.config import ConfigError
from rstar2.problem import Problem
from rstar2.tasks.arithmetic import generate_problems
from rstar2.train.config import TrainConfig
from rstar2.train.problem_files import load_problem_file
from rstar2.train.step_metrics import rollout_metrics
from rstar2.wire import TrajectoryResult

ROLLOUT_FIGURES = ("response_tokens_mean", "tool_calls_mean", "tool_error_ratio_correct")
"""The step metrics an evaluation records beside its accuracy."""
Z95 = 1.959963984540054
"""The standard normal's 97.5% quantile."""


@dataclass(frozen=True)
class Accuracy:
    """avg@k of one evaluation and its 95% interval."""

    mean: float
    low: float
    high: float
    problems: int
    samples: int
    """Samples per problem (k)."""
    pass_at_k: float = 0.0
    """Share of problems with at least one correct sample among their k (module docstring)."""
    rollout: dict[str, float] = field(default_factory=dict)
    """How the evaluation's rollouts went: `response_tokens_mean`, `tool_calls_mean` (per
    rollout) and `tool_error_ratio_correct` (failed calls among the calls of correct rollouts)."""

    def as_dict(self) -> dict[str, object]:
        return {
            "accuracy": self.mean,
            "ci95": [self.low, self.high],
            "problems": self.problems,
            "samples": self.samples,
            "pass_at_k": self.pass_at_k,
            **self.rollout,
        }


def score(results: Sequence[TrajectoryResult]) -> Accuracy:
    """avg@k over the problems of `results` (grouped by `prompt_id`) with its 95% interval."""
    by_problem: dict[str, list[float]] = {}
    for t in (r.trajectory for r in results):
        by_problem.setdefault(t.prompt_id, []).append(float(t.reward > 0))
    rates = [sum(v) / len(v) for v in by_problem.values()]
    n = len(rates)
    if n == 0:
        return Accuracy(0.0, 0.0, 0.0, 0, 0)
    mean = sum(rates) / n
    half = Z95 * statistics.stdev(rates) / math.sqrt(n) if n > 1 else 0.0
    samples = max(len(v) for v in by_problem.values())
    low, high = max(0.0, mean - half), min(1.0, mean + half)
    covered = sum(1 for v in by_problem.values() if max(v) > 0) / n
    return Accuracy(mean, low, high, n, samples, covered, rollout_figures(results))


def rollout_figures(results: Sequence[TrajectoryResult]) -> dict[str, float]:
    """Mean response tokens and tool calls per rollout, and the share of failed calls among
    the calls of correct rollouts, of an evaluation's rollouts (as a training step's
    `rollout_metrics` defines them)."""
    step = rollout_metrics(results)
    return {k: step[k] for k in ROLLOUT_FIGURES}


def _source(cfg: TrainConfig, key: str) -> list[Problem]:
    if getattr(cfg, key):
        return load_problem_file(cfg, key)
    return [Problem(p.id, p.problem, p.answer) for p in generate_problems(cfg.task, "heldout")]


def eval_splits(cfg: TrainConfig, train: Sequence[Problem]) -> tuple[list[Problem], list[Problem]]:
    """(validation, test) problems of a run (see the module docstring)."""
    heldout = _source(cfg, "heldout_data")
    validation = heldout[: cfg.heldout_problems]
    if cfg.test_data:
        test = _source(cfg, "test_data")[: cfg.test_problems]
    else:
        test = heldout[cfg.heldout_problems : cfg.heldout_problems + cfg.test_problems]
    if len(validation) < cfg.heldout_problems or len(test) < cfg.test_problems:
        raise ConfigError(
            "test_problems",
            cfg.test_problems,
            f"at most the {len(heldout) - len(validation)} held-out problems left after the "
            f"{len(validation)} validation problems (raise task.heldout_size or give test_data)",
        )
    seen = {p.problem for p in train} | {p.problem for p in validation}
    leaked = [p for p in test if p.problem in seen]
    if leaked:
        raise ConfigError(
            "test_data" if cfg.test_data else "heldout_data",
            cfg.test_data or cfg.heldout_data,
            f"test problems disjoint from training and validation; {len(leaked)} are not, "
            f"e.g. {leaked[0].problem!r}",
        )
    return validation, test
