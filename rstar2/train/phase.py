"""The RL controller's phases and the one table of the transitions between them.

A phase names what the controller awaits: a weight push (`PUSH`, `PUSH_STEP`), a rollout
(`SFT_EVAL`, `SFT_TEST`, `FILTER`, `TRAIN`, `STEP_EVAL`, `FINAL_EVAL`, `FINAL_TEST`) or an
update (`UPDATE`); `START` is before `Controller.start`, `DONE` after `Finish`. `TRANSITIONS`
lists, for each phase, the phases the controller may enter next; `check_transition` refuses
any other move. What it does not do: decide which transition to take (`controller.py`).
"""

from __future__ import annotations

import enum


class Phase(enum.StrEnum):
    """What the controller awaits (the value is the name used in its error messages)."""

    START = "start"
    PUSH = "push"
    """The starting policy's push."""
    SFT_EVAL = "sft_eval"
    SFT_TEST = "sft_test"
    FILTER = "filter"
    """A stage's solved-filter probe."""
    TRAIN = "train"
    """An RL step's rollouts."""
    UPDATE = "update"
    PUSH_STEP = "push_step"
    """An RL step's updated policy's push."""
    STEP_EVAL = "step_eval"
    FINAL_EVAL = "final_eval"
    FINAL_TEST = "final_test"
    DONE = "done"


EVALUATIONS = frozenset(
    {Phase.SFT_EVAL, Phase.SFT_TEST, Phase.STEP_EVAL, Phase.FINAL_EVAL, Phase.FINAL_TEST}
)
"""The phases that await a held-out evaluation's rollouts."""

_NEXT_STEP = frozenset({Phase.FILTER, Phase.TRAIN, Phase.FINAL_EVAL, Phase.FINAL_TEST, Phase.DONE})
"""Where "the next RL step" leads: its stage's probe, its rollouts, or the run's end."""

TRANSITIONS: dict[Phase, frozenset[Phase]] = {
    Phase.START: frozenset({Phase.PUSH}),
    Phase.PUSH: _NEXT_STEP | {Phase.SFT_EVAL, Phase.SFT_TEST},
    Phase.SFT_EVAL: (_NEXT_STEP - {Phase.FINAL_TEST}) | {Phase.SFT_TEST},  # test: SFT's first
    Phase.SFT_TEST: _NEXT_STEP,
    Phase.FILTER: frozenset({Phase.TRAIN, Phase.DONE}),
    Phase.TRAIN: _NEXT_STEP | {Phase.UPDATE, Phase.STEP_EVAL},  # rollout_only: no update
    Phase.UPDATE: frozenset({Phase.PUSH_STEP, Phase.DONE}),
    Phase.PUSH_STEP: _NEXT_STEP | {Phase.STEP_EVAL},
    Phase.STEP_EVAL: _NEXT_STEP - {Phase.FINAL_EVAL},  # the step's evaluation stands for it
    Phase.FINAL_EVAL: frozenset({Phase.FINAL_TEST, Phase.DONE}),
    Phase.FINAL_TEST: frozenset({Phase.DONE}),
    Phase.DONE: frozenset(),
}
"""The phases each phase may lead to (`DONE` from any awaiting phase: an interruption)."""


def check_transition(current: Phase, new: Phase) -> None:
    """Raise `ValueError` unless `TRANSITIONS` allows `current -> new`."""
    if new not in TRANSITIONS[current]:
        raise ValueError(f"the controller may not go from phase {current.value!r} to {new.value!r}")
