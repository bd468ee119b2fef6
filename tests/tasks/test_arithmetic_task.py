from __future__ import annotations

import json
import re
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


# -- stories, operators and the out-of-distribution lexicon (issue 29) ------------------------

STORY = TaskConfig(word_fraction=1.0, word_style="story", min_events=0, max_events=2)


def _verbs_to_ops(text: str) -> list[str]:
    """The operations a story's wording names, in order (what the policy must infer)."""
    from rstar2.tasks.arithmetic import _GAINS, _LOSSES

    ops = []
    for sentence in text.split(". ")[1:]:
        for lex in ("train", "ood"):
            if any(v.split(" {c}")[0] in sentence for v in _GAINS[lex]):
                ops.append("+")
            if any(v.split(" {c}")[0] in sentence for v in _LOSSES[lex]):
                ops.append("-")
    return ops


def test_a_story_states_its_operations_in_words_and_its_numbers_in_order() -> None:
    problems = generate_problems(STORY, "train")[:400]
    bases = {"buys": "*", "shared equally": "//", "left over": "%", "has": None}
    seen_bases: set[str] = set()
    for p in problems:
        assert p.answer == str(evaluate(p.expression)) and int(p.answer) >= 0, p
        numbers = [int(t) for t in re.findall(r"\d+", p.problem)]
        assert numbers == [int(t) for t in re.findall(r"\d+", p.expression)], p
        first = next(k for k in bases if k in p.problem)
        seen_bases.add(first)
        tail = p.expression.split()
        if bases[first] is not None:
            assert tail[1] == bases[first], p
            tail = tail[2:]
        events = [op for op in tail if op in "+-"]
        assert events == _verbs_to_ops(p.problem), p
        assert p.problem.count("Then ") == len(events) <= STORY.max_events
        assert len(events) >= 1 or bases[first] is not None  # at least one operation
        assert "+" not in p.problem and "*" not in p.problem  # no symbol gives it away
    assert seen_bases == set(bases)


def test_the_ood_lexicon_shares_no_name_item_or_verb_with_training() -> None:
    from rstar2.tasks.arithmetic import _GAINS, _ITEMS, _LOSSES, _NAMES

    ood = TaskConfig(word_fraction=1.0, word_style="story", min_events=2, max_events=3,
                     lexicon="ood")  # fmt: skip
    words = [*_NAMES, *_ITEMS]
    verbs = [v.split(" {c}")[0] + r" \d" for v in _GAINS["train"] + _LOSSES["train"]]
    for p in generate_problems(ood, "heldout"):
        assert not any(w in p.problem for w in words), p
        assert not any(re.search(v, p.problem) for v in verbs), p
        assert p.problem.count("Then ") >= 2
    for p in generate_problems(STORY, "train")[:200]:
        assert not any(w in p.problem for w in ("Kai", "marbles", "donates", "wins"))


def test_bare_operators_come_from_ops() -> None:
    divs = generate_problems(TaskConfig(word_fraction=0.0, ops="/%", train_size=300), "train")
    for p in divs:
        ops = set(p.expression.split()[1::2])
        assert ops <= {"//", "%"} and p.answer == str(evaluate(p.expression))
    assert {"//", "%"} <= {op for p in divs for op in p.expression.split()[1::2]}
    for bad in ("", "+^", "++", "x"):
        with pytest.raises(ConfigError, match="ops"):
            TaskConfig(ops=bad).validate()
    with pytest.raises(ConfigError, match="max_events"):
        TaskConfig(min_events=2, max_events=1).validate()


def test_a_verbal_problem_names_its_one_operation_by_a_word() -> None:
    words = {"sum": "+", "Add": "+", "difference": "-", "away": "-", "product": "*",
             "Multiply": "*", "quotient": "//", "whole times": "//", "left over": "%"}  # fmt: skip
    cfg = TaskConfig(word_fraction=1.0, word_style="verbal", train_size=300)
    seen = set()
    for p in generate_problems(cfg, "train"):
        (op,) = p.expression.split()[1::2]
        named = [o for w, o in words.items() if w in p.problem]
        assert named == [op], p
        assert p.answer == str(evaluate(p.expression)) and int(p.answer) >= 0, p
        seen.add(op)
    assert seen == {"+", "-", "*", "//", "%"}


def test_steps_tell_a_storys_shape_with_every_operation_named() -> None:
    cfg = TaskConfig(word_fraction=1.0, word_style="steps", ops="+-*/%", min_digits=2,
                     max_digits=2, max_events=2, train_size=300)  # fmt: skip
    bases = {"multiply by": "*", "rounded down": "//", "remainder after": "%"}
    events = {"add": "+", "plus": "+", "subtract": "-", "minus": "-"}
    shapes = set()
    for p in generate_problems(cfg, "train"):
        assert p.answer == str(evaluate(p.expression)) and int(p.answer) >= 0, p
        numbers = [int(t) for t in re.findall(r"\d+", p.problem)]
        assert numbers == [int(t) for t in re.findall(r"\d+", p.expression)], p
        named = [o for w, o in bases.items() if w in p.problem]
        named += [events[w] for w in re.findall(r"Then (add|plus|subtract|minus) ", p.problem)]
        assert named == p.expression.split()[1::2], p  # each operator named, in order
        assert p.problem.count("Then ") <= 2 and p.problem.startswith("Start with")
        shapes.add((named[0] if named[0] not in "+-" else "", p.problem.count("Then ")))
    assert {op for op, _ in shapes} == {"", "*", "//", "%"} and {n for _, n in shapes} == {0, 1, 2}
    # the verbs of a story never appear: what they mean is left to RL
    story_verbs = ("buys", "packs of", "shared equally", "into bags", "gets", "loses", "sells")
    assert not any(v in p.problem for p in generate_problems(cfg, "train") for v in story_verbs)


def test_joined_word_styles_draw_each_problem_from_one_of_them() -> None:
    markers = ("sum", "Add", "difference", "away", "product", "Multiply", "quotient",
               "whole times", "left over")  # fmt: skip

    def verbal_share(style: str) -> float:
        cfg = TaskConfig(word_fraction=1.0, word_style=style, train_size=400)
        texts = [p.problem for p in generate_problems(cfg, "train")]
        return sum(any(m in t for m in markers) for t in texts) / len(texts)

    # every verbal problem names its operation; a few templates use such words too
    assert verbal_share("verbal") == 1.0 and verbal_share("templates") < 0.15
    assert 0.4 < verbal_share("templates+verbal") < 0.8
    with pytest.raises(ConfigError, match="word_style"):
        TaskConfig(word_style="templates+templates").validate()
    with pytest.raises(ConfigError, match="word_style"):
        TaskConfig(word_style="templates+poems").validate()


def test_a_storys_kind_is_its_base_expression_and_event_count() -> None:
    from rstar2.tasks.arithmetic import story_kind

    ood = TaskConfig(word_fraction=1.0, word_style="story", min_events=2, max_events=3,
                     lexicon="ood")  # fmt: skip
    kinds = set()
    for p in generate_problems(STORY, "train")[:300] + generate_problems(ood, "heldout")[:100]:
        kind = story_kind(p.problem)
        assert kind is not None, p
        base, events = kind.split(", ")
        tokens = p.expression.split()
        n_events = sum(1 for t in tokens if t in "+-")
        # the base's operator is the expression's first when it has one; events are the rest
        first_op = tokens[1] if len(tokens) > 1 and tokens[1] not in "+-" else None
        assert base == ("{a}" if first_op is None else "{a} " + first_op + " {b}"), (kind, p)
        assert events == f"{n_events} event" + ("" if n_events == 1 else "s"), (kind, p)
        kinds.add(base)
    assert kinds == {"{a}", "{a} * {b}", "{a} // {b}", "{a} % {b}"}
    assert story_kind("What is 12 + 30?") is None
    assert story_kind("Add 67 and 77. What do you get?") is None
