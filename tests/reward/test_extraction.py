from __future__ import annotations

import pytest

from rstar2.reward.extraction import extract_answer, last_answer_block


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        ("The answer is \\boxed{42}.", "42"),
        ("\\boxed{ 42 }", "42"),
        ("first \\boxed{1} then \\boxed{2}", "2"),
        ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
        ("\\boxed{\\frac{\\sqrt{2}}{2}}", "\\frac{\\sqrt{2}}{2}"),
        ("\\boxed{\\{1,2\\}}", "\\{1,2\\}"),  # escaped braces are not grouping
        ("$\\boxed 7$", "7"),
        ("\\boxed 7 apples", "7"),
        ("\\fbox{3}", "3"),
        ("\\boxed{5} and a cut-off \\boxed{6", "5"),  # unbalanced last box is skipped
        ("\\boxed{}", None),
        ("\\boxedx{3}", None),  # another macro
        ("no answer here", None),
        ("", None),
    ],
)
def test_extract_answer_forms(response: str, expected: str | None) -> None:
    assert extract_answer(response) == expected


def test_answer_block_wins_over_later_boxes() -> None:
    text = "try \\boxed{1} <answer>so \\boxed{2}</answer> aside \\boxed{3}"
    assert extract_answer(text) == "2"


def test_last_answer_block_is_used() -> None:
    text = "<answer>\\boxed{1}</answer> wait <answer>\\boxed{9}</answer>"
    assert extract_answer(text) == "9"


def test_answer_block_without_box_falls_back_to_last_box() -> None:
    assert extract_answer("\\boxed{4} <answer>four</answer>") == "4"


def test_unclosed_answer_block_runs_to_end() -> None:
    assert last_answer_block("x <answer>\\boxed{8} and more") == "\\boxed{8} and more"
    assert extract_answer("x <answer>\\boxed{8} and more") == "8"


def test_many_unclosed_boxes_is_linear_enough() -> None:
    # 20k unclosed boxes: quadratic scanning would take minutes; this must finish at once.
    text = "\\boxed{" * 20_000 + "\\boxed{5}"
    assert extract_answer(text) == "5"


def test_non_string_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="str"):
        extract_answer(42)  # type: ignore[arg-type]
