"""Stage-0 SFT saves the demonstrations it trained on with the run (issue 29)."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from rstar2.train.config import load_train_config
from rstar2.train.runner import prepare_policy, sft_traces


def test_sft_saves_the_demonstrations_it_trained_on(tmp_path: Path) -> None:
    sets = ["sft.steps=2", "sft.train_problems=8", "sft.mistake_fraction=0.5"]
    cfg = load_train_config(None, quick=True, sets=sets)
    sft_dir = prepare_policy(cfg, tmp_path)
    demos = sft_dir / "demos.jsonl"
    lines = demos.read_text().splitlines()
    sft_info = json.loads((sft_dir / "sft.json").read_text())
    assert sft_info["skipped_steps"] == []  # none had a non-finite gradient
    info = sft_info["demos"]
    assert info == {"count": 8, "sha256": hashlib.sha256(demos.read_bytes()).hexdigest()}
    assert [json.loads(line)["messages"] for line in lines] == sft_traces(cfg)
    assert any("Fixing it" in m["content"] or "fix it" in m["content"]
               for line in lines for m in json.loads(line)["messages"])  # fmt: skip


def test_demonstrations_come_from_demo_task_and_rl_keeps_the_task() -> None:
    base = ["task.word_fraction=1.0", "task.word_style=story", "sft.train_problems=30",
            "demo_task.word_fraction=1.0", "demo_task.word_style=story"]  # fmt: skip
    own = load_train_config(None, quick=True, sets=base)  # demonstrations = [task]'s stories
    verbal = load_train_config(None, quick=True, sets=[*base, "demo_task.word_style=verbal"])
    assert verbal.task == own.task  # RL's problems are unchanged
    assert verbal.demonstration_task().word_style == "verbal"

    def questions(cfg) -> list[str]:
        return [next(m["content"] for m in t if m["role"] == "user") for t in sft_traces(cfg)]

    stories = questions(own)
    assert all("have now?" in q for q in stories)
    named = ("sum", "Add", "difference", "away", "product", "Multiply", "quotient",
             "whole times", "left over")  # fmt: skip
    assert all(any(w in q for w in named) for q in questions(verbal))
    assert not set(questions(verbal)) & set(stories)


def test_the_default_demonstrates_the_format_but_no_problem_rl_is_tested_on() -> None:
    """The embedded default (issue 29): a fixed set of 1,000 demonstrations of bare, templated
    and verbal problems and explicit steps; RL trains and is tested on stories, which no
    demonstration shows: the steps tell a story's shape with every operation named, never a
    story's verbs."""
    from rstar2.tasks import generate_problems

    cfg = load_train_config(None)
    traces = sft_traces(cfg)
    assert len(traces) == cfg.sft.train_problems == 1000
    demo_questions = [next(m["content"] for m in t if m["role"] == "user") for t in traces]
    # a story's events ("Then Ben loses 7.") and its // and % base clauses: never demonstrated
    events = r"Then [A-Z][a-z]+ (gets|finds|is given|gives away|loses|sells) \d"
    assert not any(re.search(events, q) for q in demo_questions)
    assert not any(w in q for q in demo_questions for w in ("shared equally", "into bags of"))
    assert any(q.startswith("Find") for q in demo_questions)  # bare expressions among them
    steps = [q for q in demo_questions if q.startswith("Start with")]
    assert len(steps) > 150 and any(q.count("Then ") == 2 for q in steps)
    assert cfg.task.word_style == "story" and cfg.task.word_fraction == 1.0
    rl_questions = [p.problem for p in generate_problems(cfg.task, "train")[:200]]
    assert all(
        re.search(events, q) or any(w in q for w in ("shared equally", "into bags of", "packs of"))
        for q in rl_questions
    )
    assert sum(bool(re.search(events, q)) for q in rl_questions) > 100
    assert not set(rl_questions) & set(demo_questions)
