"""Problem sets from JSONL, JSON or Parquet files, with configurable field names.

    problems, skipped = load_problems("train.jsonl", answer_field="solution")

Each row becomes a `Problem(id, problem, answer)` of strings. The problem must be a non-empty
string; the answer a non-empty string or a number (integers are what RL data keeps; a finite
float is accepted and written with `repr`); the id, when `id_field` is given, a non-empty
string or an integer, unique in the file. Without `id_field` the id is the 1-based line number
(JSONL), item number (JSON) or row number (Parquet), which stays stable when other rows are
skipped.

A field name with dots selects a nested field: `metadata.question` is `row["metadata"]
["question"]` (a Parquet struct column alike). A key that itself contains the dots wins over the
nested path. A `.json` file holds one JSON array of row objects. JSON and JSONL files may start
with a UTF-8 byte order mark (written by some Windows tools); it is skipped.

A field left unnamed (None or "") is the first of `PROBLEM_FIELDS` / `ANSWER_FIELDS` that the
file has (its first object row, or a Parquet file's columns), else "problem" / "answer": the
layouts of verl's Parquet files (`prompt` a chat list, `reward_model.ground_truth`) and of the
common Hugging Face math sets (MATH-500, AIME, DeepScaleR: `problem`, `answer`; GSM8K:
`question`, `answer`) read as they are (the fields found are logged at debug level). A problem
that is a chat list (`[{"role": "user", "content": "..."}]`, verl's `prompt`) is its last user
turn's text (a system turn is dropped: the model's chat template has its own). An answer that
ends with GSM8K's `#### X` is X.

A bad row - invalid JSON, not an object, a missing field (the message lists the row's fields),
a wrong type, an empty value, a duplicate id - raises `BadRow` (a ValueError) naming the file
and the line (or row), unless `skip_bad_rows=True`: then it is skipped, logged at debug level
and counted. Blank JSONL lines are ignored, not counted. A Parquet file that lacks a configured
column is always an error (every row would be bad: the field names are wrong, not the data).
A directory is refused as one (`IsADirectoryError`).

What it does not do: download datasets, filter to integer answers, shuffle, or extract a
boxed answer from a worked solution (MATH's `solution`: name a field that holds the answer).
"""

from __future__ import annotations

import errno
import itertools
import json
import logging
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple

from rstar2.problem import Problem

log = logging.getLogger(__name__)

JSONL_SUFFIXES = (".jsonl", ".ndjson")
JSON_SUFFIXES = (".json",)
PARQUET_SUFFIXES = (".parquet", ".pq")
PROBLEM_FIELDS = ("problem", "question", "prompt", "Problem", "Question")
"""The problem field of a file that names none: the first of these it has (see the module)."""
ANSWER_FIELDS = ("answer", "reward_model.ground_truth", "ground_truth", "final_answer", "Answer")
"""The answer field of a file that names none: the first of these it has."""
GSM8K_MARK = "####"
"""GSM8K's answers are a worked solution ending `#### 72`; the reference is what follows."""


class LoadedProblems(NamedTuple):
    problems: list[Problem]
    skipped: int


@dataclass
class DataFormat:
    """Which fields of a problem file hold what: the train config's `data_format` table (for
    `data`, `heldout_data` and `test_data`), as `rstar2 eval`'s --problem-field, --answer-field,
    --id-field and --skip-bad-rows are for its --data."""

    problem_field: str = ""
    """The problem text; dots select a nested field (`extra_info.question`); a chat list gives
    its last user turn. Empty: the first of `PROBLEM_FIELDS` the file has."""
    answer_field: str = ""
    """The reference answer (dotted: nested). Empty: the first of `ANSWER_FIELDS` the file has."""
    id_field: str = ""
    """The problem id (dotted: nested). Empty: the row number."""
    skip_bad_rows: bool = False
    """Skip (and count) rows that do not parse instead of refusing the file."""


class BadRow(ValueError):
    """One row of a problem file is unusable; the message names the file and line."""


def load_problems(
    path: str | Path,
    problem_field: str | None = None,
    answer_field: str | None = None,
    id_field: str | None = None,
    skip_bad_rows: bool = False,
) -> LoadedProblems:
    """Read every row of a .jsonl/.ndjson, .json or .parquet/.pq file (see the module
    docstring; a field None or "" is found by name)."""
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(errno.EISDIR, "Is a directory, not a problem file", str(path))
    if not path.is_file():
        raise FileNotFoundError(f"problem file not found: {path}")
    suffix = path.suffix.lower()
    id_field = id_field or None
    if suffix in PARQUET_SUFFIXES:
        parquet = _open_parquet(path)
        has = _columns_have(parquet.schema_arrow)
        problem_field = problem_field or _choose(PROBLEM_FIELDS, has)
        answer_field = answer_field or _choose(ANSWER_FIELDS, has)
        columns = [f for f in (problem_field, answer_field, id_field) if f]
        rows, where = _parquet_rows(path, parquet, columns), "row"
    elif suffix in JSONL_SUFFIXES or suffix in JSON_SUFFIXES:
        if suffix in JSONL_SUFFIXES:
            rows, where = _jsonl_rows(path), "line"
        else:
            rows, where = _json_rows(path), "item"
        first, rows = _first_object(rows)
        has = partial(_has, first if first is not None else {})
        problem_field = problem_field or _choose(PROBLEM_FIELDS, has)
        answer_field = answer_field or _choose(ANSWER_FIELDS, has)
    else:
        raise ValueError(f"{path}: unknown problem file type (expected .jsonl, .json or .parquet)")
    if (problem_field, answer_field) != (PROBLEM_FIELDS[0], ANSWER_FIELDS[0]):
        log.debug("%s: problem field %r, answer field %r", path, problem_field, answer_field)
    problems: list[Problem] = []
    seen: set[str] = set()
    skipped = 0
    for number, row in rows:
        try:
            if isinstance(row, BadRow):
                raise row
            problem = problem_from_row(row, number, problem_field, answer_field, id_field)
            if problem.id in seen:
                raise BadRow(f"duplicate id {problem.id!r}")
        except BadRow as e:
            if not skip_bad_rows:
                raise BadRow(f"{path} {where} {number}: {e}") from None
            log.debug("skipping %s %s %d: %s", path, where, number, e)
            skipped += 1
            continue
        seen.add(problem.id)
        problems.append(problem)
    if skipped:
        log.info("%s: skipped %d bad rows", path, skipped)
    return LoadedProblems(problems, skipped)


def _choose(candidates: tuple[str, ...], has: Callable[[str], bool]) -> str:
    """The first candidate field the file has, else the first candidate (whose absence the
    rows then report)."""
    return next((name for name in candidates if has(name)), candidates[0])


def _first_object(rows: Iterator[tuple[int, Any]]) -> tuple[Any, Iterator[tuple[int, Any]]]:
    """The first row that is an object (None: none is), and all the rows again."""
    seen: list[tuple[int, Any]] = []
    for item in rows:
        seen.append(item)
        if isinstance(item[1], dict):
            return item[1], itertools.chain(seen, rows)
    return None, iter(seen)


def problem_from_row(
    row: Any, number: int, problem_field: str, answer_field: str, id_field: str | None
) -> Problem:
    """Validate one decoded row (BadRow says what is wrong, without the location)."""
    if not isinstance(row, dict):
        raise BadRow(f"expected an object, got {type(row).__name__}")
    problem = _field(row, problem_field)
    if isinstance(problem, list):
        problem = _user_turn(problem, problem_field)
    if not isinstance(problem, str):
        raise BadRow(f"field {problem_field!r} must be a string, got {type(problem).__name__}")
    answer = _text_or_number(_field(row, answer_field), answer_field, allow_float=True)
    if GSM8K_MARK in answer:
        answer = answer.rpartition(GSM8K_MARK)[2].strip()
        if not answer:
            raise BadRow(f"field {answer_field!r} has nothing after {GSM8K_MARK!r}")
    row_id = str(number) if id_field is None else _text_or_number(_field(row, id_field), id_field)
    if not problem.strip():
        raise BadRow(f"field {problem_field!r} is empty")
    return Problem(row_id, problem, answer)


def _user_turn(messages: list[Any], name: str) -> str:
    """The text of a chat list's last user turn (verl's `prompt`)."""
    texts = [m.get("content") for m in messages if isinstance(m, dict) and m.get("role") == "user"]
    if not texts:
        raise BadRow(f"field {name!r} is a list with no user turn ({{'role': 'user', ...}})")
    if not isinstance(texts[-1], str):
        raise BadRow(f"field {name!r}: the user turn's content must be a string")
    return texts[-1]


def _field(row: dict[str, Any], name: str) -> Any:
    """`row[name]`, or for a dotted name not itself a key the nested field it names."""
    value = row.get(name)
    if value is None and name not in row and "." in name:
        value = row
        for part in name.split("."):
            value = value.get(part) if isinstance(value, dict) else None
    if value is None:
        fields = ", ".join(map(str, row)) or "none"
        raise BadRow(f"missing field {name!r} (the row's fields: {fields})")
    return value


def _has(row: dict[str, Any], name: str) -> bool:
    """Whether `row` has the field `name` (nested for a dotted name), null or not."""
    if name in row:
        return True
    node: Any = row
    for part in name.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return "." in name


def _text_or_number(value: Any, name: str, allow_float: bool = False) -> str:
    if isinstance(value, bool):
        raise BadRow(f"field {name!r} must be a string or a number, got bool")
    if isinstance(value, int):
        return str(value)
    if allow_float and isinstance(value, float):
        if not math.isfinite(value):
            raise BadRow(f"field {name!r} is not finite: {value!r}")
        return repr(value)
    if not isinstance(value, str):
        raise BadRow(f"field {name!r} must be a string or a number, got {type(value).__name__}")
    if not value.strip():
        raise BadRow(f"field {name!r} is empty")
    return value.strip()


def _jsonl_rows(path: Path) -> Iterator[tuple[int, Any]]:
    """(line number, decoded object or BadRow) for each non-blank line."""
    with path.open("rb") as f:
        for number, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError as e:
                yield number, BadRow(f"not UTF-8 ({e.reason})")
                continue
            if not line.strip():
                continue
            try:  # without its line break, so that an error's column is on this line
                yield number, json.loads(line.rstrip("\r\n"))
            except json.JSONDecodeError as e:
                yield number, BadRow(f"invalid JSON: {e.msg} at column {e.colno}")


def _json_rows(path: Path) -> Iterator[tuple[int, Any]]:
    """(item number, object) for each item of the file's one JSON array; a file that is not
    UTF-8 JSON or not an array raises ValueError at once (no row of it is usable)."""
    try:
        data = json.loads(path.read_bytes().decode("utf-8-sig"))
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 ({e.reason})") from None
    except json.JSONDecodeError as e:
        raise ValueError(
            f"{path}: invalid JSON: {e.msg} at line {e.lineno} column {e.colno}"
        ) from None
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a JSON array of objects, got {type(data).__name__}")
    yield from enumerate(data, start=1)


def _open_parquet(path: Path) -> Any:
    import pyarrow.parquet as pq  # pyarrow is heavy: only Parquet users pay for it

    try:
        return pq.ParquetFile(path)
    except Exception as e:  # pyarrow raises its own ArrowInvalid/OSError family
        raise ValueError(f"{path}: not a readable Parquet file ({e})") from None


def _columns_have(schema: Any) -> Callable[[str], bool]:
    """Whether a Parquet schema has a field: a column, or a dotted path into struct columns."""
    import pyarrow as pa

    def has(name: str) -> bool:
        if name in schema.names:
            return True
        top, *rest = name.split(".")
        if not rest or top not in schema.names:
            return False
        kind = schema.field(top).type
        for part in rest:
            if not pa.types.is_struct(kind) or kind.get_field_index(part) < 0:
                return False
            kind = kind.field(part).type
        return True

    return has


def _parquet_rows(path: Path, parquet: Any, columns: list[str]) -> Iterator[tuple[int, Any]]:
    """(row number, row dict) for each row; a missing column raises ValueError at once. A
    dotted field name reads its top-level column (a struct); `_field` walks into it."""
    names = parquet.schema_arrow.names
    wanted = [c if c in names else c.split(".")[0] for c in columns]
    missing = [c for c, w in zip(columns, wanted, strict=True) if w not in names]
    if missing:
        raise ValueError(f"{path}: no column {missing[0]!r} (columns: {', '.join(names)})")
    return _parquet_batches(parquet, list(dict.fromkeys(wanted)))


def _parquet_batches(parquet: Any, columns: list[str]) -> Iterator[tuple[int, Any]]:
    number = 0
    for batch in parquet.iter_batches(columns=columns):
        for row in batch.to_pylist():
            number += 1
            yield number, row
