"""Problem data: loading JSONL, JSON and Parquet problem sets into `Problem` records."""

from rstar2.data.problem_loader import BadRow, LoadedProblems, Problem, load_problems

__all__ = ["BadRow", "LoadedProblems", "Problem", "load_problems"]
