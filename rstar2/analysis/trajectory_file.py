"""Reading recorded trajectories (token ids and loss masks) for `rstar2 analyze`.

Two JSONL sources, one object per line, carry what the analysis needs (`token_ids` and
`loss_mask`, one bit per token, 1 where the model sampled the token):

- `rstar2 eval --out FILE` (every line; `logprobs` too, the sampling logprobs);
- a run's `RUN/rollout_trace.jsonl` written with `rollout_trace_tokens = true` (the RL
  trajectories of every step; `step` selects one, the default is all of them).

A record without a generated token (a prompt too long for the context, an abort before the
first token) has nothing to analyse and is skipped (counted). A line that is not such a record
is a `ValueError` naming the file and line.

What it does not do: tokenise or score anything.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class RecordedTrajectory:
    """The tokens of one recorded trajectory."""

    name: str
    """Its problem id and sample ("7/2"), or its trace id."""
    token_ids: list[int]
    loss_mask: list[int]
    logprobs: list[float] | None
    """The logprob each token had when it was sampled (None: not recorded)."""


@dataclass(frozen=True)
class LoadedTrajectories:
    trajectories: list[RecordedTrajectory]
    skipped: int
    """Records with no generated token."""


def load_trajectories(
    path: str | Path, limit: int | None = None, step: int | None = None
) -> LoadedTrajectories:
    """The first `limit` (None: all) trajectories of `path` with a generated token, only those
    of RL step `step` when given (see the module docstring)."""
    path = Path(path)
    out: list[RecordedTrajectory] = []
    skipped = 0
    with path.open() as lines:
        for n, line in enumerate(lines, start=1):
            if limit is not None and len(out) >= limit:
                break
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{n}: not JSON ({e.msg})") from None
            if step is not None and (not isinstance(obj, dict) or obj.get("step") != step):
                continue
            record = _record(obj, f"{path}:{n}")
            if any(record.loss_mask):
                out.append(record)
            else:
                skipped += 1
    return LoadedTrajectories(out, skipped)


def _record(obj: object, where: str) -> RecordedTrajectory:
    if not isinstance(obj, dict) or "token_ids" not in obj or "loss_mask" not in obj:
        raise ValueError(
            f"{where}: not a trajectory with token_ids and loss_mask (write trajectories with "
            f"`rstar2 eval --out FILE`, or train with rollout_trace_tokens=true)"
        )
    tokens, mask, logprobs = obj["token_ids"], obj["loss_mask"], obj.get("logprobs")
    if not _ints(tokens) or not _ints(mask) or any(b not in (0, 1) for b in mask):
        raise ValueError(f"{where}: token_ids must be integers and loss_mask 0/1 bits")
    if len(tokens) != len(mask) or not tokens:
        raise ValueError(f"{where}: {len(tokens)} token_ids but {len(mask)} loss_mask bits")
    if mask[0]:
        raise ValueError(f"{where}: the first token is marked generated (no prompt before it)")
    if logprobs is not None and len(logprobs) != len(tokens):
        logprobs = None  # not the per-token list this reader knows: ignore it
    name = obj.get("traj_id") or f"{obj.get('prompt_id', '?')}/{obj.get('sample', 0)}"
    return RecordedTrajectory(str(name), list(tokens), list(mask), logprobs)


def _ints(values: object) -> bool:
    return isinstance(values, list) and all(
        isinstance(v, int) and not isinstance(v, bool) for v in values
    )
