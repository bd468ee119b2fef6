"""`Problem`: one problem with its reference answer, the record every split, file and task
shares.

A problem file's row (`rstar2.data`), a generated task problem (`rstar2.tasks`, which adds
the expression that solves it) and a training or evaluation problem (`rstar2.train`) are all
this record. What it does not do: load, generate or score problems.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    """A problem's id (unique within its split), its text and its reference answer."""

    id: str
    problem: str
    answer: str

    def to_json(self) -> dict[str, str]:
        return {"id": self.id, "problem": self.problem, "answer": self.answer}
