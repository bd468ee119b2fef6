"""The learner's state for one run: policy, optimizer, data cursor, stage, and its checkpoints.

`RunState.open(cfg, run_dir, model_dir, resume)` loads the policy (from the SFT output, or the
latest checkpoint when resuming), builds the optimizer and its warm-up schedule, the problem
stream and the held-out set. The synchronous pieces of an RL step live here so they are tested
without sockets:

- `rollout_tasks(problems, step, kind, ...)`: the step's `RolloutTask`s, each with a seed
  derived from (run seed, kind, step, prompt, sample), so sampling never depends on timing;
- `train_on(results)`: group by prompt, RoC/GRPO selection (its RNG seeded by (seed, step)),
  advantages, and the policy update;
- `save()` / resume: model, optimizer, schedule, data cursor, RNG states, stage progress and
  summary values. (Sampling and RoC use seeds derived from (seed, step, ...), so no global RNG
  stream is consumed by RL; the RNG states are saved for anything that does.)

What it does not do: talk to other actors (`learner_actor.py`) or decide stage order (the actor
follows `cfg.stages`).
"""

from __future__ import annotations

import hashlib
import logging
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from rstar2.config import from_dict
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
from rstar2.train.problem_stream import ProblemStream, TrainProblem
from rstar2.wire import RolloutTask, TrajectoryResult

log = logging.getLogger(__name__)


def derive_seed(*parts: object) -> int:
    """A 31-bit seed from any parts (stable across processes and Python versions)."""
    text = ":".join(str(p) for p in parts).encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=4).digest(), "little") & 0x7FFFFFFF


def load_split(cfg: TrainConfig, split: str) -> list[TrainProblem]:
    """Training or held-out problems: from the configured files, else the embedded task."""
    path = cfg.data if split == "train" else cfg.heldout_data
    if path:
        loaded = load_problems(path)
        return [TrainProblem(p.id, p.problem, p.answer) for p in loaded.problems]
    return [TrainProblem(p.id, p.problem, p.answer) for p in generate_problems(cfg.task, split)]


@dataclass
class Progress:
    """Where the run is; saved in every checkpoint."""

    step: int = 0
    stage_started: int = -1
    sft_accuracy: float | None = None
    last_accuracy: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class RunState:
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
        self.stream = ProblemStream(load_split(cfg, "train"), cfg.seed)
        self.heldout = load_split(cfg, "heldout")[: cfg.heldout_problems]
        self.progress = Progress()
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

    # --- stages ----------------------------------------------------------------------------

    def stage_at(self, step: int) -> int:
        """Index of the stage that RL step `step` (1-based) belongs to."""
        end = 0
        for i, stage in enumerate(self.cfg.stages):
            end += stage.steps
            if step <= end:
                return i
        return len(self.cfg.stages) - 1

    def reset_optimizer(self) -> None:
        self.optimizer = make_optimizer(self.model, self.cfg.learner)
        self.schedule = make_lr_schedule(self.optimizer, self.cfg.learner)

    # --- tasks and training ----------------------------------------------------------------

    def prompt_ids(self, problem: TrainProblem) -> list[int]:
        ids = self._prompt_cache.get(problem.id)
        if ids is None:
            ids = render_prompt(self.tokenizer, problem.problem)
            self._prompt_cache[problem.id] = ids
        return ids

    def rollout_tasks(
        self,
        problems: Sequence[TrainProblem],
        step: int,
        kind: str,
        samples: int,
        temperature: float,
        max_response_tokens: int = 0,
        max_turns: int = 0,
    ) -> list[RolloutTask]:
        tasks = []
        for i, p in enumerate(problems):
            for s in range(samples):
                tasks.append(
                    RolloutTask(
                        traj_id=f"{kind}/{step}/{i}/{s}",
                        prompt_id=f"{kind}/{step}/{i}",
                        sample=s,
                        step=step,
                        prompt_ids=self.prompt_ids(p),
                        answer=p.answer,
                        seed=derive_seed(self.cfg.seed, kind, step, i, s),
                        kind=kind,
                        temperature=temperature,
                        max_response_tokens=max_response_tokens,
                        max_turns=max_turns,
                    )
                )
        return tasks

    def _seed(self, kind: str, step: int, prompt: int, sample: int) -> int:
        """Training samples get fresh seeds every step; held-out evaluation reuses the same
        seeds at every evaluation (common random numbers), so accuracy changes between
        evaluations come from the policy, not from the sampling noise."""
        if kind == "eval":
            return derive_seed(self.cfg.seed, kind, prompt, sample)
        return derive_seed(self.cfg.seed, kind, step, prompt, sample)

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

    def save(self) -> Path:
        p = self.progress
        state = {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "schedule": self.schedule.state_dict(),
            "stream": self.stream.state(),
            "rng": rng_state(),
            "stage": self.cfg.stages[self.stage_at(max(p.step, 1))].name,
            "progress": {
                "step": p.step,
                "stage_started": p.stage_started,
                "sft_accuracy": p.sft_accuracy,
                "last_accuracy": p.last_accuracy,
                "extra": p.extra,
            },
        }
        return save_checkpoint(self.run_dir, p.step, state, keep=self.cfg.keep_checkpoints)

    def _restore(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.schedule.load_state_dict(state["schedule"])
        self.stream.load_state(state["stream"])
        set_rng_state(state["rng"])
        self.progress = from_dict(Progress, state["progress"])


def group_results(results: Sequence[TrajectoryResult]) -> list[list[TrajectoryResult]]:
    """Rollouts grouped by prompt, groups in prompt order, each sorted by sample: a fixed
    order whatever order the trajectories finished in."""
    groups: dict[str, list[TrajectoryResult]] = {}
    for r in results:
        groups.setdefault(r.prompt_id, []).append(r)
    ordered = sorted(groups.items(), key=lambda kv: int(kv[0].rsplit("/", 1)[1]))
    return [sorted(g, key=lambda r: r.sample) for _, g in ordered]
