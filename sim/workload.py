"""Workloads: the trajectories of one RL step, generated from distributions or replayed.

A trajectory is a prompt followed by turns; each turn generates `model_tokens` and, except the
last, ends in a tool call that returns `tool_tokens` of output after `tool_latency_s`. The step
is P prompts x N rollouts (`generate`), or a JSONL trace (`load_trace`) with one trajectory per
line in the format the live trainer records (`RUN/rollout_trace.jsonl`, built by
`rstar2.train.rollout_trace.trace_record`; see docs/sim.md):

    {"step": 3, "prompt_id": "p0", "prompt_tokens": 312, "max_response_tokens": 12288,
     "turns": [{"model_tokens": 800, "tool_tokens": 60, "tool_latency_s": 0.21},
               {"model_tokens": 950, "tool_tokens": 0, "tool_latency_s": 0.0}]}

A trace of several steps (records with a `step`) replays one of them: the last by default.

Generated lengths: the model tokens of a trajectory are lognormal with the configured mean and
sigma (or uniform), capped at the response budget; tool calls per trajectory are Poisson
(capped at max_turns - 1); the response is split over turns by Dirichlet(1) proportions; tool
output tokens are lognormal; tool latency is exponential, lognormal or constant with the given
mean. Tool-output tokens count against the shared response budget, as in rStar2. All of it is a
pure function of (config, seed). It does not model correlation between rollouts of one prompt.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from rstar2.config import require


@dataclass(frozen=True)
class Turn:
    model_tokens: int
    tool_tokens: int = 0
    tool_latency_s: float = 0.0


@dataclass(frozen=True)
class TrajectorySpec:
    traj_id: str
    prompt_id: str
    prompt_tokens: int
    max_response_tokens: int
    turns: tuple[Turn, ...]

    @property
    def model_tokens(self) -> int:
        return sum(t.model_tokens for t in self.turns)

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + sum(t.model_tokens + t.tool_tokens for t in self.turns)


@dataclass
class WorkloadConfig:
    prompts: int = 512
    """Prompts per RL step (paper: 512)."""
    rollouts: int = 32
    """Rollouts per prompt (paper: 2G = 32)."""
    length_dist: Literal["lognormal", "uniform"] = "lognormal"
    """Distribution of a trajectory's model tokens."""
    mean_response_tokens: float = 4000.0
    """lognormal: mean model tokens per trajectory before the cap."""
    sigma: float = 1.0
    """lognormal: sigma of log length (1.0 puts ~5% at a 12K cap with mean 4000)."""
    uniform_min_tokens: int = 200
    """uniform: smallest model-token count."""
    uniform_max_tokens: int = 1000
    """uniform: largest model-token count."""
    max_response_tokens: int = 12288
    """Response budget shared by all turns, tool output included (the cap)."""
    prompt_tokens_min: int = 150
    """Smallest prompt (system prompt plus problem)."""
    prompt_tokens_max: int = 600
    """Largest prompt."""
    tool_calls_mean: float = 5.0
    """Mean tool calls per trajectory (Poisson)."""
    max_turns: int = 10
    """Assistant turns per trajectory at most (paper: 10 in stages 1-2)."""
    tool_tokens_mean: float = 120.0
    """Mean tokens of one tool response (lognormal, sigma 0.5)."""
    tool_latency: Literal["exponential", "lognormal", "constant"] = "lognormal"
    """Distribution of one tool call's latency."""
    tool_latency_mean_s: float = 0.3
    """Mean tool-call latency in seconds (paper: ~0.3 s)."""
    trace: str | None = None
    """Replay this JSONL trace instead of generating (the fields above are then ignored)."""
    trace_step: int | None = None
    """With a trace of several steps: the step to replay (None: the last one)."""

    def validate(self) -> None:
        require(self.prompts >= 1, "prompts", self.prompts, ">= 1")
        require(self.rollouts >= 1, "rollouts", self.rollouts, ">= 1")
        require(
            self.mean_response_tokens >= 1,
            "mean_response_tokens",
            self.mean_response_tokens,
            ">= 1",
        )
        require(self.sigma >= 0, "sigma", self.sigma, ">= 0")
        require(
            1 <= self.uniform_min_tokens <= self.uniform_max_tokens,
            "uniform_min_tokens",
            self.uniform_min_tokens,
            "1 <= uniform_min_tokens <= uniform_max_tokens",
        )
        require(
            self.max_response_tokens >= 1, "max_response_tokens", self.max_response_tokens, ">= 1"
        )
        require(
            1 <= self.prompt_tokens_min <= self.prompt_tokens_max,
            "prompt_tokens_min",
            self.prompt_tokens_min,
            "1 <= prompt_tokens_min <= prompt_tokens_max",
        )
        require(self.tool_calls_mean >= 0, "tool_calls_mean", self.tool_calls_mean, ">= 0")
        require(self.max_turns >= 1, "max_turns", self.max_turns, ">= 1")
        require(self.tool_tokens_mean >= 1, "tool_tokens_mean", self.tool_tokens_mean, ">= 1")
        require(
            self.tool_latency_mean_s >= 0, "tool_latency_mean_s", self.tool_latency_mean_s, ">= 0"
        )


SCENARIOS: dict[str, dict[str, object]] = {
    "paper": {},
    "short-uniform": {
        "length_dist": "uniform",
        "tool_calls_mean": 1.0,
        "max_response_tokens": 2048,
    },
    "heavy-tail": {"sigma": 1.6, "mean_response_tokens": 3000.0, "tool_calls_mean": 3.0},
    "tool-heavy": {"tool_calls_mean": 12.0, "max_turns": 30, "tool_latency_mean_s": 1.0},
    "kv-pressure": {"mean_response_tokens": 8000.0},
}
"""Named workload presets (overrides of `WorkloadConfig`); 'paper' is the paper-scale step."""


def _lognormal(rng: random.Random, mean: float, sigma: float) -> float:
    return rng.lognormvariate(math.log(mean) - sigma * sigma / 2, sigma)


def _poisson(rng: random.Random, mean: float) -> int:
    # Knuth's method is fine for the small means used here.
    limit, k, prod = math.exp(-mean), 0, rng.random()
    while prod > limit:
        k += 1
        prod *= rng.random()
    return k


def _latency(rng: random.Random, cfg: WorkloadConfig) -> float:
    mean = cfg.tool_latency_mean_s
    if mean == 0 or cfg.tool_latency == "constant":
        return mean
    if cfg.tool_latency == "exponential":
        return rng.expovariate(1.0 / mean)
    return _lognormal(rng, mean, 0.5)


def _model_tokens(rng: random.Random, cfg: WorkloadConfig) -> int:
    if cfg.length_dist == "uniform":
        return rng.randint(cfg.uniform_min_tokens, cfg.uniform_max_tokens)
    return max(1, round(_lognormal(rng, cfg.mean_response_tokens, cfg.sigma)))


def _trajectory(
    rng: random.Random, cfg: WorkloadConfig, traj_id: str, prompt_id: str, prompt_tokens: int
) -> TrajectorySpec:
    model = min(_model_tokens(rng, cfg), cfg.max_response_tokens)
    calls = min(_poisson(rng, cfg.tool_calls_mean), cfg.max_turns - 1, model - 1)
    tools = [max(1, round(_lognormal(rng, cfg.tool_tokens_mean, 0.5))) for _ in range(calls)]
    while calls and model + sum(tools) > cfg.max_response_tokens:  # the budget is shared
        overflow = model + sum(tools) - cfg.max_response_tokens
        if model - overflow >= calls + 1:
            model -= overflow
        else:
            calls -= 1
            tools.pop()
    weights = [rng.expovariate(1.0) for _ in range(calls + 1)]
    total_w = sum(weights)
    split = [1 + int((model - calls - 1) * w / total_w) for w in weights]
    split[-1] += model - sum(split)
    turns = tuple(
        Turn(split[i], tools[i], _latency(rng, cfg)) if i < calls else Turn(split[i])
        for i in range(calls + 1)
    )
    return TrajectorySpec(traj_id, prompt_id, prompt_tokens, cfg.max_response_tokens, turns)


def generate(cfg: WorkloadConfig, seed: int) -> list[TrajectorySpec]:
    """The trajectories of one step: P prompts x N rollouts, a pure function of (cfg, seed)."""
    if cfg.trace is not None:
        return load_trace(cfg.trace, cfg.trace_step)
    rng = random.Random(seed)
    out = []
    for p in range(cfg.prompts):
        prompt_tokens = rng.randint(cfg.prompt_tokens_min, cfg.prompt_tokens_max)
        for r in range(cfg.rollouts):
            out.append(_trajectory(rng, cfg, f"p{p}-r{r}", f"p{p}", prompt_tokens))
    return out


PREVIOUS_STEP_SEED = 1_000_003
"""Offset of the seed of the step before a generated one (`previous_step`)."""


def previous_step(cfg: WorkloadConfig, seed: int) -> list[TrajectorySpec] | None:
    """The step before the one `generate(cfg, seed)` plays, as a live scheduler has seen it:
    an independent draw of the same distributions (seed + `PREVIOUS_STEP_SEED`), or for a trace
    the step recorded before the replayed one (None when the trace holds no earlier step)."""
    if cfg.trace is None:
        return generate(cfg, seed + PREVIOUS_STEP_SEED)
    steps = sorted(_steps(_records(cfg.trace)))
    played = cfg.trace_step if cfg.trace_step is not None else (steps[-1] if steps else None)
    earlier = [s for s in steps if played is not None and s < played]
    return load_trace(cfg.trace, earlier[-1]) if earlier else None


def mean_response_tokens(trajectories: list[TrajectorySpec]) -> float:
    """Mean tokens after the prompt (model and tool tokens) of a step's trajectories."""
    return sum(t.total_tokens - t.prompt_tokens for t in trajectories) / len(trajectories)


def _turn_from(obj: object, where: str) -> Turn:
    if not isinstance(obj, dict):
        raise ValueError(f"{where}: a turn must be an object, got {obj!r}")
    turn = Turn(
        int(obj["model_tokens"]),
        int(obj.get("tool_tokens", 0)),
        float(obj.get("tool_latency_s", 0.0)),
    )
    if turn.model_tokens < 1 or turn.tool_tokens < 0 or turn.tool_latency_s < 0:
        raise ValueError(f"{where}: need model_tokens >= 1 and non-negative tool fields, got {obj}")
    return turn


def load_trace(path: str | Path, step: int | None = None) -> list[TrajectorySpec]:
    """Trajectories from a JSONL trace (one object per line; format in the module docstring).

    Records with a `step` field: only those of `step` (default: the largest in the file)."""
    lines = _records(path)
    steps = _steps(lines)
    if step is not None and step not in steps:
        raise ValueError(f"{path}: no records of step {step} (steps: {sorted(steps) or 'none'})")
    chosen = step if step is not None else (max(steps) if steps else None)
    out = [
        _spec(obj, f"{path}:{n}", k)
        for k, (n, obj) in enumerate(
            (n, obj)
            for n, obj in lines
            if chosen is None or not isinstance(obj, dict) or obj.get("step") == chosen
        )
    ]
    if not out:
        raise ValueError(f"{path}: the trace holds no trajectories")
    return out


def load_trace_steps(path: str | Path) -> dict[int, list[TrajectorySpec]]:
    """Every step of a multi-step trace (records with a `step`), read once, in step order.

    A trace whose records carry no `step` is one step, numbered 1."""
    lines = _records(path)
    if not _steps(lines):
        return {1: load_trace(path)}
    grouped: dict[int, list[tuple[int, object]]] = {}
    for n, obj in lines:
        step = obj.get("step") if isinstance(obj, dict) else None
        if step is None:
            raise ValueError(f"{path}:{n}: a record without a step in a trace of several steps")
        grouped.setdefault(step, []).append((n, obj))
    return {
        step: [_spec(obj, f"{path}:{n}", k) for k, (n, obj) in enumerate(grouped[step])]
        for step in sorted(grouped)
    }


def _spec(obj: object, where: str, index: int) -> TrajectorySpec:
    """One trace record as a trajectory (`index`: its position in its step, for a default id)."""
    try:
        turns = tuple(_turn_from(t, where) for t in obj["turns"])  # type: ignore[index]
        prompt_tokens = int(obj["prompt_tokens"])  # type: ignore[index]
        used = sum(t.model_tokens + t.tool_tokens for t in turns)
        spec = TrajectorySpec(
            str(obj.get("traj_id", f"t{index}")),  # type: ignore[union-attr]
            str(obj["prompt_id"]),  # type: ignore[index]
            prompt_tokens,
            int(obj.get("max_response_tokens", used)),  # type: ignore[union-attr]
            turns,
        )
    except (KeyError, TypeError, AttributeError) as e:
        why = f"no field {e}" if isinstance(e, KeyError) else str(e)
        raise ValueError(
            f"{where}: not a trajectory record ({why}; a rollout_trace.jsonl record has "
            "prompt_id, prompt_tokens and turns)"
        ) from None
    if not turns or prompt_tokens < 1 or spec.max_response_tokens < used:
        raise ValueError(f"{where}: need >= 1 turn, prompt_tokens >= 1, budget >= used tokens")
    return spec


def _steps(records: list[tuple[int, object]]) -> set[int]:
    """The `step` values the records of a trace carry."""
    return {obj.get("step") for _, obj in records if isinstance(obj, dict)} - {None}


def _records(path: str | Path) -> list[tuple[int, object]]:
    """(line number, parsed JSON) of every non-empty line; a line that is not JSON is an error
    naming it."""
    out = []
    for n, line in enumerate(Path(path).read_text().splitlines(), start=1):
        if line.strip():
            try:
                out.append((n, json.loads(line)))
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{n}: not a trajectory record ({e!r})") from None
    return out
