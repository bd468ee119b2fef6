"""The embedded default task: procedurally generated arithmetic problems with exact integer answers.

Problems are either bare expressions ("What is 4821 * 37 + 905?") or word problems whose
operation the model must recognise: fixed templates ("A crate holds 37 bottles. How many bottles
are in 482 crates?"), or, with `word_style = "story"`, short stories built from clauses whose
verbs name the operations ("Ben buys 12 packs of 40 pens. Then Ben loses 7. How many pens does
Ben have now?" is `12 * 40 - 7`): a base clause (has, buys packs of, shares equally, packs into
bags and keeps the leftover) and `min_events`..`max_events` events (gets / finds / is given
more; gives away / loses / sells), so the operation sequence must be inferred from the wording.
`lexicon = "ood"` draws names, items and event verbs from sets the "train" lexicon never uses,
for an out-of-distribution test. `word_style = "verbal"` names one operation by a word ("the
quotient when 96 is divided by 7, rounded down"); `word_style = "steps"` tells a story's shape
with every operation named ("Start with 12 pens and multiply by 40. Then subtract 7.").
Operands have several digits, so a tiny model cannot do the arithmetic in its head but can learn
to copy the numbers into `print(...)` and the tool's output into `\\boxed{}`.

Generation is seeded and reproducible. Train and held-out splits are disjoint by construction:
a problem's split is decided by a stable hash of its text, so the same text can never land in
both. The difficulty knob is `TaskConfig` (digits per operand, operands per expression, the
operators of bare expressions, share and style of word problems).

What it does not do: SFT traces (see `rstar2.tasks.traces`), verification of model answers
(see `rstar2.reward`) or file formats beyond the JSONL writer below.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from rstar2.config import ConfigError, require
from rstar2.problem import Problem

Split = Literal["train", "heldout"]

_OPS = {"+": "+", "-": "-", "*": "*", "/": "//", "%": "%"}
"""`TaskConfig.ops` characters -> the Python operator of bare expressions (/ is floor division)."""
_NAMES = ("Ana", "Ben", "Chen", "Dara", "Eli", "Femi", "Gus", "Hana", "Ivo", "Jun")
_ITEMS = ("apples", "coins", "stamps", "cards", "shells", "beads", "books", "pens")
_OOD_NAMES = ("Kai", "Lena", "Milo", "Nora", "Omar", "Pia", "Quinn", "Rosa")
_OOD_ITEMS = ("marbles", "stickers", "cookies", "tickets", "pebbles", "buttons")
WORD_STYLES = ("templates", "story", "verbal", "steps")
Lexicon = Literal["train", "ood"]


@dataclass
class TaskConfig:
    """Difficulty and size of the embedded arithmetic task."""

    seed: int = 0
    """Seed of the problem generator; the same seed gives the same problems."""
    min_digits: int = 2
    """Fewest digits of an operand."""
    max_digits: int = 3
    """Most digits of an operand (the main difficulty knob)."""
    max_operands: int = 3
    """Most operands of a bare expression (2 or more)."""
    ops: str = "+-*"
    """Operators of bare expressions, from "+-*/%" ("/" is floor division, "//")."""
    word_fraction: float = 0.5
    """Share of problems stated in words rather than as a bare expression."""
    word_style: str = "templates"
    """Word problems from the fixed templates, stories of a base clause and events, one
    operation named by a word ("verbal": "the quotient when a is divided by b"), or a story's
    shape as explicit instructions ("steps": "Start with a and multiply by b. Then subtract c.");
    several joined by "+" ("templates+verbal") draw each word problem's style uniformly among
    them."""
    min_events: int = 0
    """Stories: fewest event clauses after the base clause (a story has at least one
    operation: a base clause without one gets an event)."""
    max_events: int = 1
    """Stories: most event clauses after the base clause."""
    lexicon: Lexicon = "train"
    """Stories: the names, items and event verbs drawn from ("ood": sets "train" never uses)."""
    heldout_fraction: float = 0.2
    """Share of the problem space (by text hash) reserved for the held-out split."""
    train_size: int = 4000
    """Number of training problems."""
    heldout_size: int = 200
    """Number of held-out problems."""

    def validate(self) -> None:
        require(1 <= self.min_digits <= 9, "min_digits", self.min_digits, "an integer in 1..9")
        require(
            self.min_digits <= self.max_digits <= 9,
            "max_digits",
            self.max_digits,
            f"an integer in {self.min_digits}..9",
        )
        require(2 <= self.max_operands <= 6, "max_operands", self.max_operands, "2..6")
        require(0.0 <= self.word_fraction <= 1.0, "word_fraction", self.word_fraction, "0..1")
        require(
            bool(self.ops) and set(self.ops) <= set(_OPS) and len(set(self.ops)) == len(self.ops),
            "ops",
            self.ops,
            'distinct operators from "+-*/%" ("/" is floor division)',
        )
        styles = self.word_style.split("+")
        require(
            set(styles) <= set(WORD_STYLES) and len(set(styles)) == len(styles), "word_style",
            self.word_style, '"templates", "story", "verbal" or "steps", or several joined by "+"',
        )  # fmt: skip
        require(0 <= self.min_events <= 4, "min_events", self.min_events, "an integer in 0..4")
        require(
            self.min_events <= self.max_events <= 4,
            "max_events",
            self.max_events,
            f"an integer in {self.min_events}..4",
        )
        require(self.lexicon in ("train", "ood"), "lexicon", self.lexicon, '"train" or "ood"')
        require(
            0.0 < self.heldout_fraction < 1.0,
            "heldout_fraction",
            self.heldout_fraction,
            "a number strictly between 0 and 1",
        )
        require(self.train_size >= 1, "train_size", self.train_size, "a positive integer")
        require(self.heldout_size >= 1, "heldout_size", self.heldout_size, "a positive integer")


@dataclass(frozen=True)
class ArithmeticProblem(Problem):
    """A generated `Problem`: with the Python expression that solves it and its split."""

    expression: str
    split: Split = field(default="train")


def _operand(rng: random.Random, cfg: TaskConfig) -> int:
    digits = rng.randint(cfg.min_digits, cfg.max_digits)
    return rng.randint(10 ** (digits - 1), 10**digits - 1)


def _divisor(rng: random.Random, b: int) -> int:
    """A divisor for `//` or `%` drawn in 2..min(b, 99), so the answers are not trivial."""
    return rng.randint(2, max(2, min(b, 99)))


def _division(rng: random.Random, a: int, b: int) -> tuple[int, int]:
    """(dividend, divisor) from two operands: the dividend at least twice the divisor and not
    a multiple of it."""
    b = _divisor(rng, b)
    return max(a, b * rng.randint(2, 9) + rng.randint(1, b - 1)), b


def _bare(rng: random.Random, cfg: TaskConfig) -> tuple[str, str]:
    n = rng.randint(2, cfg.max_operands)
    parts = [str(_operand(rng, cfg))]
    for _ in range(n - 1):
        op = _OPS[rng.choice(cfg.ops)]
        right = _operand(rng, cfg)
        if op in ("//", "%"):  # a divisor smaller than what it divides: a non-trivial answer
            right = _divisor(rng, right)
        parts += [op, str(right)]
    expr = " ".join(parts)
    stem = rng.choice(("What is {e}?", "Compute {e}.", "Evaluate {e}.", "Find {e}."))
    return stem.format(e=expr), expr


# Word problems: (template, expression template). Operands appear in the text in the same
# order as in the expression, so the code is a copy of the numbers plus the right operators.
_WORD: tuple[tuple[str, str], ...] = (
    ("{n} has {a} {i} and gets {b} more. How many {i} does {n} have now?", "{a} + {b}"),
    ("{n} had {a} {i} and gave away {b}. How many {i} are left?", "{a} - {b}"),
    ("A box holds {a} {i}. How many {i} are in {b} boxes?", "{a} * {b}"),
    ("{n} buys {a} packs of {b} {i}. How many {i} is that?", "{a} * {b}"),
    ("{n} has {a} {i}, buys {b} more and loses {c}. How many {i} now?", "{a} + {b} - {c}"),
    ("Each of {a} shelves holds {b} {i}, plus {c} on the floor. How many {i}?", "{a} * {b} + {c}"),
    ("{a} {i} are shared among {b} kids equally. How many does each kid get?", "{a} // {b}"),
    ("What is the remainder when {a} is divided by {b}?", "{a} % {b}"),
)


def _word(rng: random.Random, cfg: TaskConfig) -> tuple[str, str]:
    text, expr = rng.choice(_WORD)
    a, b, c = (_operand(rng, cfg) for _ in range(3))
    if "//" in expr or "%" in expr:
        a, b = max(a, b) * rng.randint(2, 9), min(a, b)
    if "-" in expr and "+" not in expr:
        a, b = max(a, b), min(a, b)
    fill = {"a": a, "b": b, "c": c, "n": rng.choice(_NAMES), "i": rng.choice(_ITEMS)}
    return text.format(**fill), expr.format(**fill)


# Stories: a base clause, then events. (text, expression) with {n} name, {i} item, {a} {b}
# numbers; the base's expression is computed first, events apply left to right, and Python's
# precedence agrees (* // % only ever appear in the base, + - only in events).
_BASES: tuple[tuple[str, str], ...] = (
    ("{n} has {a} {i}.", "{a}"),
    ("{n} buys {a} packs of {b} {i}.", "{a} * {b}"),
    ("{a} {i} are shared equally among {b} friends, and {n} gets one share.", "{a} // {b}"),
    ("{n} packs {a} {i} into bags of {b} and keeps the {i} left over.", "{a} % {b}"),
)
_GAINS = {"train": ("gets {c} more", "finds {c} more", "is given {c} more"),
          "ood": ("wins {c} more", "collects {c} more")}  # fmt: skip
_LOSSES = {"train": ("gives away {c}", "loses {c}", "sells {c}"),
           "ood": ("donates {c}", "breaks {c}")}  # fmt: skip


def _chain(
    rng: random.Random,
    cfg: TaskConfig,
    bases: tuple[tuple[str, str], ...],
    phrases: dict[str, tuple[str, ...]],
) -> tuple[str, int, int, str, list[tuple[str, int]]]:
    """A base clause and its events, drawn alike for stories and steps: (the base's template,
    its numbers a and b, the expression, [(the phrase of each event, its number c)]). Events add
    or subtract (`phrases["+"]`, `phrases["-"]`) and never go below zero."""
    base, template = rng.choice(bases)
    a, b = _operand(rng, cfg), _operand(rng, cfg)
    if "//" in template or "%" in template:
        a, b = _division(rng, a, b)
    expr = template.format(a=a, b=b)
    value = evaluate(expr)
    events = rng.randint(cfg.min_events, cfg.max_events)
    if template == "{a}":
        events = max(events, 1)  # a base without an operation gets an event
    drawn: list[tuple[str, int]] = []
    for _ in range(events):
        c = _operand(rng, cfg)
        op = "-" if c < value and rng.random() < 0.5 else "+"
        value = value - c if op == "-" else value + c
        drawn.append((rng.choice(phrases[op]), c))
        expr = f"{expr} {op} {c}"
    return base, a, b, expr, drawn


def _story(rng: random.Random, cfg: TaskConfig) -> tuple[str, str]:
    names, items = (_NAMES, _ITEMS) if cfg.lexicon == "train" else (_OOD_NAMES, _OOD_ITEMS)
    name, item = rng.choice(names), rng.choice(items)
    verbs = {"+": _GAINS[cfg.lexicon], "-": _LOSSES[cfg.lexicon]}
    base, a, b, expr, events = _chain(rng, cfg, _BASES, verbs)
    sentences = [base.format(n=name, i=item, a=a, b=b)]
    sentences += [f"Then {name} {verb.format(c=c)}." for verb, c in events]
    sentences.append(f"How many {item} does {name} have now?")
    return " ".join(sentences), expr


_VERBAL: tuple[tuple[str, str], ...] = (
    ("What is the sum of {a} and {b}?", "{a} + {b}"),
    ("Add {a} and {b}. What do you get?", "{a} + {b}"),
    ("What is the difference between {a} and {b}?", "{a} - {b}"),
    ("Take {b} away from {a}. What is left?", "{a} - {b}"),
    ("What is the product of {a} and {b}?", "{a} * {b}"),
    ("Multiply {a} by {b}. What is the result?", "{a} * {b}"),
    ("What is the quotient when {a} is divided by {b}, rounded down?", "{a} // {b}"),
    ("How many whole times does {b} go into {a}?", "{a} // {b}"),
    ("What is left over when {a} is divided by {b}?", "{a} % {b}"),
)


# Steps: a story's shape (a base operation, then events that add or subtract) told as explicit
# instructions, every operation named: "Start with 12 pens and multiply by 40. Then subtract 7.
# How many pens is that?" is `12 * 40 - 7`. It demonstrates reading a chain of numbers in order
# without telling what a story's verbs (buys packs of, shared equally, loses) mean.
_STEP_BASES: tuple[tuple[str, str], ...] = (
    ("Start with {a} {i}.", "{a}"),
    ("Start with {a} {i} and multiply by {b}.", "{a} * {b}"),
    ("Start with {a} {i} and divide by {b}, rounded down.", "{a} // {b}"),
    ("Start with {a} {i} and take the remainder after dividing by {b}.", "{a} % {b}"),
)
_STEP_EVENTS = {
    "+": ("Then add {c}.", "Then plus {c}."),
    "-": ("Then subtract {c}.", "Then minus {c}."),
}


def _steps(rng: random.Random, cfg: TaskConfig) -> tuple[str, str]:
    item = rng.choice(_ITEMS)
    base, a, b, expr, events = _chain(rng, cfg, _STEP_BASES, _STEP_EVENTS)
    sentences = [base.format(i=item, a=a, b=b)]
    sentences += [phrase.format(c=c) for phrase, c in events]
    sentences.append(f"How many {item} is that?")
    return " ".join(sentences), expr


def _base_pattern(text: str) -> re.Pattern[str]:
    """A base clause's template as a regex: numbers, names and items as wildcards."""
    fields = {"a": r"\d+", "b": r"\d+", "n": r"\w+", "i": r"\w+"}
    parts = re.split(r"(\{[abni]\})", text)
    return re.compile(
        "".join(fields[p[1]] if re.fullmatch(r"\{[abni]\}", p) else re.escape(p) for p in parts)
    )


_BASE_PATTERNS = tuple((_base_pattern(text), expr) for text, expr in _BASES)


def story_kind(text: str) -> str | None:
    """A story's shape: its base clause's expression and its event count, e.g. `"{a} // {b},
    1 event"` (None for text that is not a story). For accuracy by kind of story (which
    operations a policy has learnt to read): `scripts/accuracy_by_kind.py`."""
    for pattern, expr in _BASE_PATTERNS:
        if pattern.match(text):
            events = text.count(" Then ")
            return f"{expr}, {events} event{'' if events == 1 else 's'}"
    return None


def _verbal(rng: random.Random, cfg: TaskConfig) -> tuple[str, str]:
    text, expr = rng.choice(_VERBAL)
    a, b = _operand(rng, cfg), _operand(rng, cfg)
    if "//" in expr or "%" in expr:
        a, b = _division(rng, a, b)
    elif "-" in expr:
        a, b = max(a, b), min(a, b)
    return text.format(a=a, b=b), expr.format(a=a, b=b)


def split_of(text: str, heldout_fraction: float) -> Split:
    """The split a problem text belongs to, from a stable hash (never Python's salted hash)."""
    bucket = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") / 2**64
    return "heldout" if bucket < heldout_fraction else "train"


def evaluate(expression: str) -> int:
    """Exact value of one of our generated expressions (digits, spaces and + - * // % only)."""
    if not expression or set(expression) - set("0123456789 +-*/%"):
        raise ValueError(f"not a generated arithmetic expression: {expression!r}")
    value = eval(expression, {"__builtins__": {}}, {})  # safe: the character set is checked above
    if not isinstance(value, int):
        raise ValueError(f"expression {expression!r} has no integer value")
    return value


def _stream(cfg: TaskConfig, split: Split) -> Iterator[ArithmeticProblem]:
    # One generator per split, seeded from (seed, split), so growing train_size does not
    # change the held-out problems.
    rng = random.Random(f"{cfg.seed}:{split}")
    seen: set[str] = set()
    make: Callable[[random.Random, TaskConfig], tuple[str, str]]
    styles = cfg.word_style.split("+")
    misses = 0
    while misses < _MAX_MISSES:
        if rng.random() < cfg.word_fraction:
            # one style draws nothing more, so a single style's problems stay as they were
            style = styles[0] if len(styles) == 1 else rng.choice(styles)
            make = {"story": _story, "verbal": _verbal, "steps": _steps}.get(style, _word)
        else:
            make = _bare
        text, expr = make(rng, cfg)
        if text in seen or split_of(text, cfg.heldout_fraction) != split:
            misses += 1
            continue
        misses = 0
        seen.add(text)
        yield ArithmeticProblem(f"{split}-{len(seen) - 1}", text, str(evaluate(expr)), expr, split)


_MAX_MISSES = 100_000
"""Draws in a row without a new problem after which a split is taken to be exhausted."""


def generate_problems(cfg: TaskConfig, split: Split) -> list[ArithmeticProblem]:
    """The first `train_size` or `heldout_size` problems of a split, deterministically."""
    if split not in ("train", "heldout"):
        raise ValueError(f"split must be 'train' or 'heldout', got {split!r}")
    n = cfg.train_size if split == "train" else cfg.heldout_size
    out: list[ArithmeticProblem] = []
    for problem in _stream(cfg, split):
        out.append(problem)
        if len(out) == n:
            return out
    raise ConfigError(
        f"task.{split}_size",
        n,
        f"at most the {len(out)} distinct {split} problems these task settings make (raise "
        "task.max_digits, task.max_operands or task.word_fraction, or ask for fewer)",
    )


def write_jsonl(problems: list[ArithmeticProblem], path: str | Path) -> Path:
    """Write problems as JSON lines with `id`, `problem`, `answer` (the data loader's fields)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for p in problems:
            f.write(json.dumps(p.to_json()) + "\n")
    return path
