"""Problem data: loading JSONL, JSON and Parquet problem sets into `Problem` records."""

from rstar2.data.problem_loader import (
    ANSWER_FIELDS,
    PROBLEM_FIELDS,
    BadRow,
    DataFormat,
    LoadedProblems,
    Problem,
    load_problems,
)

__all__ = [
    "ANSWER_FIELDS",
    "PROBLEM_FIELDS",
    "BadRow",
    "DataFormat",
    "LoadedProblems",
    "Problem",
    "load_problems",
]
