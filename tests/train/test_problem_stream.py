"""The data cursor: reproducible order, epochs, restriction and exact resume."""

from __future__ import annotations

import pytest

from rstar2.problem import Problem
from rstar2.train.problem_stream import ProblemStream

PROBLEMS = [Problem(f"p{i}", f"q{i}", str(i)) for i in range(5)]


def ids(batch: list[Problem]) -> list[str]:
    return [p.id for p in batch]


def test_epochs_cover_every_problem_once() -> None:
    s = ProblemStream(PROBLEMS, seed=1)
    first = ids(s.next_batch(5))
    assert sorted(first) == [p.id for p in PROBLEMS]
    assert s.epoch == 0 and s.position == 5
    s.next_batch(1)
    assert s.epoch == 1


def test_same_seed_same_order_and_resume_is_exact() -> None:
    a, b = ProblemStream(PROBLEMS, seed=3), ProblemStream(PROBLEMS, seed=3)
    assert ids(a.next_batch(7)) == ids(b.next_batch(7))
    saved = a.state()
    expected = ids(a.next_batch(6))
    c = ProblemStream(PROBLEMS, seed=3)
    c.load_state(saved)
    assert ids(c.next_batch(6)) == expected


def test_restrict_and_errors() -> None:
    s = ProblemStream(PROBLEMS, seed=0)
    s.restrict(["p1", "p3"])
    assert set(ids(s.next_batch(6))) == {"p1", "p3"}
    with pytest.raises(ValueError):
        s.restrict(["nope"])
    with pytest.raises(ValueError):
        s.next_batch(0)
    with pytest.raises(ValueError):
        ProblemStream([], seed=0)
