"""The RL controller: a synchronous state machine from events to commands.

`Controller` decides everything an RL run does after SFT, in the order the run does it; its
shell (`learner_actor.py`) executes the commands (`run_commands.py`) and feeds each reply back
as an event:

    start(resume, saved)                              -> [OpenRun, PushWeights(step)]
    weights_pushed(version, metrics, started, finished)   a PushWeights is done
    rollouts_done(step, results, started, finished)       a RollOut came back, scored
    update_done(step, metrics, started, finished)         an Update is done

A run: push the starting policy; evaluate it on the held-out set unless the checkpoint resumed
from did (the "sft" row); then for each RL step `1..total_steps`: start the stage when the
step is its first (a stage's solved-filter probe, then its optimizer reset), roll out
`prompts_per_step x rollouts_per_prompt` trajectories of the next problems of the data cursor,
trace them, update the policy, push it (version = the step), evaluate every `eval_every`
steps, write the metrics row and progress line, checkpoint every `checkpoint_every` steps;
then evaluate once more unless the last step just did (the "final" row), checkpoint, and
finish with the summary.

- Stages: RL step `s` (1-based) belongs to the first stage whose cumulative `steps` reach `s`.
  Its first step starts it: with `filter_solved`, every pool problem (the first `filter_pool`)
  is probed `filter_samples` times at step `-1 - stage_index` and the problems solved in every
  sample are dropped from the data cursor (none dropped if all were solved); with
  `reset_optimizer` the optimizer is replaced. A stage's `max_response_tokens` and `max_turns`
  go into its tasks.
- Seeds: every task's sampling seed is `derive_seed(seed, kind, step, prompt, sample)`, so
  sampling never depends on timing (held-out evaluation passes the current step too).
- Resume: `start(resume=True, saved=checkpoint state)` restores the data cursor and progress;
  the metrics log and trace drop the lines after the saved step, the saved policy is pushed,
  and the next command is the next step's (or its stage's start), exactly what an
  uninterrupted run issues there.
- Timing: the shell stamps each reply with the start and end of its command (`perf_counter`);
  the step's `time_*` metrics and `step_s` (from its rollout's start to the end of its last
  command with a reply) are differences of those stamps.
- Interruption (a SIGINT/SIGTERM reaching the learner): while the policy is still the last
  step done's (`interruptible`: before that step's successor has updated it), `interrupt`
  abandons a rollout in flight, checkpoints that step (state as of its end, so the data
  cursor is not advanced by the abandoned batch) and finishes with "interrupted" in the
  summary; otherwise the shell carries on to the next such point (the end of the step).
- `rollout_only` (`rstar2 profile`): no update and no push after the first; the policy stays.
- A step that trained no rollout (no group had a reward signal: each prompt's rollouts all
  scored the same) warns "policy not updated" and is counted (`extra.steps_not_updated`).

What it does not do: I/O (besides its log lines), awaits or clocks (the shell's), the RL math
(`rstar2.rl`, `run_state.train_on`), tokenizing (an `encode` function is given), or loading
problems (`run_state.load_split`).
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from rstar2.config import from_dict
from rstar2.rl.staleness import fresh_groups, staleness, staleness_metrics
from rstar2.train.accuracy import Accuracy, score
from rstar2.train.config import StageConfig, TrainConfig
from rstar2.train.problem_stream import ProblemStream, TrainProblem
from rstar2.train.run_commands import (
    Checkpoint,
    Command,
    EnterPhase,
    Finish,
    OpenRun,
    PushWeights,
    ResetOptimizer,
    RollOut,
    Submit,
    TraceStep,
    Update,
    WriteMetrics,
)
from rstar2.train.step_metrics import rollout_metrics, stage_split
from rstar2.wire import RolloutTask, TrajectoryResult

log = logging.getLogger(__name__)

_Awaited = TypeVar("_Awaited", PushWeights, RollOut, Update)

Encode = Callable[[TrainProblem], list[int]]
"""A problem's prompt as token ids (the chat template applied)."""


def derive_seed(*parts: object) -> int:
    """A 31-bit seed from any parts (stable across processes and Python versions)."""
    text = ":".join(str(p) for p in parts).encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=4).digest(), "little") & 0x7FFFFFFF


def group_results(results: Sequence[TrajectoryResult]) -> list[list[TrajectoryResult]]:
    """Rollouts grouped by prompt, groups in prompt order, each sorted by sample: a fixed
    order whatever order the trajectories finished in."""
    groups: dict[str, list[TrajectoryResult]] = {}
    for r in results:
        groups.setdefault(r.prompt_id, []).append(r)
    ordered = sorted(groups.items(), key=lambda kv: int(kv[0].rsplit("/", 1)[1]))
    return [sorted(g, key=lambda r: r.sample) for _, g in ordered]


def unsolved(problems: Sequence[TrainProblem], results: Sequence[TrajectoryResult]) -> list[str]:
    """The solved-filter: ids of the probed problems that some sample failed (reward <= 0).
    `results` are the probe's rollouts, prompt `i` being `problems[i]`."""
    groups = group_results(results)
    return [p.id for p, g in zip(problems, groups, strict=True) if not all(r.reward > 0 for r in g)]


def stage_index(stages: Sequence[StageConfig], step: int) -> int:
    """Index of the stage that RL step `step` (1-based) belongs to (the last one past the end)."""
    end = 0
    for i, stage in enumerate(stages):
        end += stage.steps
        if step <= end:
            return i
    return len(stages) - 1


def progress_line(row: dict[str, Any], total: int) -> str:
    """One fixed-width line per step."""
    acc = row.get("heldout_accuracy")
    ci = row.get("heldout_ci95")
    half = (ci[1] - ci[0]) / 2 if isinstance(ci, list) else 0.0
    acc_text = f"{acc:5.3f}±{half:4.3f}" if isinstance(acc, float) else "     -    "
    return (
        f"step {row['step']:4d}/{total:<4d} {row['stage']:<4s} | reward {row['reward_mean']:5.3f}"
        f" | heldout {acc_text} | len {row['response_tokens_mean']:6.1f}"
        f" | tools {row['tool_calls_mean']:4.2f} | err+ {row['tool_error_ratio_correct']:5.3f}"
        f" | mixed {row['mixed_group_fraction']:4.2f} | clip {row.get('clip_fraction', 0.0):5.3f}"
        f" | {row['step_s']:5.1f}s (gen {row['time_gen_s']:4.1f} tool {row['time_tool_s']:4.1f}"
        f" rew {row['time_reward_s']:4.1f} learn {row['time_learner_s']:4.1f}"
        f" sync {row['time_sync_s']:4.1f})"
    )


@dataclass
class Progress:
    """Where the run is; saved in every checkpoint."""

    step: int = 0
    """The last RL step whose update is done (0: none yet)."""
    stage_started: int = -1
    """Index of the last stage started (its filter and optimizer reset done)."""
    sft_accuracy: float | None = None
    """Validation accuracy of the SFT policy (None: not evaluated yet)."""
    last_accuracy: float | None = None
    """The latest validation accuracy."""
    sft_evaluated: bool = False
    """The SFT policy's evaluations (validation, test) are done."""
    evaluations: dict[str, dict[str, Any]] = field(default_factory=dict)
    """`rstar2.train.accuracy.Accuracy.as_dict()` by "validation_sft", "test_sft",
    "validation_final", "test_final"."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Summary values, e.g. `filter_<stage>`: {"probed", "kept"}."""


@dataclass
class _Step:
    """The RL step in flight: what its metrics row gathers from the replies."""

    step: int
    stage: StageConfig
    results: list[TrajectoryResult] = field(default_factory=list)
    started: float = 0.0
    last: float = 0.0
    rollout_s: float = 0.0
    update: dict[str, float] = field(default_factory=dict)
    learner_s: float = 0.0
    sync_s: float = 0.0
    staleness: dict[str, Any] = field(default_factory=dict)
    row: dict[str, Any] = field(default_factory=dict)


class Controller:
    """One RL run's decisions (see the module docstring); each event returns the commands to
    execute next, the one awaiting a reply last."""

    def __init__(
        self,
        cfg: TrainConfig,
        train: Sequence[TrainProblem],
        heldout: Sequence[TrainProblem],
        encode: Encode,
        rollout_only: bool = False,
        test: Sequence[TrainProblem] = (),
    ) -> None:
        self.cfg = cfg
        self.stream = ProblemStream(train, cfg.seed)
        self.heldout = list(heldout)
        """The validation problems (evaluated during training)."""
        self.test = list(test)
        """The test problems (evaluated after SFT and at the end only)."""
        self.encode = encode
        self.rollout_only = rollout_only
        """Skip every update and push (the policy stays as it is; `rstar2 profile`)."""
        self.progress = Progress()
        self._phase = "start"
        self._pending: PushWeights | RollOut | Update | None = None
        self._step: _Step | None = None
        self._sft_row: dict[str, Any] = {}
        self._final_row: dict[str, Any] = {}
        self._boundary: tuple[int, dict[str, Any]] | None = None
        """(step, state) at the end of the last RL step done (or the run's start): what a
        checkpoint on an interruption holds, as long as the policy is still that step's."""
        self._saved_step = -1
        """The step of the newest checkpoint the run has (-1: none)."""
        self._ahead: dict[int, tuple[RollOut, dict[str, Any]]] = {}
        """Asynchronous RL: the steps whose rollouts were submitted ahead, not yet awaited:
        their `RollOut` and the data cursor from before their problems were drawn."""

    # --- events ----------------------------------------------------------------------------

    def start(self, resume: bool, saved: dict[str, Any] | None = None) -> list[Command]:
        """The run begins; `saved` is the controller's part of the checkpoint resumed from."""
        if self._phase != "start":
            raise ValueError(f"start() called twice (the controller is in phase {self._phase!r})")
        if saved is not None:
            self.stream.load_state(saved["stream"])
            self.progress = from_dict(Progress, saved["progress"])
            if self.progress.sft_accuracy is not None:  # saved before `sft_evaluated` existed
                self.progress.sft_evaluated = True
        resume_step = self.progress.step if resume else None
        if resume:
            self._saved_step = self.progress.step
        self._mark_boundary()
        return [OpenRun(resume_step), self._await("push", PushWeights(self.progress.step))]

    def interrupt(self, reason: str) -> list[Command]:
        """The run was asked to stop (`reason`, e.g. "SIGINT") while `interruptible`: abandon
        the command awaited (a rollout), checkpoint the last step done unless that is done, and
        finish with a summary saying so ("interrupted"). Resuming it continues exactly as an
        uninterrupted run would from there."""
        if not self.interruptible:
            raise ValueError("interrupt() while the policy is past the last step done")
        assert self._boundary is not None
        step, state = self._boundary
        self._pending, self._step, self._phase = None, None, "done"
        commands: list[Command] = []
        if step > self._saved_step and step > 0:
            commands.append(Checkpoint(step, state))
            self._saved_step = step
        summary = {
            "steps": step,
            "interrupted": reason,
            "checkpoint_step": self._saved_step,
            "sft_accuracy": self.progress.sft_accuracy,
            "final_accuracy": None,
            "extra": copy.deepcopy(self.progress.extra),
        }
        return [*commands, Finish(summary)]

    def weights_pushed(
        self, version: int, metrics: dict[str, float], started: float, finished: float
    ) -> list[Command]:
        """A `PushWeights` is done; `metrics` are the push's byte counts."""
        if self._take(PushWeights, version) == "push":
            if not self.progress.sft_evaluated and (self.heldout or self.test):
                self._sft_row = {"step": 0, "stage": "sft"}
                if self.heldout:
                    return [self._evaluate("sft_eval")]
                return [self._evaluate("sft_test", test=True)]
            return [EnterPhase("rl"), *self._next_step()]
        s = self._in_flight()
        s.update.update(metrics)
        s.sync_s, s.last = finished - started, finished
        return self._updated()

    def rollouts_done(
        self, step: int, results: Sequence[TrajectoryResult], started: float, finished: float
    ) -> list[Command]:
        """A `RollOut` is done: every one of its trajectories, scored."""
        asked = self._pending
        phase = self._take(RollOut, step)
        assert isinstance(asked, RollOut)
        if len(results) != len(asked.tasks):
            raise ValueError(f"{len(results)} results for {len(asked.tasks)} tasks of step {step}")
        results = list(results)
        if phase in ("sft_eval", "sft_test"):
            return self._sft_evaluated(phase, score(results))
        if phase == "filter":
            return self._filtered(-1 - step, results)
        if phase == "train":
            return self._rolled_out(results, started, finished)
        if phase == "step_eval":
            return self._step_evaluated(score(results), started, finished)
        return self._final_evaluated(phase, score(results))

    def update_done(
        self, step: int, metrics: dict[str, float], started: float, finished: float
    ) -> list[Command]:
        """An `Update` is done; `metrics` are the update's (loss, clip fraction, groups ...)."""
        self._take(Update, step)
        s = self._in_flight()
        s.update = dict(metrics)
        s.learner_s, s.last = finished - started, finished
        self.progress.step = step
        return [self._await("push_step", PushWeights(step))]

    # --- queries ---------------------------------------------------------------------------

    @property
    def done(self) -> bool:
        return self._phase == "done"

    @property
    def interruptible(self) -> bool:
        """The policy is the last step done's (no update since): `interrupt` may end the run
        here, abandoning a rollout in flight."""
        return (
            self._phase != "done"
            and self._boundary is not None
            and self.progress.step == self._boundary[0]
        )

    def _mark_boundary(self) -> None:
        self._boundary = (self.progress.step, copy.deepcopy(self.state()))

    def stage_at(self, step: int) -> int:
        return stage_index(self.cfg.stages, step)

    def state(self) -> dict[str, Any]:
        """The controller's part of a checkpoint: data cursor, current stage, progress."""
        p = self.progress
        # problems drawn for steps submitted ahead are drawn again on resume
        stream = self._ahead[min(self._ahead)][1] if self._ahead else self.stream.state()
        return {
            "stream": copy.deepcopy(stream),
            "stage": self.cfg.stages[self.stage_at(max(p.step, 1))].name,
            "progress": dataclasses.asdict(p),
        }

    def rollout_tasks(
        self,
        problems: Sequence[TrainProblem],
        step: int,
        kind: str,
        samples: int,
        temperature: float,
        max_response_tokens: int = 0,
        max_turns: int = 0,
        seed_step: int | None = None,
    ) -> list[RolloutTask]:
        """`samples` tasks per problem, trajectory ids `kind/step/prompt/sample`; sampling
        seeds from (seed, kind, `seed_step` (default: `step`), prompt, sample)."""
        seed_at = step if seed_step is None else seed_step
        return [
            RolloutTask(
                traj_id=f"{kind}/{step}/{i}/{s}",
                prompt_id=f"{kind}/{step}/{i}",
                sample=s,
                step=step,
                prompt_ids=self.encode(p),
                answer=p.answer,
                seed=derive_seed(self.cfg.seed, kind, seed_at, i, s),
                kind=kind,
                temperature=temperature,
                max_response_tokens=max_response_tokens,
                max_turns=max_turns,
            )
            for i, p in enumerate(problems)
            for s in range(samples)
        ]

    # --- the run's course ------------------------------------------------------------------

    def _sft_evaluated(self, phase: str, acc: Accuracy) -> list[Command]:
        p, row = self.progress, self._sft_row
        if phase == "sft_eval":
            p.sft_accuracy = p.last_accuracy = acc.mean
            p.evaluations["validation_sft"] = acc.as_dict()
            row.update(_accuracy_row("heldout", acc))
            log.info("validation accuracy after SFT: %s", _text(acc))
            if self.test:
                return [self._evaluate("sft_test", test=True)]
        else:
            p.evaluations["test_sft"] = acc.as_dict()
            row.update(_accuracy_row("test", acc))
            log.info("test accuracy after SFT: %s", _text(acc))
        p.sft_evaluated = True
        self._mark_boundary()
        return [WriteMetrics(dict(row)), EnterPhase("rl"), *self._next_step()]

    def _next_step(self) -> list[Command]:
        """The next RL step's first command (its stage's start first), or the run's end."""
        if self.progress.step >= self.cfg.total_steps:
            return [EnterPhase("final"), *self._final()]
        index = self.stage_at(self.progress.step + 1)
        if self.progress.stage_started >= index:
            return [self._roll_out_step()]
        stage = self.cfg.stages[index]
        log.info("stage %s: %d steps", stage.name, stage.steps)
        if not stage.filter_solved:
            return self._stage_started(index)
        tasks = self.rollout_tasks(
            self._probe_pool(stage),
            -1 - index,
            "filter",
            stage.filter_samples,
            self.cfg.rollout.temperature,
            stage.max_response_tokens,
            stage.max_turns,
        )
        return [self._await("filter", RollOut(-1 - index, tasks))]

    def _probe_pool(self, stage: StageConfig) -> list[TrainProblem]:
        pool = [self.stream.all[i] for i in self.stream.pool]
        return pool[: stage.filter_pool] if stage.filter_pool else pool

    def _filtered(self, index: int, results: list[TrajectoryResult]) -> list[Command]:
        """Stage 3's hard subset: drop the pool problems the policy solved every time."""
        stage = self.cfg.stages[index]
        pool = self._probe_pool(stage)
        keep = unsolved(pool, results)
        n = stage.filter_samples
        log.info(
            "stage %s: kept %d of %d probed problems (dropped those solved %d/%d)",
            stage.name,
            len(keep),
            len(pool),
            n,
            n,
        )
        if keep:
            self.stream.restrict(keep)
        self.progress.extra[f"filter_{stage.name}"] = {"probed": len(pool), "kept": len(keep)}
        return self._stage_started(index)

    def _stage_started(self, index: int) -> list[Command]:
        stage = self.cfg.stages[index]
        commands: list[Command] = []
        if stage.reset_optimizer:
            commands.append(ResetOptimizer(stage.name))
            log.info("stage %s: optimizer state reset", stage.name)
        self.progress.stage_started = index
        return [*commands, self._roll_out_step()]

    def _roll_out_step(self) -> RollOut:
        """The next step's rollout: the one submitted ahead for it, or a new one."""
        step = self.progress.step + 1
        stage = self.cfg.stages[self.stage_at(step)]
        ahead = self._ahead.pop(step, None)
        command = ahead[0] if ahead is not None else self._train_rollout(step)
        self._step = _Step(step, stage)
        return self._await("train", command)

    def _train_rollout(self, step: int) -> RollOut:
        """Step `step`'s rollouts, on the next problems of the data cursor."""
        cfg = self.cfg
        stage = cfg.stages[self.stage_at(step)]
        tasks = self.rollout_tasks(
            self.stream.next_batch(cfg.prompts_per_step),
            step,
            "train",
            cfg.rollouts_per_prompt,
            cfg.rollout.temperature,
            stage.max_response_tokens,
            stage.max_turns,
        )
        return RollOut(step, tasks)

    def _submit_ahead(self) -> list[Command]:
        """Asynchronous RL (`rl.max_staleness = k`): before step t's update, submit the
        rollouts of steps t+1..t+k not submitted yet. The engines hold version t-1, and step
        u may start generating once they hold u-1-k, so u <= t+k. Not across a stage's start
        (its solved-filter probe and optimizer reset come first, as in a synchronous run)."""
        k, t = self.cfg.rl.max_staleness, self._in_flight().step
        if not k or self.rollout_only:
            return []
        commands: list[Command] = []
        for u in range(t + 1, min(t + k, self.cfg.total_steps) + 1):
            if self.stage_at(u) != self.stage_at(t):
                break
            if u in self._ahead:
                continue
            before = copy.deepcopy(self.stream.state())
            rollout = self._train_rollout(u)
            self._ahead[u] = (rollout, before)
            commands.append(Submit(rollout))
        return commands

    def _rolled_out(
        self, results: list[TrajectoryResult], started: float, finished: float
    ) -> list[Command]:
        s = self._in_flight()
        s.results, s.started, s.last, s.rollout_s = results, started, finished, finished - started
        commands: list[Command] = []
        if self.cfg.rollout_trace:
            commands.append(TraceStep(s.step, results, s.stage.max_response_tokens))
        if self.rollout_only:
            self.progress.step = s.step
            return [*commands, *self._updated()]
        fresh = self._within_staleness(s, results)
        return [*commands, *self._submit_ahead(), self._await("update", Update(s.step, fresh))]

    def _within_staleness(
        self, s: _Step, results: list[TrajectoryResult]
    ) -> list[TrajectoryResult]:
        """The step's rollouts whose groups are at most `rl.max_staleness` versions behind the
        learner (version `step - 1`); the step's staleness figures go to its metrics row."""
        learner = self.progress.step
        ages = [staleness(r.policy_versions, learner) for r in results]
        kept, dropped = fresh_groups(group_results(results), learner, self.cfg.rl.max_staleness)
        s.staleness = {**staleness_metrics(ages), "stale_dropped": dropped}
        if not dropped:
            return results  # as they came: the synchronous run's exact input
        log.warning(
            "step %d: %d rollout(s) dropped, their groups more than %d version(s) stale",
            s.step,
            dropped,
            self.cfg.rl.max_staleness,
        )
        return [r for group in kept for r in group]

    def _updated(self) -> list[Command]:
        """The step's policy is out: its metrics row, then its evaluation when due."""
        s, cfg = self._in_flight(), self.cfg
        s.row = {"step": s.step, "stage": s.stage.name}
        s.row.update(rollout_metrics(s.results))
        s.row.update(s.update)
        s.row.update(stage_split(s.results, s.rollout_s))
        s.row.update(time_learner_s=s.learner_s, time_sync_s=s.sync_s)
        s.row.update(s.staleness)
        if not self.rollout_only and not s.update.get("trained_rollouts", 0):
            skipped = self.progress.extra.get("steps_not_updated", 0) + 1
            self.progress.extra["steps_not_updated"] = skipped
            log.warning(
                "step %d: policy not updated - no group had a reward signal (every rollout of "
                "each prompt scored the same; %d such step(s) so far)",
                s.step,
                skipped,
            )
        if cfg.eval_every and s.step % cfg.eval_every == 0 and cfg.heldout_problems:
            return [self._evaluate("step_eval")]
        return self._step_done()

    def _step_evaluated(self, acc: Accuracy, started: float, finished: float) -> list[Command]:
        s = self._in_flight()
        self.progress.last_accuracy = acc.mean
        self.progress.evaluations["validation_last"] = {**acc.as_dict(), "step": s.step}
        s.row.update(_accuracy_row("heldout", acc), time_eval_s=finished - started)
        s.last = finished
        log.info("validation accuracy at step %d: %s", s.step, _text(acc))
        return self._step_done()

    def _step_done(self) -> list[Command]:
        s = self._in_flight()
        s.row["step_s"] = s.last - s.started
        commands: list[Command] = [WriteMetrics(s.row, progress_line(s.row, self.cfg.total_steps))]
        self._step = None
        self._mark_boundary()
        if s.step % self.cfg.checkpoint_every == 0:
            commands.append(Checkpoint(s.step, self.state()))
            self._saved_step = s.step
        return [*commands, *self._next_step()]

    def _final(self) -> list[Command]:
        """After the last step: evaluate validation unless that step just did, and test; then
        checkpoint and finish."""
        cfg, p = self.cfg, self.progress
        evaluated_now = cfg.eval_every and p.step % cfg.eval_every == 0
        self._final_row = {"step": p.step, "stage": "final"}
        if self.heldout and not evaluated_now:
            return [self._evaluate("final_eval")]
        if self.heldout and "validation_last" in p.evaluations:  # the last step's evaluation
            p.evaluations["validation_final"] = p.evaluations["validation_last"]
        if self.test:
            return [self._evaluate("final_test", test=True)]
        return self._finish(p.last_accuracy)

    def _final_evaluated(self, phase: str, acc: Accuracy) -> list[Command]:
        p, row = self.progress, self._final_row
        if phase == "final_eval":
            p.last_accuracy = acc.mean
            p.evaluations["validation_final"] = acc.as_dict()
            row.update(_accuracy_row("heldout", acc))
            log.info("validation accuracy after RL: %s", _text(acc))
            if self.test:
                return [self._evaluate("final_test", test=True)]
        else:
            p.evaluations["test_final"] = acc.as_dict()
            row.update(_accuracy_row("test", acc))
            log.info("test accuracy after RL: %s", _text(acc))
        return [WriteMetrics(dict(row)), *self._finish(p.last_accuracy)]

    def _finish(self, last: float | None) -> list[Command]:
        p = self.progress
        p.last_accuracy = last
        self._phase = "done"
        summary = {
            "steps": p.step,
            "sft_accuracy": p.sft_accuracy,
            "final_accuracy": last,
            "evaluations": copy.deepcopy(p.evaluations),
            "extra": copy.deepcopy(p.extra),
        }
        self._saved_step = p.step
        return [Checkpoint(p.step, self.state()), Finish(summary)]

    # --- bookkeeping -----------------------------------------------------------------------

    def _evaluate(self, phase: str, test: bool = False) -> RollOut:
        """Evaluate the validation split (the test split with `test`), `eval_samples` each,
        with seeds that do not depend on the step: every evaluation of a split samples alike,
        so two evaluations differ by the policy alone."""
        step = self.progress.step
        tasks = self.rollout_tasks(
            self.test if test else self.heldout,
            step,
            "test" if test else "eval",
            self.cfg.eval_samples,
            self.cfg.eval_temperature,
            seed_step=0,
        )
        return self._await(phase, RollOut(step, tasks))

    def _await(self, phase: str, command: _Awaited) -> _Awaited:
        self._phase, self._pending = phase, command
        return command

    def _take(self, kind: type[PushWeights | RollOut | Update], step: int) -> str:
        """Accept the reply to the pending command; anything else is a bug in the shell."""
        pending = self._pending
        if not isinstance(pending, kind) or _step_of(pending) != step:
            wanted = f"{type(pending).__name__}({_step_of(pending)})" if pending else "nothing"
            raise ValueError(
                f"a reply to {kind.__name__}({step}) while the controller awaits {wanted}"
            )
        self._pending = None
        return self._phase

    def _in_flight(self) -> _Step:
        if self._step is None:
            raise ValueError(f"no RL step in flight (phase {self._phase!r})")
        return self._step


def _step_of(command: PushWeights | RollOut | Update) -> int:
    return command.version if isinstance(command, PushWeights) else command.step


def _accuracy_row(prefix: str, acc: Accuracy) -> dict[str, Any]:
    return {f"{prefix}_accuracy": acc.mean, f"{prefix}_ci95": [acc.low, acc.high]}


def _text(acc: Accuracy) -> str:
    return (
        f"{acc.mean:.3f} (95% CI {acc.low:.3f}-{acc.high:.3f}; {acc.problems} problems x "
        f"{acc.samples} samples)"
    )
