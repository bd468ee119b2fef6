"""Profile the trainer: a short `rstar2 train` run on its real actor graph, traced.

`profile_config(path, steps, sets)` reads a train config like `rstar2 train` does (the file or
the embedded default, then `--set` overrides) and shortens it for profiling: one RL stage of
`steps` steps (the first stage's settings), no held-out evaluation, a checkpoint only at the
end. `profile_training(cfg, run_dir)` then

1. gets the starting policy: the SFT'd one when `sft=True` (as `rstar2 train`), else the
   untrained initial model (or `model.path`), so a profile does not pay for SFT;
2. builds the trainer's graph (`rstar2.train.runner.train_graph`) with the learner told to
   hand back the engines' KV samples (and, for `rollout_only`, to skip the policy update and
   the weight push);
3. runs it with tracing on (`record_graph`), narrows the window to the RL steps (the learner
   says when they started and ended: model loading, engine and sandbox start-up and the final
   checkpoint are left out), and adds what the graph does not record itself:
   the per-step stage times from `RUN/metrics.jsonl` (`time_gen_s`, `time_tool_s`,
   `time_reward_s`, `time_learner_s`, `time_sync_s`) and one engine track per rollout worker
   ("rollout.N/engine", the intervals its engine was generating, from the worker's "generate"
   spans).

What it does not do: change the trainer's behaviour beyond the learner's two profiling flags;
interpret the recording (see `report.py`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rstar2.actors.graph_config import GraphConfig
from rstar2.actors.running_graph import GraphResult
from rstar2.metrics import read_metrics
from rstar2.model.tiny import init_model
from rstar2.profile.recording import Recording, role_of
from rstar2.profile.workload import record_graph_blocking
from rstar2.train.config import TrainConfig, config_dict, load_train_config
from rstar2.train.runner import check_model_path, prepare_policy, save_config, train_graph
from rstar2.wire import Span

ENGINE_PORT = "generate"
"""The port name of a rollout worker's generation spans (see `rstar2.rollout.worker`)."""


def profile_config(
    path: str | Path | None = None, steps: int = 3, sets: list[str] | None = None
) -> TrainConfig:
    """The train config at `path` (None: the embedded default) shortened to `steps` RL steps."""
    if steps < 1:
        raise ValueError(f"profile steps must be >= 1, got {steps}")
    cfg = load_train_config(path, sets=sets)
    first = config_dict(cfg)["stages"][0]
    short = [f"stages={json.dumps([{**first, 'steps': steps, 'filter_solved': False}])}"]
    short += [
        "heldout_problems=0",
        "test_problems=0",
        "eval_every=0",
        f"checkpoint_every={steps + 1}",
    ]
    return load_train_config(path, sets=[*(sets or []), *short])


def policy_dir(cfg: TrainConfig, run_dir: Path, sft: bool) -> Path:
    """The starting policy: SFT'd (as `rstar2 train`), or the untrained initial model."""
    if sft:
        return prepare_policy(cfg, run_dir)
    if cfg.model.path:
        return Path(cfg.model.path)
    base = run_dir / "model-init"
    if not (base / "config.json").is_file():
        init_model(base, cfg.model.tiny)
    return base


def profiled_graph(
    cfg: TrainConfig, run_dir: Path, model_dir: Path, rollout_only: bool = False
) -> GraphConfig:
    """The trainer's graph with the learner's profiling flags set."""
    graph = train_graph(cfg, run_dir, model_dir, resume=False)
    actors = [
        dataclasses.replace(a, params={**a.params, "profile": True, "rollout_only": rollout_only})
        if a.name == "learner"
        else a
        for a in graph.actors
    ]
    return dataclasses.replace(graph, actors=actors)


def engine_tracks(rec: Recording) -> list[Span]:
    """One "rollout.N/engine" track per rollout worker: its "generate" handle spans."""
    return [
        Span(f"{s.actor}/engine", ENGINE_PORT, s.start, s.end)
        for s in rec.spans
        if role_of(s.actor) == "rollout" and s.kind == "handle" and s.port == ENGINE_PORT
    ]


def profile_training(
    cfg: TrainConfig,
    run_dir: Path,
    *,
    sft: bool = False,
    rollout_only: bool = False,
    timeout_s: float | None = None,
) -> tuple[GraphResult, Recording]:
    """Run the trainer's graph on `cfg` in the new directory `run_dir`, traced."""
    if (run_dir / "config.json").exists():
        raise ValueError(f"{run_dir} already holds a run: profile into a new directory")
    check_model_path(cfg)  # a model.path that cannot load: one line, before the graph starts
    save_config(cfg, run_dir)
    model_dir = policy_dir(cfg, run_dir, sft)
    graph = profiled_graph(cfg, run_dir, model_dir, rollout_only)
    result, rec = record_graph_blocking(graph, timeout_s=timeout_s, backend=cfg.graph.backend)
    rec = dataclasses.replace(rec, **rl_window(result.result))
    rec.steps = [r for r in read_metrics(run_dir / "metrics.jsonl") if "time_gen_s" in r]
    rec.extra_spans.extend(engine_tracks(rec))
    return result, rec


def rl_window(result: Any) -> dict[str, float]:
    """{"start", "end"} of the RL steps from the learner's stop result ({} if it has none)."""
    profile = result.get("profile") if isinstance(result, Mapping) else None
    window = profile.get("window") if isinstance(profile, Mapping) else None
    if not (isinstance(window, list | tuple) and len(window) == 2):
        return {}
    start, end = float(window[0]), float(window[1])
    return {"start": start, "end": end} if end > start else {}
