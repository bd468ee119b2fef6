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

A bad row - invalid JSON, not an object, a missing field, a wrong type, an empty value, a
duplicate id - raises ValueError naming the file and the line (or row), unless
`skip_bad_rows=True`: then it is skipped, logged at debug level and counted. Blank JSONL lines
are ignored, not counted. A Parquet file that lacks a configured column is always an error (every
row would be bad: the field names are wrong, not the data).

What it does not do: download datasets, filter to integer answers, or shuffle.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

log = logging.getLogger(__name__)

JSONL_SUFFIXES = (".jsonl", ".ndjson")
JSON_SUFFIXES = (".json",)
PARQUET_SUFFIXES = (".parquet", ".pq")


@dataclass(frozen=True)
class Problem:
    id: str
    problem: str
    answer: str


class LoadedProblems(NamedTuple):
    problems: list[Problem]
    skipped: int


class BadRow(ValueError):
    """One row of a problem file is unusable; the message names the file and line."""


def load_problems(
    path: str | Path,
    problem_field: str = "problem",
    answer_field: str = "answer",
    id_field: str | None = None,
    skip_bad_rows: bool = False,
) -> LoadedProblems:
    """Read every row of a .jsonl/.ndjson, .json or .parquet/.pq file (see the module
    docstring)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"problem file not found: {path}")
    suffix = path.suffix.lower()
    if suffix in JSONL_SUFFIXES:
        rows, where = _jsonl_rows(path), "line"
    elif suffix in JSON_SUFFIXES:
        rows, where = _json_rows(path), "item"
    elif suffix in PARQUET_SUFFIXES:
        rows = _parquet_rows(path, [f for f in (problem_field, answer_field, id_field) if f])
        where = "row"
    else:
        raise ValueError(f"{path}: unknown problem file type (expected .jsonl, .json or .parquet)")
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


def problem_from_row(
    row: Any, number: int, problem_field: str, answer_field: str, id_field: str | None
) -> Problem:
    """Validate one decoded row (BadRow says what is wrong, without the location)."""
    if not isinstance(row, dict):
        raise BadRow(f"expected an object, got {type(row).__name__}")
    problem = _field(row, problem_field)
    if not isinstance(problem, str):
        raise BadRow(f"field {problem_field!r} must be a string, got {type(problem).__name__}")
    answer = _text_or_number(_field(row, answer_field), answer_field, allow_float=True)
    row_id = str(number) if id_field is None else _text_or_number(_field(row, id_field), id_field)
    if not problem.strip():
        raise BadRow(f"field {problem_field!r} is empty")
    return Problem(row_id, problem, answer)


def _field(row: dict[str, Any], name: str) -> Any:
    """`row[name]`, or for a dotted name not itself a key the nested field it names."""
    value = row.get(name)
    if value is None and name not in row and "." in name:
        value = row
        for part in name.split("."):
            value = value.get(part) if isinstance(value, dict) else None
    if value is None:
        raise BadRow(f"missing field {name!r}")
    return value


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
            try:
                yield number, json.loads(line)
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


def _parquet_rows(path: Path, columns: list[str]) -> Iterator[tuple[int, Any]]:
    """(row number, row dict) for each row; a missing column raises ValueError at once. A
    dotted field name reads its top-level column (a struct); `_field` walks into it."""
    import pyarrow.parquet as pq  # pyarrow is heavy: only Parquet users pay for it

    try:
        parquet = pq.ParquetFile(path)
    except Exception as e:  # pyarrow raises its own ArrowInvalid/OSError family
        raise ValueError(f"{path}: not a readable Parquet file ({e})") from None
    names = parquet.schema_arrow.names
    wanted = [c if c in names else c.split(".")[0] for c in columns]
    missing = [c for c, w in zip(columns, wanted, strict=True) if w not in names]
    if missing:
        raise ValueError(f"{path}: no column {missing[0]!r} (columns: {', '.join(names)})")
    number = 0
    for batch in parquet.iter_batches(columns=list(dict.fromkeys(wanted))):
        for row in batch.to_pylist():
            number += 1
            yield number, row
