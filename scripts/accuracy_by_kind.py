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
import re
import sys
from collections import Counter, defaultdict
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


def call_shape(problem: str, conversation: list[dict]) -> str:
    """The first call's code with each number named by its place in the problem (`print(a * b
    - c)`), `N` for a number the problem does not hold; `<no call>` or `<invalid call>`."""
    first = next((t for t in conversation if t.get("role") == "assistant" and t.get("call")), None)
    if first is None:
        return "<no call>"
    if "code" not in first:
        return "<invalid call>"
    names: dict[str, str] = {}
    for number in re.findall(r"\d+", problem):
        names.setdefault(number, chr(ord("a") + len(names)))
    return re.sub(r"\d+", lambda m: names.get(m.group(0), "N"), first["code"].strip())


def call_shapes(rows: list[dict], source: str, step: int | None) -> dict[str, Counter[str]]:
    """{kind: Counter of first-call shapes} at evaluation `step` of `source` (None: the first)."""
    steps = sorted({int(r["step"]) for r in rows if r.get("source") == source})
    if not steps:
        return {}
    at = steps[0] if step is None else step
    shapes: dict[str, Counter[str]] = defaultdict(Counter)
    for r in rows:
        if r.get("source") == source and int(r["step"]) == at:
            kind = story_kind(r["problem"]) or "not a story"
            shapes[kind][call_shape(r["problem"], r.get("conversation", []))] += 1
    return dict(sorted(shapes.items()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", help="a run directory with trajectories.jsonl")
    parser.add_argument("--source", choices=("validation", "test"), default="validation")
    parser.add_argument("--calls", action="store_true", help="the first calls' shapes by kind")
    parser.add_argument("--step", type=int, help="with --calls: the evaluation's step")
    args = parser.parse_args(argv)
    path = Path(args.run) / "trajectories.jsonl"
    if not path.is_file():
        print(f"accuracy_by_kind: no {path} (the run records evaluations there)", file=sys.stderr)
        return 2
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if args.calls:
        shapes = call_shapes(rows, args.source, args.step)
        if not shapes:
            print(f"accuracy_by_kind: no {args.source} evaluation at that step in {path}",
                  file=sys.stderr)  # fmt: skip
            return 2
        print(f"{args.source}: the first call's code by kind of story (share of samples)")
        for kind, counts in shapes.items():
            total = sum(counts.values())
            top = ", ".join(f"`{c}` {100 * n / total:.0f}%" for c, n in counts.most_common(4))
            print(f"- {kind} ({total} samples): {top}")
        return 0
    table = by_kind(rows, args.source)
    if not table:
        print(f"accuracy_by_kind: no {args.source} evaluation in {path}", file=sys.stderr)
        return 2
    print(f"{args.source}: pass@1 / pass@k (%) by kind of story, per evaluation")
    print(format_table(table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
