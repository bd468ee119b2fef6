"""Per-step rollout statistics, as pure functions of the step's trajectories.

- `infra_failed`: rollouts hit by an infrastructure failure (`infra_failure` set: a tool call
  the sandbox could not serve, a verification that did not finish); RL never trains on them;
- `reward_mean`, `tool_error_ratio_correct` and `mixed_group_fraction` judge the model, so
  they leave those rollouts out (their 0 is not the model's); the others count all rollouts;
- `response_tokens_mean`, `tool_calls_mean` over all rollouts of the step;
- `tool_error_ratio_correct`: failed (error or timeout) tool calls over all tool calls, counted
  in the correct trajectories only (the paper's Figure 9 quantity, before RoC selection);
- `correct_with_failed_call`: share of the correct trajectories with at least one failed tool
  call (what RoC's selection can act on: a correct rollout that recovered from a failure);
- `mixed_group_fraction`: share of prompts whose rollouts have both rewards (groups with signal);
- `gen_tokens`: tokens the policy sampled in the step (loss-mask 1), tool and prompt tokens
  excluded;
- `moved_turns`: turns generated on another engine than their trajectory's first (the
  scheduler moved them; `scheduler.move_turns` with several engines);
- `stage_split`: how the rollout phase's wall time divides into generation, tool and reward
  time. These overlap (many trajectories run at once), so the wall time is split in proportion
  to the summed per-trajectory times: t_gen = wall * G / (G + T + R), and so on;
- `engine_split`: what the engines did over the step's rollout phase, from the cumulative
  counters each trajectory's result carries (`EngineLoad`): `engine_steps`, `engine_step_s`
  (seconds inside engine steps, summed over engines: against `time_gen_s`, how much of the
  generation phase the engines computed rather than waited for tool results or new turns) and
  `engine_wait_s` (of those, the host waiting for the device: the rest is the host's own
  work), `engine_round_steps` (of the steps, those run inside rounds of several decode
  steps, `engine.decode_steps`), `engine_prefill_steps` and `engine_prefill_s` (of the steps
  and their seconds, those that prefilled a prompt or a new turn). A delta against the
  latest counters seen before the step (`latest_loads` of the previous rollout or
  evaluation); an engine seen for the first time has no baseline and no figures (the run's
  first step, the first after a resume);
- `worker_loop`: `worker_loop_cpu_s`, the CPU seconds of the busiest event loop a rollout
  worker ran in over the step's rollouts (the largest `loop_cpu_s` a result carries: its
  worker's loop from its first task of the step to that result, `rstar2.rollout.loop_clock`).
  Engines in one process share their loop, so the largest, not the sum; in the learner's
  process it is a part of the learner's `loop_cpu_s`, with `graph.worker_processes` a
  worker's own process;
- `progress_line`: a step's metrics row as its one fixed-width progress line.

What it does not do: anything with gradients (rstar2.learner.policy_update).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rstar2.wire import EngineLoad, TrajectoryResult


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def rollout_metrics(results: Sequence[TrajectoryResult]) -> dict[str, float]:
    trajs = [r.trajectory for r in results]
    judged = [t for t in trajs if not t.infra_failure]
    correct = [t for t in judged if t.reward > 0]
    calls = sum(t.tool_calls for t in correct)
    failed = sum(t.failed_tool_calls for t in correct)
    groups: dict[str, set[float]] = {}
    for t in judged:
        groups.setdefault(t.prompt_id, set()).add(float(t.reward))
    return {
        "infra_failed": float(len(trajs) - len(judged)),
        "reward_mean": _mean([float(t.reward) for t in judged]),
        "response_tokens_mean": _mean([t.response_tokens for t in trajs]),
        "tool_calls_mean": _mean([t.tool_calls for t in trajs]),
        "tool_error_ratio_correct": failed / calls if calls else 0.0,
        "correct_with_failed_call": _mean([t.failed_tool_calls > 0 for t in correct]),
        "mixed_group_fraction": _mean([len(v) > 1 for v in groups.values()]),
        "gen_tokens": float(sum(sum(t.loss_mask) for t in trajs)),
        "moved_turns": float(sum(r.moved_turns for r in results)),
    }


def stage_split(results: Sequence[TrajectoryResult], wall_s: float) -> dict[str, float]:
    gen = sum(r.gen_s for r in results)
    tool = sum(r.tool_s for r in results)
    reward = sum(r.reward_s for r in results)
    total = gen + tool + reward
    if total <= 0:
        return {"time_gen_s": wall_s, "time_tool_s": 0.0, "time_reward_s": 0.0}
    return {
        "time_gen_s": wall_s * gen / total,
        "time_tool_s": wall_s * tool / total,
        "time_reward_s": wall_s * reward / total,
    }


def latest_loads(results: Sequence[TrajectoryResult]) -> dict[int, EngineLoad]:
    """Each engine's latest counters among `results` (the most engine steps)."""
    latest: dict[int, EngineLoad] = {}
    for r in results:
        if r.load is None or r.engine < 0:
            continue
        seen = latest.get(r.engine)
        if seen is None or r.load.steps > seen.steps:
            latest[r.engine] = r.load
    return latest


def engine_split(
    results: Sequence[TrajectoryResult], before: dict[int, EngineLoad]
) -> dict[str, float]:
    """The engines' steps, seconds in steps and device wait over the step (see above); {}
    when no engine that served the step has a baseline or counts steps."""
    after = latest_loads(results)
    pairs = [(before[e], load) for e, load in after.items() if e in before]
    if not pairs or not any(a.steps for _, a in pairs):
        return {}
    return {
        "engine_steps": float(sum(a.steps - b.steps for b, a in pairs)),
        "engine_step_s": sum(a.step_s - b.step_s for b, a in pairs),
        "engine_wait_s": sum(a.wait_s - b.wait_s for b, a in pairs),
        "engine_round_steps": float(sum(a.round_steps - b.round_steps for b, a in pairs)),
        "engine_prefill_steps": float(sum(a.prefill_steps - b.prefill_steps for b, a in pairs)),
        "engine_prefill_s": sum(a.prefill_s - b.prefill_s for b, a in pairs),
    }


def worker_loop(results: Sequence[TrajectoryResult]) -> dict[str, float]:
    """`worker_loop_cpu_s` (see above); {} when no result carries a measurement."""
    busiest = max((r.loop_cpu_s for r in results), default=0.0)
    return {"worker_loop_cpu_s": busiest} if busiest > 0 else {}


def accuracy(results: Sequence[TrajectoryResult]) -> float:
    return _mean([float(r.trajectory.reward > 0) for r in results])


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
