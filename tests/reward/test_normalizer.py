from __future__ import annotations

from fractions import Fraction

import pytest

from rstar2.reward.normalizer import MAX_CHARS, answers_match, as_number, normalize_answer


@pytest.mark.parametrize(
    ("pred", "ref"),
    [
        ("1/2", "0.5"),
        ("\\frac{1}{2}", "0.5"),
        ("\\dfrac{1}{2}", "1/2"),
        ("\\tfrac12", "0.5"),
        ("-\\frac{3}{4}", "-0.75"),
        ("1,000", "1000"),
        ("1{,}000", "1000"),
        ("1\\,000", "1000"),
        ("$42$", "42"),
        ("\\text{5 cm}", "5"),
        ("5\\text{ cm}", "5"),
        ("5 cm", "5"),
        ("90^\\circ", "90"),
        ("90^{\\circ}", "90"),
        ("50\\%", "50"),
        ("\\$5", "5"),
        ("42.", "42"),
        ("x = 7", "7"),
        ("1.0", "1"),
        ("\\left( 1,2 \\right)", "(1,2)"),
        ("\\pi", "\\pi"),
    ],
)
def test_equivalent_forms_match(pred: str, ref: str) -> None:
    assert answers_match(pred, ref)
    assert answers_match(ref, pred)


@pytest.mark.parametrize(
    ("pred", "ref"),
    [
        ("3", "4"),
        ("0.333", "1/3"),  # approximate: not decided here
        ("5m", "5"),  # `m` could be a variable: no unit stripping without a space
        ("1,2", "12"),  # not a thousands separator
        ("2\\sqrt{2}", "\\sqrt{8}"),  # symbolic: math-verify's job
        ("garbage", "5"),
        ("", "5"),
        ("1/0", "1"),
    ],
)
def test_unequal_or_undecided_pairs_do_not_match(pred: str, ref: str) -> None:
    assert not answers_match(pred, ref)


def test_normalize_steps() -> None:
    assert normalize_answer("  $\\dfrac{3}{4}$. ") == "3/4"
    assert normalize_answer("\\frac{x}{2}") == "(x)/(2)"
    assert normalize_answer("12,345,678.5") == "12345678.5"


def test_as_number_values() -> None:
    assert as_number("-3/4") == Fraction(-3, 4)
    assert as_number("0.125") == Fraction(1, 8)
    assert as_number("1/0") is None
    assert as_number("1/2/3") is None
    assert as_number("x") is None


def test_overlong_answers_are_left_alone() -> None:
    long = "1" * (MAX_CHARS + 1)
    assert normalize_answer(long) == long
    assert as_number(long) is None


def test_non_string_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="str"):
        normalize_answer(None)  # type: ignore[arg-type]
