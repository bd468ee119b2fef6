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
- Recording: RL step 1 and every `record_every`-th step's `Update`, and with
  `record_evaluations` every evaluation's `RollOut`, carry a `Recording`: the shell writes
  their rollouts' text to the trajectory log (`trajectory_log.py`).
- `rollout_only` (`rstar2 profile`): no update and no push after the first; the policy stays.
- A step that trained no rollout (no group had a reward signal: each prompt's rollouts all
  scored the same) warns "policy not updated" and is counted (`extra.steps_not_updated`).

Phases and their transitions: `phase.py`, the command awaited: `awaited_reply.py`; which evaluation follows which: `heldout.py`; the
steps' rollouts (data cursor, probes, submitted ahead, staleness): `step_rollouts.py`; task
ids and seeds (`derive_seed(seed, kind, step, prompt, sample)`: sampling never depends on
timing) and grouping by prompt: `rollout_groups.py`.

What it does not do: I/O (besides its log lines), awaits or clocks (the shell's), the RL math
(`rstar2.rl`, `run_state.train_on`), tokenizing (an `encode` function is given), or loading
problems (`run_state.load_split`).
"""

from __future__ import annotations

import copy
import dataclasses
import logging
from collections.abc import Sequence
from typing import Any

from rstar2.config import from_dict
from rstar2.problem import Problem
from rstar2.train.accuracy import Accuracy, score
from rstar2.train.awaited_reply import AwaitedReply
from rstar2.train.config import TrainConfig
from rstar2.train.heldout import TEST_PHASES, EvaluationPlan, evaluation_rollout, record
from rstar2.train.phase import EVALUATIONS, Phase
from rstar2.train.problem_stream import ProblemStream
from rstar2.train.progress import Progress, StepInFlight, stage_index
from rstar2.train.rollout_groups import Encode, unsolved
from rstar2.train.run_commands import (
    Checkpoint,
    Command,
    EnterPhase,
    Finish,
    OpenRun,
    PushWeights,
    Recording,
    ResetOptimizer,
    RollOut,
    Submit,
    TraceStep,
    Update,
    WriteMetrics,
)
from rstar2.train.step_metrics import latest_loads, progress_line
from rstar2.train.step_rollouts import StepRollouts, within_staleness
from rstar2.train.trajectory_log import recorded_step
from rstar2.wire import EngineLoad, TrajectoryResult

log = logging.getLogger(__name__)


class Controller:
    """One RL run's decisions (see the module docstring); each event returns the commands to
    execute next, the one awaiting a reply last."""

    def __init__(
        self,
        cfg: TrainConfig,
        train: Sequence[Problem],
        heldout: Sequence[Problem],
        encode: Encode,
        rollout_only: bool = False,
        test: Sequence[Problem] = (),
    ) -> None:
        self.cfg = cfg
        self.stream = ProblemStream(train, cfg.seed)
        self.rollouts = StepRollouts(cfg, self.stream, encode)
        """The RL steps' rollouts (drawn from `stream`, some submitted ahead)."""
        self.heldout = list(heldout)
        """The validation problems (evaluated during training)."""
        self.test = list(test)
        """The test problems (evaluated after SFT and at the end only)."""
        self.encode = encode
        self.rollout_only = rollout_only
        """Skip every update and push (the policy stays as it is; `rstar2 profile`)."""
        self.progress = Progress()
        self.evaluations = EvaluationPlan(validation=bool(self.heldout), test=bool(self.test))
        self._awaited = AwaitedReply()
        self._step: StepInFlight | None = None
        self._engine_loads: dict[int, EngineLoad] = {}
        """Each engine's counters as last seen in any rollout's results (`engine_split`)."""
        self._sft_row: dict[str, Any] = {}
        self._final_row: dict[str, Any] = {}
        self._boundary: tuple[int, dict[str, Any]] | None = None
        """(step, state) at the end of the last RL step done (or the run's start): what a
        checkpoint on an interruption holds, as long as the policy is still that step's."""
        self._saved_step = -1
        """The step of the newest checkpoint the run has (-1: none)."""

    # --- events ----------------------------------------------------------------------------

    def start(self, resume: bool, saved: dict[str, Any] | None = None) -> list[Command]:
        """The run begins; `saved` is the controller's part of the checkpoint resumed from."""
        if self.phase != Phase.START:
            raise ValueError(
                f"start() called twice (the controller is in phase {self.phase.value!r})"
            )
        if saved is not None:
            self.stream.load_state(saved["stream"])
            self.progress = from_dict(Progress, saved["progress"])
            if self.progress.sft_accuracy is not None:  # saved before `sft_evaluated` existed
                self.progress.sft_evaluated = True
        resume_step = self.progress.step if resume else None
        if resume:
            self._saved_step = self.progress.step
        self._mark_boundary()
        return [
            OpenRun(resume_step),
            self._awaited.expect(Phase.PUSH, PushWeights(self.progress.step)),
        ]

    def interrupt(self, reason: str) -> list[Command]:
        """The run was asked to stop (`reason`, e.g. "SIGINT") while `interruptible`: abandon
        the command awaited (a rollout), checkpoint the last step done unless that is done, and
        finish with a summary saying so ("interrupted"). Resuming it continues exactly as an
        uninterrupted run would from there."""
        if not self.interruptible:
            raise ValueError("interrupt() while the policy is past the last step done")
        assert self._boundary is not None
        step, state = self._boundary
        self._awaited.enter(Phase.DONE)
        self._awaited.command, self._step = None, None
        commands: list[Command] = []
        if step > self._saved_step and step > 0:
            commands.append(Checkpoint(step, state))
            self._saved_step = step
        summary = {"steps": step, "interrupted": reason, "checkpoint_step": self._saved_step}
        return [*commands, Finish({**summary, **self._summary(None, evaluations=False)})]

    def weights_pushed(
        self, version: int, metrics: dict[str, float], started: float, finished: float
    ) -> list[Command]:
        """A `PushWeights` is done; `metrics` are the push's byte counts."""
        if self._awaited.take(PushWeights, version) == Phase.PUSH:
            first = None if self.progress.sft_evaluated else self.evaluations.after_sft()
            if first is not None:
                self._sft_row = {"step": 0, "stage": "sft"}
                return [self._evaluate(first)]
            return [EnterPhase("rl"), *self._next_step()]
        s = self._in_flight()
        s.update.update(metrics)
        s.sync_s, s.last = finished - started, finished
        return self._updated()

    def rollouts_done(
        self, step: int, results: Sequence[TrajectoryResult], started: float, finished: float
    ) -> list[Command]:
        """A `RollOut` is done: every one of its trajectories, scored."""
        asked = self._awaited.command
        phase = self._awaited.take(RollOut, step)
        assert isinstance(asked, RollOut)
        if len(results) != len(asked.tasks):
            raise ValueError(f"{len(results)} results for {len(asked.tasks)} tasks of step {step}")
        self._engine_loads |= latest_loads(results)
        if phase in EVALUATIONS:
            return self._evaluated(phase, score(results), started, finished)
        if phase == Phase.FILTER:
            return self._filtered(-1 - step, list(results))
        return self._rolled_out(list(results), started, finished, asked.problems)

    def update_done(
        self, step: int, metrics: dict[str, float], started: float, finished: float
    ) -> list[Command]:
        """An `Update` is done; `metrics` are the update's (loss, clip fraction, groups ...)."""
        self._awaited.take(Update, step)
        s = self._in_flight()
        s.update = dict(metrics)
        s.learner_s, s.last = finished - started, finished
        self.progress.step = step
        return [self._awaited.expect(Phase.PUSH_STEP, PushWeights(step))]

    # --- queries ---------------------------------------------------------------------------

    @property
    def phase(self) -> Phase:
        """What the controller awaits (`phase.TRANSITIONS` lists where it may go next)."""
        return self._awaited.phase

    @property
    def done(self) -> bool:
        return self.phase == Phase.DONE

    @property
    def interruptible(self) -> bool:
        """The policy is the last step done's (no update since): `interrupt` may end the run
        here, abandoning a rollout in flight."""
        return (
            self.phase != Phase.DONE
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
        return {
            "stream": self.rollouts.cursor(),
            "stage": self.cfg.stages[self.stage_at(max(p.step, 1))].name,
            "progress": dataclasses.asdict(p),
        }

    # --- the run's course ------------------------------------------------------------------

    def _evaluated(
        self, phase: Phase, acc: Accuracy, started: float, finished: float
    ) -> list[Command]:
        """An evaluation's accuracy is in: the next evaluation of its row, or the run's
        course after it (the RL steps after SFT's; the step's end; the run's end)."""
        if phase == Phase.STEP_EVAL:
            s = self._in_flight()
            record(self.progress, phase, acc, s.row, s.step)
            s.row["time_eval_s"] = finished - started
            s.last = finished
            return self._step_done()
        sft = phase in (Phase.SFT_EVAL, Phase.SFT_TEST)
        row = self._sft_row if sft else self._final_row
        record(self.progress, phase, acc, row, self.progress.step)
        following = self.evaluations.following(phase)
        if following is not None:
            return [self._evaluate(following)]
        if not sft:
            return [WriteMetrics(dict(row)), *self._finish(self.progress.last_accuracy)]
        self.progress.sft_evaluated = True
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
        return [self._awaited.expect(Phase.FILTER, self.rollouts.probe(index))]

    def _filtered(self, index: int, results: list[TrajectoryResult]) -> list[Command]:
        """Stage 3's hard subset: drop the pool problems the policy solved every time."""
        stage = self.cfg.stages[index]
        pool = self.rollouts.probe_pool(index)
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
        self._step = StepInFlight(step, stage, engines_before=dict(self._engine_loads))
        return self._awaited.expect(Phase.TRAIN, self.rollouts.take(step))

    def _submit_ahead(self) -> list[Command]:
        """Asynchronous RL (`rl.max_staleness`): the later steps' rollouts to submit before
        this step's update (`StepRollouts.ahead`)."""
        if not self.cfg.rl.max_staleness or self.rollout_only:
            return []
        return [Submit(r) for r in self.rollouts.ahead(self._in_flight().step)]

    def _rolled_out(
        self,
        results: list[TrajectoryResult],
        started: float,
        finished: float,
        problems: tuple[Problem, ...],
    ) -> list[Command]:
        s = self._in_flight()
        s.results, s.started, s.last, s.rollout_s = results, started, finished, finished - started
        commands: list[Command] = []
        if self.cfg.rollout_trace:
            commands.append(TraceStep(s.step, results, s.stage.max_response_tokens))
        if self.rollout_only:
            self.progress.step = s.step
            return [*commands, *self._updated()]
        fresh, s.staleness = within_staleness(
            results, s.step, self.progress.step, self.cfg.rl.max_staleness
        )
        record = None
        if recorded_step(s.step, self.cfg.record_every):
            record = Recording("train", s.stage.name, problems)
        update = Update(s.step, fresh, record)
        return [*commands, *self._submit_ahead(), self._awaited.expect(Phase.UPDATE, update)]

    def _updated(self) -> list[Command]:
        """The step's policy is out: its metrics row, then its evaluation when due."""
        s, cfg = self._in_flight(), self.cfg
        s.row = s.metrics_row()
        if not self.rollout_only and not s.update.get("trained_rollouts", 0):
            skipped = self.progress.extra.get("steps_not_updated", 0) + 1
            self.progress.extra["steps_not_updated"] = skipped
            log.warning(
                "step %d: policy not updated - no group had a reward signal (every rollout of "
                "each prompt scored the same; %d such step(s) so far)",
                s.step,
                skipped,
            )
        if cfg.eval_every and s.step % cfg.eval_every == 0 and self.heldout:
            return [self._evaluate(Phase.STEP_EVAL)]
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
        evaluated_now = bool(cfg.eval_every and p.step % cfg.eval_every == 0)
        self._final_row = {"step": p.step, "stage": "final"}
        first = self.evaluations.after_rl(step_evaluated=evaluated_now)
        if first == Phase.FINAL_EVAL:
            return [self._evaluate(first)]
        if self.heldout and "validation_last" in p.evaluations:  # the last step's evaluation
            p.evaluations["validation_final"] = p.evaluations["validation_last"]
        if first is not None:
            return [self._evaluate(first)]
        return self._finish(p.last_accuracy)

    def _finish(self, last: float | None) -> list[Command]:
        p = self.progress
        p.last_accuracy = last
        self._awaited.enter(Phase.DONE)
        self._saved_step = p.step
        summary = {"steps": p.step, **self._summary(last, evaluations=True)}
        return [Checkpoint(p.step, self.state()), Finish(summary)]

    def _summary(self, last: float | None, evaluations: bool) -> dict[str, Any]:
        p = self.progress
        kept = {"evaluations": copy.deepcopy(p.evaluations)} if evaluations else {}
        return {
            "sft_accuracy": p.sft_accuracy,
            "final_accuracy": last,
            **kept,
            "extra": copy.deepcopy(p.extra),
        }

    # --- bookkeeping -----------------------------------------------------------------------

    def _evaluate(self, phase: Phase) -> RollOut:
        """Evaluate the validation split (the test split in `TEST_PHASES`)."""
        test = phase in TEST_PHASES
        rollout = evaluation_rollout(
            self.cfg, self.test if test else self.heldout, self.encode, self.progress.step, test,
            self._evaluation_stage(phase),
        )  # fmt: skip
        return self._awaited.expect(phase, rollout)

    def _evaluation_stage(self, phase: Phase) -> str:
        """What the trajectory log calls an evaluation's stage: "sft", "final" or the RL
        stage of the step evaluated."""
        if phase in (Phase.SFT_EVAL, Phase.SFT_TEST):
            return "sft"
        if phase == Phase.STEP_EVAL:
            return self._in_flight().stage.name
        return "final"

    def _in_flight(self) -> StepInFlight:
        if self._step is None:
            raise ValueError(f"no RL step in flight (phase {self.phase.value!r})")
        return self._step
