"""Held-out evaluation within an RL run: which split is evaluated after which, and what an
evaluation's accuracy updates.

A run evaluates the validation split, then the test split, twice: after SFT (`SFT_EVAL`,
`SFT_TEST`: the "sft" metrics row) and after the last RL step (`FINAL_EVAL`, `FINAL_TEST`: the
"final" row; validation is skipped there when the last step was just evaluated, and that
step's evaluation stands for it); and validation every `eval_every` RL steps (`STEP_EVAL`, in
the step's row). An empty split is skipped. `EvaluationPlan` answers which phase comes next;
`evaluation_rollout` builds an evaluation's `RollOut`; `record` writes an accuracy into the run's
progress (`Progress.evaluations`, the SFT and latest accuracies) and the metrics row, and logs it.

What it does not do: await an evaluation's rollouts (`controller.py`), or score them
(`accuracy.py`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from rstar2.problem import Problem
from rstar2.train.accuracy import Accuracy
from rstar2.train.config import TrainConfig
from rstar2.train.phase import Phase
from rstar2.train.rollout_groups import Encode, rollout_tasks
from rstar2.train.run_commands import Recording, RollOut

log = logging.getLogger(__name__)

TEST_PHASES = frozenset({Phase.SFT_TEST, Phase.FINAL_TEST})
"""The evaluations of the test split (the others evaluate the validation split)."""


class Evaluated(Protocol):
    """The part of the run's progress an evaluation updates (`progress.Progress`)."""

    sft_accuracy: float | None
    last_accuracy: float | None
    evaluations: dict[str, dict[str, Any]]


@dataclass(frozen=True)
class EvaluationPlan:
    """Which evaluations a run has (`validation`: a validation split, `test`: a test split)."""

    validation: bool
    test: bool

    def after_sft(self) -> Phase | None:
        """The first evaluation of the SFT policy (None: nothing to evaluate)."""
        if self.validation:
            return Phase.SFT_EVAL
        return Phase.SFT_TEST if self.test else None

    def after_rl(self, step_evaluated: bool) -> Phase | None:
        """The first evaluation after the last RL step (`step_evaluated`: that step's
        validation was just done)."""
        if self.validation and not step_evaluated:
            return Phase.FINAL_EVAL
        return Phase.FINAL_TEST if self.test else None

    def following(self, phase: Phase) -> Phase | None:
        """The evaluation that follows `phase`'s in the same row (None: the row is done)."""
        if self.test and phase in (Phase.SFT_EVAL, Phase.FINAL_EVAL):
            return Phase.SFT_TEST if phase == Phase.SFT_EVAL else Phase.FINAL_TEST
        return None


def evaluation_rollout(
    cfg: TrainConfig,
    problems: Sequence[Problem],
    encode: Encode,
    step: int,
    test: bool,
    stage: str,
) -> RollOut:
    """Evaluate `problems` (the test split with `test`, else validation), `eval_samples` each,
    with seeds that do not depend on the step: every evaluation of a split samples alike, so two
    evaluations differ by the policy alone. With `record_evaluations` the rollouts are recorded
    under `stage` ("sft", "final" or the RL stage of the step evaluated)."""
    problems = tuple(problems)
    kind = "test" if test else "eval"
    tasks = rollout_tasks(
        problems, encode, cfg.seed, step, kind, cfg.eval_samples, cfg.eval_temperature,
        seed_step=0,
    )  # fmt: skip
    record = None
    if cfg.record_evaluations:
        record = Recording("test" if test else "validation", stage, problems)
    return RollOut(step, tasks, record=record)


def record(
    progress: Evaluated, phase: Phase, acc: Accuracy, row: dict[str, Any], step: int
) -> None:
    """Write `phase`'s accuracy `acc` (at RL step `step`) into `progress` and `row`, and log it."""
    split = "test" if phase in TEST_PHASES else "validation"
    row.update(accuracy_row("test" if split == "test" else "heldout", acc))
    if phase == Phase.STEP_EVAL:
        progress.last_accuracy = acc.mean
        progress.evaluations["validation_last"] = {**acc.as_dict(), "step": step}
        log.info("validation accuracy at step %d: %s", step, accuracy_text(acc))
        return
    when = "sft" if phase in (Phase.SFT_EVAL, Phase.SFT_TEST) else "final"
    progress.evaluations[f"{split}_{when}"] = acc.as_dict()
    if split == "validation":
        progress.last_accuracy = acc.mean
        if when == "sft":
            progress.sft_accuracy = acc.mean
    after = "SFT" if when == "sft" else "RL"
    log.info("%s accuracy after %s: %s", split, after, accuracy_text(acc))


def accuracy_row(prefix: str, acc: Accuracy) -> dict[str, Any]:
    """A metrics row's `<prefix>_accuracy`, `<prefix>_ci95` ([low, high]) and
    `<prefix>_pass_at_k`."""
    return {
        f"{prefix}_accuracy": acc.mean,
        f"{prefix}_ci95": [acc.low, acc.high],
        f"{prefix}_pass_at_k": acc.pass_at_k,
    }


def accuracy_text(acc: Accuracy) -> str:
    """An accuracy as a log line shows it."""
    return (
        f"{acc.mean:.3f} (95% CI {acc.low:.3f}-{acc.high:.3f}; {acc.problems} problems x "
        f"{acc.samples} samples; pass@{acc.samples} {acc.pass_at_k:.3f})"
    )
