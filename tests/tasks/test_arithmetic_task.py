from __future__ import annotations

import json
from pathlib import Path

import pytest

from rstar2.config import ConfigError
from rstar2.tasks import TaskConfig, evaluate, generate_problems, split_of, write_jsonl


def test_generation_is_seeded() -> None:
    cfg = TaskConfig(train_size=50, heldout_size=20)
    assert generate_problems(cfg, "train") == generate_problems(cfg, "train")
    other = generate_problems(TaskConfig(seed=1, train_size=50), "train")
    assert other != generate_problems(cfg, "train")


def test_splits_are_disjoint_and_follow_the_hash() -> None:
    cfg = TaskConfig(train_size=2000, heldout_size=300)
    train = generate_problems(cfg, "train")
    heldout = generate_problems(cfg, "heldout")
    assert not {p.problem for p in train} & {p.problem for p in heldout}
    assert len({p.problem for p in train}) == len(train)
    assert all(split_of(p.problem, cfg.heldout_fraction) == "heldout" for p in heldout)


def test_heldout_does_not_depend_on_train_size() -> None:
    small = generate_problems(TaskConfig(train_size=10, heldout_size=30), "heldout")
    large = generate_problems(TaskConfig(train_size=5000, heldout_size=30), "heldout")
    assert small == large


def test_answers_are_exact_integers_of_the_expression() -> None:
    for p in generate_problems(TaskConfig(train_size=300, max_digits=5), "train"):
        assert int(p.answer) == eval(p.expression)  # our own arithmetic strings
        for number in p.expression.replace("//", " ").split():
            if number.isdigit():
                assert number in p.problem


@pytest.mark.parametrize("digits", [1, 3, 5])
def test_digits_knob_bounds_operands(digits: int) -> None:
    cfg = TaskConfig(min_digits=digits, max_digits=digits, word_fraction=0.0, train_size=100)
    for p in generate_problems(cfg, "train"):
        operands = [t for t in p.expression.split() if t.isdigit()]
        assert all(len(t) == digits for t in operands)
        assert 2 <= len(operands) <= cfg.max_operands


@pytest.mark.parametrize("bad", ["__import__('os')", "1.5 + 2", "", "2 / 3"])
def test_evaluate_rejects_foreign_expressions(bad: str) -> None:
    with pytest.raises(ValueError):
        evaluate(bad)


@pytest.mark.parametrize(
    ("key", "value"),
    [("max_digits", 0), ("max_operands", 1), ("word_fraction", 1.5), ("heldout_fraction", 0.0)],
)
def test_config_validation_names_the_key(key: str, value: object) -> None:
    with pytest.raises(ConfigError, match=key):
        TaskConfig(**{key: value}).validate()  # type: ignore[arg-type]


def test_generate_rejects_unknown_split() -> None:
    with pytest.raises(ValueError, match="split"):
        generate_problems(TaskConfig(), "test")  # type: ignore[arg-type]


def test_write_jsonl_uses_loader_fields(tmp_path: Path) -> None:
    problems = generate_problems(TaskConfig(heldout_size=3), "heldout")
    path = write_jsonl(problems, tmp_path / "d" / "heldout.jsonl")
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert rows == [{"id": p.id, "problem": p.problem, "answer": p.answer} for p in problems]


def test_asking_for_more_problems_than_the_settings_make_is_a_config_error() -> None:
    tiny = TaskConfig(
        min_digits=1, max_digits=1, max_operands=2, word_fraction=0.0, train_size=100_000
    )
    with pytest.raises(ConfigError, match="task.train_size"):
        generate_problems(tiny, "train")
