"""The run's trajectory log: the full text of recorded rollouts, for reading and `rstar2 view`.

`RUN/trajectories.jsonl` gets one JSON object per rollout (`trajectory_record`, documented in
docs/usage.md, "The trajectory log"): where it comes from (`source` "train", "validation" or
"test", `step`, `stage`, `group`: the prompt's index in its batch, `sample`, `traj_id`), the
problem and its reference answer, the conversation by turn (`rstar2.rollout.conversation`:
assistant text, tool calls, tool responses and whether they failed), the extracted answer,
reward and its status, finish reason, tool-call counts and latencies, response tokens, the
behaviour log-probs' summary, the policy versions by turn and, for a training step, whether it
trained (`kept`: RoC selected it and its group had a reward signal) with its `advantage`.

Which rollouts: every one of each RL step `recorded_step` picks (`record_every`: step 1 and
every `record_every`-th; 0: none) and, with `record_evaluations`, of every evaluation. On resume
the lines of steps after the checkpoint are dropped (they are run again), as for the metrics.
Lines are whole and flushed per batch, so a reader of a run in progress sees whole steps.

What it does not do: decide which steps are recorded when (the controller), or keep token ids
(`rollout_trace_tokens` puts those in the rollout trace).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from rstar2.problem import Problem
from rstar2.reward.extraction import extract_answer
from rstar2.rollout.conversation import conversation, logprob_summary
from rstar2.wire import TrajectoryResult

TRAJECTORY_FILE = "trajectories.jsonl"


def recorded_step(step: int, every: int) -> bool:
    """Is RL step `step` recorded with `record_every = every`: step 1 and each multiple."""
    return every > 0 and (step == 1 or step % every == 0)


def trajectory_record(
    r: TrajectoryResult,
    problem: str,
    *,
    source: str,
    step: int,
    stage: str,
) -> dict[str, object]:
    """One line of the log (see the module docstring), without `kept` and `advantage`."""
    t = r.trajectory
    answer = extract_answer(t.response_text)
    record: dict[str, object] = {
        "source": source,
        "step": step,
        "stage": stage,
        "group": r.prompt,
        "sample": t.sample,
        "traj_id": r.traj_id,
        "problem": problem,
        "reference": r.answer,
        "conversation": conversation(t.response_text),
        "answer": answer,
        "reward": t.reward,
        "reward_status": t.reward_status,
        "finish_reason": t.finish_reason,
        "turns": t.turns,
        "tool_calls": t.tool_calls,
        "tool_errors": t.tool_errors,
        "tool_timeouts": t.tool_timeouts,
        "tool_latencies": [round(s, 4) for s in t.tool_latencies],
        "infra_failure": t.infra_failure,
        "response_tokens": t.response_tokens,
        "logprob": logprob_summary(t.logprobs, t.loss_mask),
        "policy_versions": list(t.policy_versions),
    }
    return record


class TrajectoryLog:
    """Appends recorded rollouts to `run_dir/trajectories.jsonl` (see the module)."""

    def __init__(self, run_dir: Path, resume_step: int | None = None) -> None:
        self.path = Path(run_dir) / TRAJECTORY_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if resume_step is not None and self.path.exists():
            kept = [
                line
                for line in self.path.read_text().splitlines()
                if (step := _step_of(line)) is not None and step <= resume_step
            ]
            self.path.write_text("".join(line + "\n" for line in kept))
        elif resume_step is None and self.path.exists():
            self.path.unlink()
        self._file = open(self.path, "a")  # noqa: SIM115 - closed in close()

    def write(
        self,
        results: Sequence[TrajectoryResult],
        problems: Sequence[Problem],
        *,
        source: str,
        step: int,
        stage: str,
        advantages: Mapping[str, float] | None = None,
    ) -> int:
        """Record a batch: `problems` by prompt index, `advantages` by trajectory id (those
        trained on; None: not a training step). Returns the lines written."""
        lines = []
        for r in sorted(results, key=lambda r: (r.prompt, r.trajectory.sample)):
            problem = problems[r.prompt].problem if 0 <= r.prompt < len(problems) else ""
            record = trajectory_record(r, problem, source=source, step=step, stage=stage)
            if advantages is not None:
                advantage = advantages.get(r.traj_id)
                record["kept"] = advantage is not None
                record["advantage"] = None if advantage is None else round(advantage, 4)
            lines.append(json.dumps(record, ensure_ascii=False))
        self._file.write("".join(line + "\n" for line in lines))
        self._file.flush()
        return len(lines)

    def close(self) -> None:
        self._file.close()


def _step_of(line: str) -> int | None:
    """A line's step; None for a line cut short (the run was killed while writing it)."""
    try:
        return int(json.loads(line)["step"])
    except (json.JSONDecodeError, KeyError, TypeError, ValueError):
        return None
