"""Accuracy of a run's evaluations by kind of story: which operations the policy reads.

A run's `trajectories.jsonl` holds every evaluation rollout (`source` "validation" or "test",
`step`, `problem`, `reward`). For each evaluation this groups the problems by
`rstar2.tasks.arithmetic.story_kind` (the base clause's expression and the event count) and
prints, per kind, the problems, pass@1 (avg over samples) and pass@k (a correct sample among
the k). Where RL gains nothing (a kind at 0% pass@k after SFT stays there), the policy never
samples a solution for RL to reinforce.

    .venv/bin/python scripts/accuracy_by_kind.py RUN [--source test]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

from rstar2.tasks.arithmetic import story_kind

Evaluation = tuple[str, int]
"""(source, step) of one evaluation."""


def by_kind(rows: list[dict], source: str) -> dict[Evaluation, dict[str, tuple[int, float, float]]]:
    """{(source, step): {kind: (problems, pass@1, pass@k)}} of the `source` evaluations."""
    rewards: dict[Evaluation, dict[str, dict[str, list[float]]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(list))
    )
    for r in rows:
        if r.get("source") != source:
            continue
        kind = story_kind(r["problem"]) or "not a story"
        rewards[(source, int(r["step"]))][kind][r["problem"]].append(float(r["reward"] > 0))
    out: dict[Evaluation, dict[str, tuple[int, float, float]]] = {}
    for evaluation, kinds in sorted(rewards.items()):
        out[evaluation] = {}
        for kind, problems in sorted(kinds.items()):
            n = len(problems)
            pass1 = sum(sum(v) / len(v) for v in problems.values()) / n
            passk = sum(max(v) for v in problems.values()) / n
            out[evaluation][kind] = (n, pass1, passk)
    return out


def format_table(table: dict[Evaluation, dict[str, tuple[int, float, float]]]) -> str:
    """One row per kind, one `pass@1 / pass@k` column per evaluation (percent)."""
    evaluations = list(table)
    kinds = sorted({k for row in table.values() for k in row})
    head = ["kind", "problems"] + [f"step {step}" for _, step in evaluations]
    lines = [" | ".join(head), " | ".join("---" for _ in head)]
    for kind in kinds:
        counts = {table[e][kind][0] for e in evaluations if kind in table[e]}
        cells = [kind, "/".join(str(c) for c in sorted(counts))]
        for e in evaluations:
            n_p1_pk = table[e].get(kind)
            cells.append(
                "-" if n_p1_pk is None else f"{100 * n_p1_pk[1]:.0f} / {100 * n_p1_pk[2]:.0f}"
            )
        lines.append(" | ".join(cells))
    return "\n".join(f"| {line} |" for line in lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", help="a run directory with trajectories.jsonl")
    parser.add_argument("--source", choices=("validation", "test"), default="validation")
    args = parser.parse_args(argv)
    path = Path(args.run) / "trajectories.jsonl"
    if not path.is_file():
        print(f"accuracy_by_kind: no {path} (the run records evaluations there)", file=sys.stderr)
        return 2
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    table = by_kind(rows, args.source)
    if not table:
        print(f"accuracy_by_kind: no {args.source} evaluation in {path}", file=sys.stderr)
        return 2
    print(f"{args.source}: pass@1 / pass@k (%) by kind of story, per evaluation")
    print(format_table(table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
