"""The learner's side of one run: policy, optimizer and its schedule, and the checkpoints.

`RunState.open(cfg, run_dir, model_dir, resume)` loads the policy (from the SFT output, or the
latest checkpoint when resuming) and builds the optimizer and its warm-up schedule; a resumed
state restores them and the RNG states, and keeps the controller's part of the checkpoint in
`saved` (data cursor, stage, progress) for `Controller.start`. The synchronous pieces the shell
runs for the controller's commands live here, tested without sockets:

- `prompt_ids(problem)`: a problem's prompt tokens (cached), the controller's `encode`;
- `train_on(groups, step)`: RoC/GRPO selection on the step's rollouts grouped by prompt (its
  RNG seeded by (seed, step)), advantages, and the policy update;
- `save(step, controller_state)`: model, optimizer, schedule and RNG states with the
  controller's state, and the policy as a Hugging Face model directory (`model/`). (Sampling and RoC use seeds derived from (seed, step, ...), so no global
  RNG stream is consumed by RL; the RNG states are saved for anything that does.)
- `load_split(cfg, split)`: the training or held-out problems.

What it does not do: talk to other actors (`learner_actor.py`) or decide anything: which
problems, stages, evaluation and checkpoint cadence are the controller's (`controller.py`).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch

from rstar2.learner.checkpoint import (
    POLICY_DIR,
    Checkpoint,
    load_checkpoint,
    load_latest,
    rng_state,
    save_checkpoint,
    set_rng_state,
)
from rstar2.learner.policy import LearnerPolicy, load_policy
from rstar2.learner.rank_group import RankGroup
from rstar2.model.chat_format import render_prompt
from rstar2.model.saver import save_model_dir
from rstar2.problem import Problem
from rstar2.rl.resampling import build_training_batch
from rstar2.tasks.arithmetic import generate_problems
from rstar2.train.config import TrainConfig
from rstar2.train.learner_ranks import start_ranks
from rstar2.train.problem_files import load_problem_file
from rstar2.train.seeds import derive_seed
from rstar2.weights.buckets import WeightManifest, manifest_of
from rstar2.wire import TrajectoryResult

log = logging.getLogger(__name__)


def load_split(cfg: TrainConfig, split: str) -> list[Problem]:
    """Training or held-out problems: from the configured files, else the embedded task."""
    key = "data" if split == "train" else "heldout_data"
    if getattr(cfg, key):
        return load_problem_file(cfg, key)
    return [Problem(p.id, p.problem, p.answer) for p in generate_problems(cfg.task, split)]


class RunState:
    """The policy (on one or more learner ranks), its tokenizer and the run's checkpoints (see
    the module)."""

    def __init__(
        self,
        cfg: TrainConfig,
        run_dir: Path,
        policy: LearnerPolicy,
        tokenizer: Any,
        ranks: RankGroup | None = None,
        model_dir: Path | None = None,
    ) -> None:
        self.cfg = cfg
        self.run_dir = run_dir
        self.model_dir = model_dir
        """The model directory training started from: the layout of checkpoints' `model/`
        (None: checkpoints hold no model directory)."""
        self.policy = policy
        self.tokenizer = tokenizer
        self.ranks = ranks
        """The other learner ranks, driven from here (None: a one-rank learner)."""
        self.pad_id = policy.pad_id
        self.wall_before = 0.0
        """Wall time of the run's sessions before this one, up to the resumed checkpoint."""
        self.saved: dict[str, Any] | None = None
        """The controller's part of the checkpoint resumed from (None: a fresh start)."""
        self._prompt_cache: dict[str, list[int]] = {}
        self.last_trained: dict[str, float] = {}
        """The last `train_on`'s trained rollouts: their advantage by trajectory id."""

    @classmethod
    def open(
        cls,
        cfg: TrainConfig,
        run_dir: Path,
        model_dir: Path,
        resume: bool,
        checkpoint: Path | None = None,
    ) -> RunState:
        """Rank 0 of the learner: start the other ranks (`cluster.learner_ranks`), load the
        policy and, when resuming, restore the latest checkpoint (or `checkpoint`) on every
        rank."""
        ranks = start_ranks(cfg, model_dir)
        try:
            policy, tokenizer = load_policy(model_dir, cfg.learner, cfg.rl, local_rank=0)
            state = cls(cfg, run_dir, policy, tokenizer, ranks, model_dir)
            ck = None
            if resume:
                ck = load_checkpoint(checkpoint) if checkpoint else load_latest(run_dir)
            if ck is not None:
                state._restore(ck)
                log.info("resumed from %s (step %d)", ck.path, ck.step)
        except BaseException:
            if ranks is not None:
                ranks.close(abort=True)
            raise
        return state

    def close(self, abort: bool = False) -> None:
        """Stop the other learner ranks (if any); `abort` (the run failed, maybe in the middle
        of a collective) kills them instead of asking."""
        if self.ranks is not None:
            self.ranks.close(abort=abort)

    @property
    def model(self) -> torch.nn.Module:
        """Rank 0's model (its shard when the learner is sharded)."""
        return self.policy.model

    # --- commands --------------------------------------------------------------------------

    def _run(self, op: str, *args: Any) -> Any:
        """`policy.op(*args)` on every learner rank (rank 0 last, as the followers wait)."""
        if self.ranks is None:
            return getattr(self.policy, op)(*args)
        return self.ranks.run(self.policy, op, *args)

    def reset_optimizer(self) -> None:
        self._run("reset_optimizer")

    def weight_buckets(self, bucket_bytes: int) -> Iterator[dict[str, torch.Tensor]]:
        """The policy's full tensors, a bucket of about `bucket_bytes` at a time (gathered from
        every rank as the iterator advances: run it to its end)."""
        if self.ranks is None:
            yield from self.policy.weights(bucket_bytes)
            return
        ranks = self.ranks
        ranks.call("weights", bucket_bytes)
        buckets = self.policy.weights(bucket_bytes)
        while (bucket := ranks.guarded(lambda: next(buckets, None))) is not None:
            yield bucket

    def weight_manifest(self) -> WeightManifest:
        """Names, dtypes and full shapes of the tensors `weight_buckets` yields, in order,
        from this rank's (possibly sharded) state dict: no gathering."""
        return manifest_of(self.policy.model.state_dict())

    def full_weights(self) -> dict[str, torch.Tensor]:
        """The whole policy's tensors (gathered from every rank): the exported model."""
        return dict(self._run("full_weights"))

    def prompt_ids(self, problem: Problem) -> list[int]:
        # Keyed by the text, not the id: ids are only unique within a split (problem files
        # number their rows), and held-out and training problems share this cache.
        ids = self._prompt_cache.get(problem.problem)
        if ids is None:
            ids = render_prompt(self.tokenizer, problem.problem)
            self._prompt_cache[problem.problem] = ids
        return ids

    def train_on(self, groups: Sequence[Sequence[TrajectoryResult]], step: int) -> dict[str, float]:
        """Update the policy on step `step`'s rollouts, grouped by prompt in a fixed order."""
        rng = random.Random(derive_seed(self.cfg.seed, "roc", step))
        # RL and the learner read the trajectories; the log's advantages are keyed by the
        # results' ids, found by (prompt, sample): unique within a step
        trajs = [[r.trajectory for r in g] for g in groups]
        batch = build_training_batch(trajs, self.cfg.rl, rng)
        ids = {(r.trajectory.prompt_id, r.trajectory.sample): r.traj_id for g in groups for r in g}
        self.last_trained = {
            ids[t.prompt_id, t.sample]: a
            for t, a in zip(batch.rollouts, batch.advantages, strict=True)
        }
        metrics: dict[str, float] = self._run("update", batch)
        metrics.update(batch.counts())
        # the step's compute, in tokens: through the learner's forward and backward (every
        # pass over the batch), and through the engines' forward while rolling out (every
        # token of every rollout, prompt and tool responses included: an upper bound, since
        # prefix reuse skips some)
        trained = sum(len(r.token_ids) for r in batch.rollouts)
        metrics["trained_tokens"] = float(trained * self.cfg.learner.epochs)
        metrics["rollout_tokens"] = float(sum(len(t.token_ids) for g in trajs for t in g))
        return metrics

    # --- checkpoints -----------------------------------------------------------------------

    def save(self, step: int, controller_state: dict[str, Any]) -> Path:
        """Checkpoint `step`: model and optimizer through DCP from every rank (`policy/`), the
        schedule, RNG states and the controller's state ("stream", "stage", "progress") in
        `state.pt`."""
        state = {
            "schedule": self.policy.schedule.state_dict(),
            "rng": rng_state(),
            "learner_ranks": self.policy.world,
            **controller_state,
        }
        return save_checkpoint(
            self.run_dir,
            step,
            state,
            keep=self.cfg.keep_checkpoints,
            write_policy=lambda path: self._run("save", path),
            write_model=self._write_model if self.model_dir is not None else None,
        )

    def _write_model(self, path: Path) -> None:
        """The policy as a model directory (gathered from every rank, written by this one)."""
        assert self.model_dir is not None
        save_model_dir(self.full_weights(), self.model_dir, path)

    def _restore(self, ck: Checkpoint) -> None:
        state = ck.state
        if "model" in state:  # written before checkpoints went through DCP: one rank only
            if self.ranks is not None:
                raise ValueError(
                    f"{ck.path} predates sharded checkpoints; resume it with one learner rank"
                )
            self.policy.model.load_state_dict(state["model"])
            self.policy.optimizer.load_state_dict(state["optimizer"])
            self.policy.schedule.load_state_dict(state["schedule"])
        else:
            self._run("load", ck.path / POLICY_DIR, state["schedule"])
        set_rng_state(state["rng"])
        self.wall_before = float(state.get("wall_s", 0.0))
        self.saved = {k: state[k] for k in ("stream", "stage", "progress")}
