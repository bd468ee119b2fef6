from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rstar2.data import BadRow, Problem, load_problems


def write_jsonl(path: Path, rows: list[object]) -> Path:
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return path


def test_jsonl_default_fields_and_line_number_ids(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "p.jsonl",
        [{"problem": "1+1?", "answer": "2"}, "", {"problem": "6*7?", "answer": 42, "extra": 1}],
    )
    problems, skipped = load_problems(path)
    assert problems == [Problem("1", "1+1?", "2"), Problem("3", "6*7?", "42")]
    assert skipped == 0


def test_custom_field_names_and_id_field(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "p.jsonl",
        [{"q": "a?", "sol": " 0.5 ", "uid": "x1"}, {"q": "b?", "sol": 2.5, "uid": 7}],
    )
    loaded = load_problems(path, problem_field="q", answer_field="sol", id_field="uid")
    assert loaded.problems == [Problem("x1", "a?", "0.5"), Problem("7", "b?", "2.5")]


BAD_ROWS = [
    ("{not json", "invalid JSON"),
    ("[1, 2]", "expected an object"),
    ({"answer": "1"}, "missing field 'problem'"),
    ({"problem": "p", "answer": None}, "missing field 'answer'"),
    ({"problem": 3, "answer": "1"}, "'problem' must be a string"),
    ({"problem": "p", "answer": ["1"]}, "'answer' must be a string or a number"),
    ({"problem": "p", "answer": True}, "got bool"),
    ({"problem": "p", "answer": float("nan")}, "not finite"),
    ({"problem": "   ", "answer": "1"}, "'problem' is empty"),
    ({"problem": "p", "answer": ""}, "'answer' is empty"),
]


@pytest.mark.parametrize(("bad", "message"), BAD_ROWS)
def test_bad_row_is_an_error_naming_file_and_line(
    tmp_path: Path, bad: object, message: str
) -> None:
    path = write_jsonl(tmp_path / "p.jsonl", [{"problem": "ok", "answer": "1"}, bad])
    with pytest.raises(BadRow, match=message) as info:
        load_problems(path)
    assert str(info.value).startswith(f"{path} line 2: ")
    assert isinstance(info.value, ValueError)


def test_bad_rows_are_skipped_and_counted(tmp_path: Path) -> None:
    rows: list[object] = [bad for bad, _ in BAD_ROWS] + [{"problem": "ok", "answer": "1"}]
    path = write_jsonl(tmp_path / "p.jsonl", rows)
    problems, skipped = load_problems(path, skip_bad_rows=True)
    assert problems == [Problem(str(len(BAD_ROWS) + 1), "ok", "1")]
    assert skipped == len(BAD_ROWS)


def test_duplicate_ids(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "p.jsonl",
        [{"problem": "a", "answer": "1", "id": "q"}, {"problem": "b", "answer": "2", "id": "q"}],
    )
    with pytest.raises(BadRow, match="line 2: duplicate id 'q'"):
        load_problems(path, id_field="id")
    assert load_problems(path, id_field="id", skip_bad_rows=True).skipped == 1


def test_non_utf8_line(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    path.write_bytes(b'{"problem": "a", "answer": "1"}\n\xff\xfe\n')
    with pytest.raises(BadRow, match="line 2: not UTF-8"):
        load_problems(path)


def test_parquet_rows_nulls_and_row_numbers(tmp_path: Path) -> None:
    path = tmp_path / "p.parquet"
    table = pa.table({"problem": ["a?", None, "c?"], "answer": [1, 2, 3], "other": [0, 0, 0]})
    pq.write_table(table, path)
    with pytest.raises(BadRow, match=r"p.parquet row 2: missing field 'problem'"):
        load_problems(path)
    problems, skipped = load_problems(path, skip_bad_rows=True)
    assert problems == [Problem("1", "a?", "1"), Problem("3", "c?", "3")]
    assert skipped == 1


def test_parquet_missing_column_is_a_file_error_even_when_skipping(tmp_path: Path) -> None:
    path = tmp_path / "p.parquet"
    pq.write_table(pa.table({"question": ["a?"], "answer": ["1"]}), path)
    with pytest.raises(ValueError, match="no column 'problem'.*question"):
        load_problems(path, "problem", skip_bad_rows=True)
    pq.write_table(pa.table({"text": ["a?"], "answer": ["1"]}), path)  # no known problem field
    with pytest.raises(ValueError, match="no column 'problem'.*text"):
        load_problems(path)


def test_file_errors(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="nope.jsonl"):
        load_problems(tmp_path / "nope.jsonl")
    (tmp_path / "p.csv").write_text("problem,answer\n")
    with pytest.raises(ValueError, match="unknown problem file type"):
        load_problems(tmp_path / "p.csv")
    (tmp_path / "broken.parquet").write_bytes(b"not parquet")
    with pytest.raises(ValueError, match="not a readable Parquet file"):
        load_problems(tmp_path / "broken.parquet")


NESTED = [
    {"metadata": {"question": "a?", "meta": {"ans": 1}}, "id": 1},
    {"metadata": {"question": "b?", "meta": {"ans": 2}}, "id": 2},
]


def test_dotted_field_names_select_nested_fields(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "p.jsonl", NESTED)
    loaded = load_problems(path, "metadata.question", "metadata.meta.ans")
    assert loaded.problems == [Problem("1", "a?", "1"), Problem("2", "b?", "2")]


def test_a_dotted_key_wins_over_the_nested_path(tmp_path: Path) -> None:
    row = {"a.b": "flat?", "a": {"b": "nested?"}, "answer": 1}
    path = write_jsonl(tmp_path / "p.jsonl", [row])
    assert load_problems(path, "a.b").problems == [Problem("1", "flat?", "1")]


@pytest.mark.parametrize(
    "row", [{"metadata": "x", "answer": 1}, {"metadata": {"q": "x"}, "answer": 1}, {"answer": 1}]
)
def test_a_missing_nested_field_is_a_bad_row(tmp_path: Path, row: dict[str, object]) -> None:
    path = write_jsonl(tmp_path / "p.jsonl", [row])
    with pytest.raises(BadRow, match="line 1: missing field 'metadata.question'"):
        load_problems(path, "metadata.question")


def test_parquet_dotted_field_names_read_struct_columns(tmp_path: Path) -> None:
    path = tmp_path / "p.parquet"
    pq.write_table(pa.Table.from_pylist(NESTED), path)
    loaded = load_problems(path, "metadata.question", "metadata.meta.ans", id_field="id")
    assert loaded.problems == [Problem("1", "a?", "1"), Problem("2", "b?", "2")]
    with pytest.raises(ValueError, match="no column 'meta.question'"):
        load_problems(path, "meta.question", "metadata.meta.ans")


def test_json_array_file(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    path.write_text(json.dumps([{"problem": "a?", "answer": 1}, 3, {"problem": "c?", "answer": 3}]))
    with pytest.raises(BadRow, match=r"p.json item 2: expected an object"):
        load_problems(path)
    problems, skipped = load_problems(path, skip_bad_rows=True)
    assert problems == [Problem("1", "a?", "1"), Problem("3", "c?", "3")] and skipped == 1


@pytest.mark.parametrize(
    ("text", "message"),
    [('{"problem": "a?"}', "expected a JSON array of objects, got dict"), ("[1,", "invalid JSON")],
)
def test_json_file_that_is_not_an_array_is_a_file_error(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "p.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        load_problems(path, skip_bad_rows=True)


@pytest.mark.parametrize("name", ["p.jsonl", "p.json"])
def test_a_utf8_byte_order_mark_is_skipped(tmp_path: Path, name: str) -> None:
    rows = [{"problem": "a?", "answer": 1}, {"problem": "b?", "answer": 2}]
    body = json.dumps(rows) if name == "p.json" else "\n".join(json.dumps(r) for r in rows)
    path = tmp_path / name
    path.write_bytes(b"\xef\xbb\xbf" + body.encode())
    assert load_problems(path).problems == [Problem("1", "a?", "1"), Problem("2", "b?", "2")]


def test_a_missing_field_lists_the_rows_fields(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "p.jsonl", [{"text": "a?", "answer": 1}])
    with pytest.raises(BadRow, match=r"missing field 'problem' \(the row's fields: text, answer\)"):
        load_problems(path)


def test_a_directory_is_refused_as_one(tmp_path: Path) -> None:
    with pytest.raises(IsADirectoryError, match="Is a directory"):
        load_problems(tmp_path)


VERL = [
    {
        "data_source": "openai/gsm8k",
        "prompt": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "6*7? Output the final answer after ####."},
        ],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": "42"},
        "extra_info": {"index": 0, "question": "6*7?"},
    },
    {
        "data_source": "openai/gsm8k",
        "prompt": [{"role": "user", "content": "1+1?"}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": "2"},
        "extra_info": {"index": 1, "question": "1+1?"},
    },
]


@pytest.mark.parametrize("name", ["verl.parquet", "verl.jsonl"])
def test_a_verl_file_reads_as_it_is(tmp_path: Path, name: str) -> None:
    # issue 34 row 5: the chat-list prompt was "must be a string, got list"
    path = tmp_path / name
    if name.endswith(".parquet"):
        pq.write_table(pa.Table.from_pylist(VERL), path)
    else:
        write_jsonl(path, VERL)  # type: ignore[arg-type]
    assert load_problems(path).problems == [
        Problem("1", "6*7? Output the final answer after ####.", "42"),
        Problem("2", "1+1?", "2"),
    ]
    assert load_problems(path, "extra_info.question").problems[0].problem == "6*7?"


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        ({"question": "q?", "answer": "3 + 4 = 7\n#### 7"}, Problem("1", "q?", "7")),  # GSM8K
        ({"Problem": "q?", "Answer": 204}, Problem("1", "q?", "204")),  # AIME
        ({"problem": "q?", "solution": "...", "answer": "\\frac{1}{2}"}, Problem("1", "q?", "\\frac{1}{2}")),
        ({"question": "q?", "final_answer": "5"}, Problem("1", "q?", "5")),
    ],
)  # fmt: skip
def test_common_math_layouts_read_as_they_are(
    tmp_path: Path, row: dict[str, object], expected: Problem
) -> None:
    path = write_jsonl(tmp_path / "p.jsonl", [row])
    assert load_problems(path).problems == [expected]


@pytest.mark.parametrize(
    ("prompt", "message"),
    [
        ([{"role": "system", "content": "x"}], "a list with no user turn"),
        ([{"role": "user", "content": ["x"]}], "content must be a string"),
    ],
)
def test_a_chat_list_needs_a_user_turn_of_text(
    tmp_path: Path, prompt: list[object], message: str
) -> None:
    path = write_jsonl(tmp_path / "p.jsonl", [{"prompt": prompt, "answer": 1}])
    with pytest.raises(BadRow, match=message):
        load_problems(path)
