"""The trainer's rollout trace: every RL step's trajectories in the simulator's trace format.

`RUN/rollout_trace.jsonl` gets one line per trajectory of each RL step (`sim.workload.
trace_record`: prompt, per-turn model and tool tokens, tool latencies, the step's response
budget, plus `step`, `traj_id`, `engine`), so `rstar2 sim --trace RUN/rollout_trace.jsonl
[--trace-step N]` replays a step the live graph ran, on any simulated cluster. On resume the
lines of steps after the checkpoint are dropped (they are run again), as for `metrics.jsonl`.

What it does not do: record held-out evaluation rollouts (not a training step's workload).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from rstar2.wire import TrajectoryResult
from sim.workload import trace_record

TRACE_FILE = "rollout_trace.jsonl"


class RolloutTrace:
    """Appends each RL step's trajectories to `run_dir/rollout_trace.jsonl`."""

    def __init__(self, run_dir: Path, resume_step: int | None = None) -> None:
        self.path = Path(run_dir) / TRACE_FILE
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
            if not any(r.loss_mask[r.prompt_len :]):
                continue
            record = trace_record(
                r.prompt_id,
                r.prompt_len,
                budget,
                list(r.loss_mask),
                list(r.tool_latencies),
                step=step,
                traj_id=r.traj_id,
                engine=r.engine,
            )
            lines.append(json.dumps(record))
        self._file.write("".join(line + "\n" for line in lines))
        self._file.flush()
        return len(lines)

    def close(self) -> None:
        self._file.close()
