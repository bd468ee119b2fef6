"""What `rstar2 train --resume PATH` continues, and what it may change.

`locate(path)` takes a run directory or one of its checkpoint directories
(`RUN/checkpoints/step-N`): the run directory, and the checkpoint to continue from (None: the
latest). `resumed_config(run_dir, sets, done_step)` is the run's saved config with the
`--set` overrides a resumed run may take:

- how the run is deployed: `graph.*` (processes, backend, threads), `cluster.learner_ranks` (the
  checkpoint is a torch.distributed.checkpoint, readable by any rank count),
  `cluster.weight_bucket_mb`;
- cadence and bookkeeping: `eval_every`, `checkpoint_every`, `keep_checkpoints`;
- more training: `stages.N.steps` (not below the steps already done) and new stages appended
  (`stages.N={...}` one past the last).

Everything else (the model, data, algorithm, RL and learner hyperparameters, seed, sampling)
defines what the steps already done computed; changing it mid-run would make the run a mix of
two experiments, so it is refused with an error naming the key (start a new run instead).

What it does not do: restore state (`rstar2.train.run_state`) or run anything.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rstar2.config import ConfigError, from_dict
from rstar2.run_layout import is_checkpoint
from rstar2.train.config import TrainConfig, apply_set, parse_set

MAY_CHANGE = (
    "graph.",
    "cluster.learner_ranks",
    "cluster.weight_bucket_mb",
    "rl.max_staleness",
    "eval_every",
    "checkpoint_every",
    "keep_checkpoints",
)
"""`--set` keys (or prefixes) a resumed run accepts, besides `stages` (see the module)."""


def locate(path: str | Path) -> tuple[Path, Path | None]:
    """(run directory, checkpoint to continue from or None for the latest) of `--resume PATH`."""
    path = Path(path)
    if not path.exists():
        raise ConfigError("--resume", str(path), "an existing run or checkpoint directory")
    if is_checkpoint(path):
        return path.parent.parent, path
    if not (path / "config.json").is_file():
        raise ConfigError("--resume", str(path), "a run directory (it has no config.json)")
    return path, None


def may_change(keys: list[str]) -> bool:
    dotted = ".".join(keys)
    if keys[0] == "stages":
        return len(keys) == 2 or (len(keys) == 3 and keys[2] == "steps")
    return any(dotted == k or (k.endswith(".") and dotted.startswith(k)) for k in MAY_CHANGE)


def resumed_config(run_dir: Path, sets: list[str], done_step: int) -> TrainConfig:
    """The run's saved config with `sets` applied, each checked against what may change;
    `done_step` is the last RL step of the checkpoint resumed from."""
    data: dict[str, Any] = json.loads((run_dir / "config.json").read_text())
    old_stages = [dict(s) for s in data.get("stages", [])]
    for item in sets:
        keys, value = parse_set(item)
        if not may_change(keys):
            raise ConfigError(
                "--set " + ".".join(keys),
                value,
                "a key a resumed run may change (graph.*, cluster.learner_ranks, "
                "cluster.weight_bucket_mb, rl.max_staleness, eval_every, checkpoint_every, "
                "keep_checkpoints, "
                "stages.N.steps, a new stage); start a new run to change the rest",
            )
        if keys[0] == "stages" and len(keys) == 2 and int(keys[1]) < len(old_stages):
            raise ConfigError(
                "--set " + ".".join(keys), value, "stages.N.steps, or a new stage after the last"
            )
        apply_set(data, keys, value)
    cfg = from_dict(TrainConfig, data)
    cfg.validate()
    end = 0
    for i, old in enumerate(old_stages):
        end += int(old.get("steps", 0))
        if end < done_step and cfg.stages[i].steps != old.get("steps"):
            raise ConfigError(
                f"stages.{i}.steps", cfg.stages[i].steps, f"{old.get('steps')}: the stage is done"
            )
    if cfg.total_steps < done_step:
        raise ConfigError(
            "stages", [s.steps for s in cfg.stages], f"at least the {done_step} steps already done"
        )
    return cfg
