"""What `rstar2 view` shows, read from disk: a run directory or a trajectory file.

`open_source(path)` checks the path at once (one-line `UsageError`s: missing, not a run
directory, a config that does not parse, a file that is not trajectory JSONL) and returns a
`Source`:

- a run directory (`rstar2 train --run-dir RUN`): `config.json`, `metrics.jsonl`, `summary.json`
  (present once the run finished) and `trajectories.jsonl` (`rstar2.train.trajectory_log`);
- a trajectory file: `rstar2 eval --out FILE`, or a run's `trajectories.jsonl` on its own.

Its rollouts fall into *sets*, one per (source, step, stage) of the log (a training step, an
evaluation) or one per eval file; `Source.refresh()` reads the lines appended since the last
call (whole lines only: a run in progress may be writing the last one), so the pages follow a
running run. Only each line's offset and a few counts stay in memory; a set's rows and a
rollout are read back from the file when asked for.

What it does not do: serve anything (`app.py`), or write any file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rstar2.config import UsageError
from rstar2.finish_reason import TRUNCATED_REASONS
from rstar2.reward.extraction import extract_answer
from rstar2.rollout.conversation import conversation

TRAJECTORIES = "trajectories.jsonl"
"""A run directory's trajectory log (`rstar2.train.trajectory_log.TRAJECTORY_FILE`)."""
STAGE_KEYS = ("name", "steps", "max_response_tokens", "max_turns", "filter_solved")
"""The stage settings the run page lists."""


@dataclass
class RolloutSet:
    """The rollouts of one training step, one evaluation, or one eval file."""

    id: str
    source: str
    """"train", "validation", "test" or "eval" (an eval file)."""
    step: int
    stage: str
    offsets: list[int] = field(default_factory=list)
    """Where each of its lines starts in the file."""
    correct: int = 0
    failed_calls: int = 0
    """Rollouts with at least one failed tool call."""

    @property
    def label(self) -> str:
        if self.source == "train":
            return f"step {self.step} ({self.stage})"
        if self.source == "eval":
            return self.stage
        return f"{self.source} at step {self.step} ({self.stage})"

    def summary(self) -> dict[str, Any]:
        n = len(self.offsets)
        return {
            "id": self.id,
            "label": self.label,
            "source": self.source,
            "step": self.step,
            "stage": self.stage,
            "rollouts": n,
            "correct": self.correct,
            "accuracy": self.correct / n if n else 0.0,
            "with_failed_calls": self.failed_calls,
        }


class Source:
    """One path given to `rstar2 view`: a run directory or a trajectory file (see the module)."""

    def __init__(self, index: int, path: Path, run_dir: Path | None, log: Path) -> None:
        self.index = index
        self.path = path
        self.run_dir = run_dir
        """The run directory (None: a bare trajectory file)."""
        self.log = log
        self.sets: dict[str, RolloutSet] = {}
        self._by_key: dict[tuple[str, int, str], RolloutSet] = {}
        self._read_to = 0

    # --- reading -----------------------------------------------------------------------------

    def refresh(self) -> None:
        """Index the whole lines appended to the trajectory file since the last call."""
        if not self.log.is_file():
            return
        if self.log.stat().st_size < self._read_to:  # rewritten (a resumed or restarted run)
            self.sets, self._by_key, self._read_to = {}, {}, 0
        with self.log.open("rb") as f:
            f.seek(self._read_to)
            chunk = f.read()
        end = chunk.rfind(b"\n") + 1  # a line still being written waits for its newline
        pos = self._read_to
        for line in chunk[:end].splitlines(keepends=True):
            if line.strip():
                self._index(json.loads(line), pos)
            pos += len(line)
        self._read_to += end

    def _index(self, record: dict[str, Any], offset: int) -> None:
        if self.run_dir is None and record.get("source", "eval") == "eval":
            key = ("eval", 0, self.path.name)
        else:
            key = (str(record.get("source")), int(record.get("step", 0)), str(record.get("stage")))
        s = self._by_key.get(key)
        if s is None:
            s = RolloutSet(f"{self.index}.{len(self.sets)}", *key)
            self._by_key[key] = s
            self.sets[s.id] = s
        s.offsets.append(offset)
        s.correct += float(record.get("reward", 0.0)) > 0
        s.failed_calls += failed_calls(record) > 0

    def _read(self, offsets: list[int]) -> list[dict[str, Any]]:
        out = []
        with self.log.open("rb") as f:
            for offset in offsets:
                f.seek(offset)
                out.append(complete(json.loads(f.readline())))
        return out

    def records(self, set_id: str) -> list[dict[str, Any]]:
        return self._read(self.rollout_set(set_id).offsets)

    def rollout_set(self, set_id: str) -> RolloutSet:
        s = self.sets.get(set_id)
        if s is None:
            raise KeyError(set_id)
        return s

    # --- what the pages get -------------------------------------------------------------------

    def info(self) -> dict[str, Any]:
        """The run page's data: config, stages, status, metrics rows, summary, sets."""
        out: dict[str, Any] = {
            "index": self.index,
            "path": str(self.path),
            "kind": "file" if self.run_dir is None else "run",
            "sets": [s.summary() for s in self.sets.values()],
        }
        if self.run_dir is None:
            out["status"] = "file"
            return out
        config = read_json(self.run_dir / "config.json")
        summary_path = self.run_dir / "summary.json"
        out["config"] = config
        out["stages"] = [
            {k: stage.get(k) for k in STAGE_KEYS} for stage in config.get("stages", [])
        ]
        out["total_steps"] = sum(int(stage.get("steps", 0)) for stage in config.get("stages", []))
        out["metrics"] = read_lines(self.run_dir / "metrics.jsonl")
        out["summary"] = read_json(summary_path) if summary_path.is_file() else None
        out["status"] = "finished" if summary_path.is_file() else "running"
        return out

    def step_metrics(self, set_id: str) -> dict[str, Any] | None:
        """A training step's row of `metrics.jsonl` (None: not a training step, or no row)."""
        s = self.rollout_set(set_id)
        if self.run_dir is None or s.source != "train":
            return None
        rows = read_lines(self.run_dir / "metrics.jsonl")
        return next(
            (r for r in rows if r.get("step") == s.step and r.get("stage") == s.stage), None
        )

    def rows(self, set_id: str) -> list[dict[str, Any]]:
        """A set's rollouts as table rows (no conversation text)."""
        return [row(i, r) for i, r in enumerate(self.records(set_id))]

    def rollout(self, set_id: str, i: int) -> dict[str, Any]:
        """Rollout `i` of a set, and the rows of its group (the other samples of its prompt)."""
        s = self.rollout_set(set_id)
        if not 0 <= i < len(s.offsets):
            raise KeyError(i)
        record = self._read([s.offsets[i]])[0]
        rows = self.rows(set_id)
        group = [r for r in rows if r["group"] == row(i, record)["group"]]
        return {"set": s.summary(), "index": i, "record": record, "group": group}


def failed_calls(record: dict[str, Any]) -> int:
    return int(record.get("tool_errors", 0)) + int(record.get("tool_timeouts", 0))


def complete(record: dict[str, Any]) -> dict[str, Any]:
    """A record with the fields the pages use, computed for files written before they were
    recorded (an older `rstar2 eval` file has `response_text` only)."""
    text = str(record.get("response_text", ""))
    if "conversation" not in record:
        record["conversation"] = conversation(text)
    if "answer" not in record:
        record["answer"] = extract_answer(text)
    return record


def row(i: int, r: dict[str, Any]) -> dict[str, Any]:
    """The table row of record `r`, rollout `i` of its set."""
    group = r.get("group", r.get("prompt_id", ""))
    reward = float(r.get("reward", 0.0))
    return {
        "i": i,
        "group": group if isinstance(group, int) else str(group),
        "sample": r.get("sample", 0),
        "problem": str(r.get("problem") or r.get("prompt_id", "")),
        "reference": r.get("reference", ""),
        "answer": r.get("answer"),
        "reward": reward,
        "correct": reward > 0,
        "finish_reason": r.get("finish_reason", ""),
        "truncated": r.get("finish_reason") in TRUNCATED_REASONS,
        "turns": r.get("turns", 0),
        "tool_calls": r.get("tool_calls", 0),
        "failed_calls": failed_calls(r),
        "response_tokens": r.get("response_tokens", 0),
        "kept": r.get("kept"),
    }


def compare(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The problems both sets have (matched by text, else by id), each with its rows on
    either side, in the order of `a`."""
    sides: dict[str, dict[str, Any]] = {}
    for name, rows in (("a", a), ("b", b)):
        for r in rows:
            entry = sides.setdefault(
                r["problem"],
                {"problem": r["problem"], "reference": r["reference"], "a": [], "b": []},
            )
            entry[name].append(r)
    out = []
    for entry in sides.values():
        if entry["a"] and entry["b"]:
            for side in ("a", "b"):
                rows = entry[side]
                entry[f"{side}_accuracy"] = sum(r["correct"] for r in rows) / len(rows)
            out.append(entry)
    return out


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object file; one that does not parse (being written) is a `UsageError`."""
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise UsageError(
            f"{path}: not JSON ({e.msg}): a run directory still being written?"
        ) from None
    if not isinstance(data, dict):
        raise UsageError(f"{path}: not a JSON object")
    return data


def read_lines(path: Path) -> list[dict[str, Any]]:
    """The whole lines of a JSONL file (none if it is missing; a last line still being
    written is left out)."""
    if not path.is_file():
        return []
    text = path.read_text()
    return [json.loads(line) for line in text[: text.rfind("\n") + 1].splitlines() if line.strip()]


def open_source(index: int, path: Path) -> Source:
    """A path given to `rstar2 view`, checked (see the module docstring) and read."""
    if not path.exists():
        raise UsageError(f"{path}: no such run directory or trajectory file")
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise UsageError(
                f"{path}: not a run directory (no config.json: not started yet, or not a run)"
            )
        read_json(path / "config.json")
        source = Source(index, path, path, path / TRAJECTORIES)
    else:
        check_trajectory_file(path)
        source = Source(index, path, None, path)
    source.refresh()
    return source


def check_trajectory_file(path: Path) -> None:
    """The first line of a trajectory file is a trajectory object (`UsageError` if not)."""
    with path.open("rb") as f:
        first = f.readline()
    try:
        record = json.loads(first) if first.strip() else {}
    except (json.JSONDecodeError, UnicodeDecodeError):
        record = None
    if not isinstance(record, dict) or not (
        first.strip() == b"" or "response_text" in record or "conversation" in record
    ):
        raise UsageError(
            f"{path}: not a trajectory file (JSON lines from `rstar2 eval --out` or a run's "
            f"{TRAJECTORIES})"
        )
