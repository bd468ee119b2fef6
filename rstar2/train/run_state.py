"""The learner's side of one run: policy, optimizer and its schedule, and the checkpoints.

`RunState.open(cfg, run_dir, model_dir, resume)` loads the policy (from the SFT output, or the
latest checkpoint when resuming) and builds the optimizer and its warm-up schedule; a resumed
state restores them and the RNG states, and keeps the controller's part of the checkpoint in
`saved` (data cursor, stage, progress) for `Controller.start`. The synchronous pieces the shell
runs for the controller's commands live here, tested without sockets:

- `prompt_ids(problem)`: a problem's prompt tokens (cached), the controller's `encode`;
- `train_on(results, step)`: group by prompt, RoC/GRPO selection (its RNG seeded by (seed,
  step)), advantages, and the policy update;
- `save(step, controller_state)`: model, optimizer, schedule and RNG states with the
  controller's state. (Sampling and RoC use seeds derived from (seed, step, ...), so no global
  RNG stream is consumed by RL; the RNG states are saved for anything that does.)
- `load_split(cfg, split)`: the training or held-out problems.

What it does not do: talk to other actors (`learner_actor.py`) or decide anything: which
problems, stages, evaluation and checkpoint cadence are the controller's (`controller.py`).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from rstar2.data import load_problems
from rstar2.learner.checkpoint import load_latest, rng_state, save_checkpoint, set_rng_state
from rstar2.learner.policy_update import (
    make_lr_schedule,
    make_optimizer,
    update_policy,
)
from rstar2.model.chat_format import render_prompt
from rstar2.model.loader import load_model
from rstar2.rl import build_training_batch
from rstar2.tasks.arithmetic import generate_problems
from rstar2.train.config import TrainConfig
from rstar2.train.controller import derive_seed, group_results
from rstar2.train.problem_stream import TrainProblem
from rstar2.wire import TrajectoryResult

log = logging.getLogger(__name__)


def load_split(cfg: TrainConfig, split: str) -> list[TrainProblem]:
    """Training or held-out problems: from the configured files, else the embedded task."""
    path = cfg.data if split == "train" else cfg.heldout_data
    if path:
        loaded = load_problems(path)
        return [TrainProblem(p.id, p.problem, p.answer) for p in loaded.problems]
    return [TrainProblem(p.id, p.problem, p.answer) for p in generate_problems(cfg.task, split)]


class RunState:
    """The policy, its tokenizer, the optimizer and schedule of one run (see the module)."""

    def __init__(
        self, cfg: TrainConfig, run_dir: Path, model: torch.nn.Module, tokenizer: Any
    ) -> None:
        self.cfg = cfg
        self.run_dir = run_dir
        self.model = model
        self.tokenizer = tokenizer
        self.pad_id = int(tokenizer.pad_token_id or 0)
        self.optimizer = make_optimizer(model, cfg.learner)
        self.schedule = make_lr_schedule(self.optimizer, cfg.learner)
        self.saved: dict[str, Any] | None = None
        """The controller's part of the checkpoint resumed from (None: a fresh start)."""
        self._prompt_cache: dict[str, list[int]] = {}

    @classmethod
    def open(cls, cfg: TrainConfig, run_dir: Path, model_dir: Path, resume: bool) -> RunState:
        model, tokenizer = load_model(model_dir)
        state = cls(cfg, run_dir, model, tokenizer)
        ck = load_latest(run_dir) if resume else None
        if ck is not None:
            state._restore(ck.state)
            log.info("resumed from %s (step %d)", ck.path, ck.step)
        return state

    # --- commands --------------------------------------------------------------------------

    def reset_optimizer(self) -> None:
        self.optimizer = make_optimizer(self.model, self.cfg.learner)
        self.schedule = make_lr_schedule(self.optimizer, self.cfg.learner)

    def prompt_ids(self, problem: TrainProblem) -> list[int]:
        ids = self._prompt_cache.get(problem.id)
        if ids is None:
            ids = render_prompt(self.tokenizer, problem.problem)
            self._prompt_cache[problem.id] = ids
        return ids

    def train_on(self, results: Sequence[TrajectoryResult], step: int) -> dict[str, float]:
        groups = group_results(results)
        rng = random.Random(derive_seed(self.cfg.seed, "roc", step))
        batch = build_training_batch(groups, self.cfg.rl, rng)
        metrics = update_policy(
            self.model,
            self.optimizer,
            self.schedule,
            batch,
            self.cfg.learner,
            self.cfg.rl,
            self.pad_id,
        )
        metrics.update(
            groups_kept=batch.groups_kept,
            groups_dropped=batch.groups_dropped,
            groups_all_correct=batch.groups_all_correct,
            trained_rollouts=len(batch.rollouts),
        )
        return metrics

    # --- checkpoints -----------------------------------------------------------------------

    def save(self, step: int, controller_state: dict[str, Any]) -> Path:
        """Checkpoint `step`: the learner's state and the controller's ("stream", "stage",
        "progress")."""
        state = {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "schedule": self.schedule.state_dict(),
            "rng": rng_state(),
            **controller_state,
        }
        return save_checkpoint(self.run_dir, step, state, keep=self.cfg.keep_checkpoints)

    def _restore(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.schedule.load_state_dict(state["schedule"])
        set_rng_state(state["rng"])
        self.saved = {k: state[k] for k in ("stream", "stage", "progress")}
