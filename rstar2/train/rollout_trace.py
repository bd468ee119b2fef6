"""The trainer's rollout trace: every RL step's trajectories in the simulator's trace format.

`RUN/rollout_trace.jsonl` gets one line per trajectory of each RL step (`trace_record`:
prompt, per-turn model and tool tokens, tool latencies, the step's response budget, plus
`step`, `traj_id`, `engine`; the reader is `sim.workload.load_trace`), so `rstar2 sim --trace RUN/rollout_trace.jsonl
[--trace-step N]` replays a step the live graph ran, on any simulated cluster. On resume the
lines of steps after the checkpoint are dropped (they are run again), as for `metrics.jsonl`.

With `tokens` (train config `rollout_trace_tokens`, off by default: it makes the file about 10x
larger) each line also carries the trajectory's `token_ids`, `loss_mask`, sampling `logprobs`,
`sample` and `reward`, so `rstar2 analyze RUN/rollout_trace.jsonl --step N` can study the RL
trajectories themselves (the simulator ignores these fields).

What it does not do: record held-out evaluation rollouts (not a training step's workload).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from rstar2.wire import Trajectory, TrajectoryResult

TRACE_FILE = "rollout_trace.jsonl"


def trace_record(
    prompt_id: str,
    prompt_tokens: int,
    max_response_tokens: int,
    loss_mask: list[int],
    tool_latencies: list[float],
    **extra: object,
) -> dict[str, object]:
    """One trace line for a finished live trajectory.

    The response part of `loss_mask` (after `prompt_tokens`) alternates runs of sampled tokens
    (1: a turn's model tokens) and forced ones (0: the tool response and the chat-template
    tokens around it, i.e. what the engine prefills before the next turn). Turn k is its model
    run, the forced run after it, and `tool_latencies[k]` (0 for a turn without one, such as a
    malformed call answered without running anything). `extra` adds fields (`step`, `traj_id`).
    """
    if not 1 <= prompt_tokens <= len(loss_mask):
        raise ValueError(f"prompt_tokens {prompt_tokens} outside a mask of {len(loss_mask)}")
    runs: list[list[int]] = []  # [sampled?, length]
    for bit in loss_mask[prompt_tokens:]:
        if runs and runs[-1][0] == bit:
            runs[-1][1] += 1
        else:
            runs.append([bit, 1])
    if runs and runs[0][0] == 0:  # forced tokens before the first sampled one: template
        runs.pop(0)
    turns = []
    for i in range(0, len(runs), 2):
        model = runs[i][1]
        tool = runs[i + 1][1] if i + 1 < len(runs) else 0
        k = len(turns)
        latency = tool_latencies[k] if tool and k < len(tool_latencies) else 0.0
        turns.append({"model_tokens": model, "tool_tokens": tool, "tool_latency_s": latency})
    used = sum(t["model_tokens"] + t["tool_tokens"] for t in turns)
    return {
        **extra,
        "prompt_id": prompt_id,
        "prompt_tokens": prompt_tokens,
        "max_response_tokens": max(max_response_tokens, used),
        "turns": turns,
    }


def token_fields(t: Trajectory) -> dict[str, object]:
    """The fields `rollout_trace_tokens` adds to a trace line (see the module docstring)."""
    return {
        "sample": t.sample,
        "reward": t.reward,
        "token_ids": list(t.token_ids),
        "loss_mask": list(t.loss_mask),
        "logprobs": list(t.logprobs),
    }


class RolloutTrace:
    """Appends each RL step's trajectories to `run_dir/rollout_trace.jsonl`."""

    def __init__(self, run_dir: Path, resume_step: int | None = None, tokens: bool = False) -> None:
        self.path = Path(run_dir) / TRACE_FILE
        self.tokens = tokens
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if resume_step is not None and self.path.exists():
            kept = [
                line
                for line in self.path.read_text().splitlines()
                if line.strip() and json.loads(line).get("step", 0) <= resume_step
            ]
            self.path.write_text("".join(line + "\n" for line in kept))
        elif resume_step is None and self.path.exists():
            self.path.unlink()
        self._file = open(self.path, "a")  # noqa: SIM115 - closed in close()

    def write(self, step: int, results: Sequence[TrajectoryResult], budget: int) -> int:
        """Record one step (`budget`: its response token budget); returns the lines written.
        A trajectory without a response token (aborted before its first) has no turn to
        replay and is skipped."""
        lines = []
        for r in results:
            t = r.trajectory
            if not any(t.loss_mask[t.prompt_len :]):
                continue
            record = trace_record(
                t.prompt_id,
                t.prompt_len,
                budget,
                list(t.loss_mask),
                list(t.tool_latencies),
                step=step,
                traj_id=r.traj_id,
                engine=r.engine,
            )
            if self.tokens:
                record.update(token_fields(t))
            lines.append(json.dumps(record))
        self._file.write("".join(line + "\n" for line in lines))
        self._file.flush()
        return len(lines)

    def close(self) -> None:
        self._file.close()
