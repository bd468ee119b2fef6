"""The controller's phases: the transition table is closed and every move a run makes is in it.

Runs of the controller (with and without held-out and test splits, a solved-filter stage,
step evaluations, `rollout_only`, asynchronous RL, an interruption) record each phase change;
together they walk every transition of `TRANSITIONS` the course of a run can take.
"""

from __future__ import annotations

import pytest

from rstar2.train import awaited_reply
from rstar2.train.controller import Controller
from rstar2.train.phase import TRANSITIONS, Phase, check_transition
from tests.train.test_controller import HELDOUT, PROBLEMS, Driver, encode, make_config

Moves = set[tuple[Phase, Phase]]


def reachable(start: Phase) -> set[Phase]:
    seen, todo = {start}, [start]
    while todo:
        for nxt in TRANSITIONS[todo.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def test_the_table_names_every_phase_and_every_phase_leads_to_done() -> None:
    assert set(TRANSITIONS) == set(Phase)
    assert reachable(Phase.START) == set(Phase)
    assert all(Phase.DONE in reachable(p) for p in Phase)
    assert TRANSITIONS[Phase.DONE] == frozenset()


def test_a_move_outside_the_table_is_refused() -> None:
    check_transition(Phase.UPDATE, Phase.PUSH_STEP)
    with pytest.raises(ValueError, match="from phase 'update' to 'train'"):
        check_transition(Phase.UPDATE, Phase.TRAIN)


def record_moves(monkeypatch: pytest.MonkeyPatch) -> Moves:
    moves: Moves = set()

    def check(current: Phase, new: Phase) -> None:
        check_transition(current, new)
        moves.add((current, new))

    monkeypatch.setattr(awaited_reply, "check_transition", check)
    return moves


def drive(
    test: bool = False,
    rollout_only: bool = False,
    interrupt_in: Phase | None = None,
    done_steps: int = 0,
    sft_done: bool = False,
    **over: object,
) -> None:
    """A run to its end (or interrupted on entering `interrupt_in`), from `done_steps` RL
    steps done (and SFT's evaluation with `sft_done`)."""
    cfg = make_config(**over)
    heldout = HELDOUT[: cfg.heldout_problems]
    c = Controller(cfg, PROBLEMS, heldout, encode, rollout_only, HELDOUT if test else ())
    c.progress.step, c.progress.sft_evaluated = done_steps, sft_done
    driver = Driver(c)
    if interrupt_in is None:
        driver.run(c.start(resume=False))
        return
    pending = c.start(resume=False)
    while c.phase != interrupt_in:
        pending = [nxt for command in pending for nxt in driver.reply(command)]
    c.interrupt("SIGINT")


def test_runs_walk_every_transition_of_the_table(monkeypatch: pytest.MonkeyPatch) -> None:
    moves = record_moves(monkeypatch)
    filtered = [{"name": "f", "steps": 1, "filter_solved": True}]
    two = [{"name": "rl1", "steps": 1}, {"name": "rl2", "steps": 2, "filter_solved": True}]
    drive(test=True, eval_every=2)  # sft eval+test, step eval, final eval+test
    drive(test=True, eval_every=3)  # the last step evaluated: final test only
    drive(eval_every=3)  # ... and no test split: done
    drive(heldout_problems=0, test=True)  # test splits only
    drive(heldout_problems=0, stages=two)  # no evaluation; a filter stage after a step
    drive(eval_every=1, stages=two)  # a filter stage after a step's evaluation
    drive(stages=filtered)  # a filter stage after SFT's evaluation
    drive(heldout_problems=0, test=True, stages=filtered)  # ... after SFT's test
    drive(heldout_problems=0, stages=filtered)
    drive(rollout_only=True, eval_every=1)  # no update: rollouts lead to evaluation
    drive(rollout_only=True, heldout_problems=0, stages=two)  # ... or to the next step
    drive(rollout_only=True)  # ... or to the final evaluation
    drive(rollout_only=True, heldout_problems=0, test=True)
    drive(rl={"group_size": 2, "max_staleness": 1})
    drive(done_steps=3)  # every step done before: SFT's evaluation, then the final one
    drive(done_steps=3, test=True)
    drive(done_steps=3, heldout_problems=0, test=True)
    drive(done_steps=3, heldout_problems=0)
    drive(done_steps=3, eval_every=1)
    drive(done_steps=3, sft_done=True)  # resumed after the last step: the final evaluation
    drive(done_steps=3, sft_done=True, heldout_problems=0, test=True)
    for phase in (Phase.UPDATE, Phase.TRAIN, Phase.SFT_EVAL):
        drive(interrupt_in=phase, test=True)
    drive(interrupt_in=Phase.SFT_TEST, heldout_problems=0, test=True)
    drive(interrupt_in=Phase.FILTER, heldout_problems=0, stages=filtered)
    drive(interrupt_in=Phase.PUSH)
    table = {(a, b) for a, nexts in TRANSITIONS.items() for b in nexts}
    assert moves <= table
    assert table - moves == set(), f"never walked: {sorted(table - moves)}"
