"""A PRIME-style answer normaliser: the cheap half of verification, run in the caller.

`normalize_answer` strips LaTeX noise that does not change a value: `$...$` and `\\(...\\)`
delimiters, `\\text{}`/`\\mathrm{}`/`\\mbox{}` wrappers, `\\left`/`\\right`, LaTeX spacing
commands, degree signs, percent signs, `\\$`, a trailing period, a leading `x =`, a unit word
after a number (`5 cm`), thousands separators (`1,000`, `1{,}000`) and whitespace; it rewrites
`\\dfrac`/`\\tfrac` to `\\frac` and a numeric `\\frac{a}{b}` (or `\\frac12`) to `a/b`.
`as_number` reads integers, decimals and fractions of those as an exact `Fraction`.

`answers_match(pred, ref)` is True only when the two are surely equal: the normalised texts are
identical, or both are numbers with the same exact value. False means "not decided here": the
pair then goes to math-verify in a worker process (`verify_worker`). Every step is a linear-time
regex or string operation over a bounded input (`MAX_CHARS`), so it is safe to run in the event
loop on untrusted text.

What it does not do: symbolic equivalence (`2\\sqrt{2}` vs `\\sqrt{8}`), approximate comparison
(`0.333` vs `1/3`), sets, tuples or intervals - math-verify handles those.
"""

from __future__ import annotations

import re
from fractions import Fraction

MAX_CHARS = 512
"""Longer answers are not normalised (returned stripped only) and never match here."""

_WRAPPERS = re.compile(
    r"\\(?:text|textbf|textrm|textit|mathrm|mathbf|mbox|operatorname)\{([^{}]*)\}"
)
_DELIMITERS = re.compile(r"\\[()\[\]]|\$")
_SPACING = re.compile(r"\\[,;:! ]|\\q?quad|~")
_DEGREES = re.compile(r"\^\s*\{?\s*\\circ\s*\}?|\\circ|°|\\degree")
_PERCENT = re.compile(r"\\?%")
_LEFT_RIGHT = re.compile(r"\\(?:left|right)(?![A-Za-z])")
_FRAC_BRACED = re.compile(r"\\frac\{([^{}]*)\}\{([^{}]*)\}")
_FRAC_SHORT = re.compile(r"\\frac(\d)(\d)")
_LEADING_VAR = re.compile(r"^[A-Za-z]\s*=\s*")
_UNITS = (
    "degrees?|cm|mm|km|m|meters?|metres?|inch(?:es)?|feet|foot|ft|miles?|units?|"
    "dollars?|cents?|seconds?|minutes?|hours?|days?|weeks?|years?|grams?|kg|g|"
    "liters?|litres?|ml|sq|square|cubic|points?|people|students?|ways"
)
_NUMBER_UNIT = re.compile(rf"^([-+]?[\d.,/]+)\s+(?:{_UNITS})(?:\s*\^?\s*\{{?[23]\}}?)?$")
_THOUSANDS = re.compile(r"^[-+]?\d{1,3}(?:,\d{3})+(?:\.\d+)?$")
_NUMBER = re.compile(r"^[-+]?(?:\d+(?:\.\d*)?|\.\d+)$")


def normalize_answer(text: str) -> str:
    """A canonical text form of an answer (see the module docstring for the steps)."""
    if not isinstance(text, str):
        raise TypeError(f"answer must be a str, got {type(text).__name__}")
    s = text.strip()
    if len(s) > MAX_CHARS:
        return s
    s = s.replace("\\$", "")
    s = _DELIMITERS.sub("", s)
    s = _WRAPPERS.sub(r" \1 ", s)
    s = _LEFT_RIGHT.sub("", s)
    s = _SPACING.sub(" ", s)
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac").replace("{,}", ",")
    s = _DEGREES.sub("", s)
    s = _PERCENT.sub("", s)
    s = s.strip().rstrip(".").strip()
    s = _LEADING_VAR.sub("", s)
    m = _NUMBER_UNIT.match(s)
    if m:
        s = m.group(1)
    s = _FRAC_BRACED.sub(_frac_to_slash, s)
    s = _FRAC_SHORT.sub(r"\1/\2", s)
    s = "".join(s.split())
    if _THOUSANDS.match(s):
        s = s.replace(",", "")
    return s


def _frac_to_slash(m: re.Match[str]) -> str:
    num, den = m.group(1).strip(), m.group(2).strip()
    if _NUMBER.match(num) and _NUMBER.match(den):
        return f"{num}/{den}"
    return f"({num})/({den})"


def as_number(normalized: str) -> Fraction | None:
    """The exact value of a normalised integer, decimal or `a/b` of those, else None."""
    if len(normalized) > MAX_CHARS:
        return None
    parts = normalized.split("/")
    if len(parts) > 2 or not all(_NUMBER.match(p) for p in parts):
        return None
    try:
        values = [Fraction(p) for p in parts]
    except ValueError:  # e.g. "5." with nothing usable, or too many digits
        return None
    if len(values) == 1:
        return values[0]
    if values[1] == 0:
        return None
    return values[0] / values[1]


def answers_match(pred: str, ref: str) -> bool:
    """True when `pred` and `ref` are surely equal after normalisation; False = undecided."""
    a, b = normalize_answer(pred), normalize_answer(ref)
    if not a or not b:
        return False
    if a == b:
        return True
    x, y = as_number(a), as_number(b)
    return x is not None and y is not None and x == y
