"""Configuration of one simulator run, and turning it into a ready `Simulation`.

`SimConfig` names the cluster (GPU and model presets, GPUs, tensor parallelism), the cost model
(roofline preset, a calibration file, or the hand-solvable constant mode), the engines'
vLLM limits, the workload and the scheduler. `build(cfg, progress)` resolves presets and
returns the `Simulation`; it does no I/O except reading a calibration or trace file.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal

from rstar2.config import require
from rstar2.scheduler import SchedulerConfig, make_policy
from rstar2.scheduler.length_predictor import LengthPredictor
from sim.cost import (
    GPUS,
    MODELS,
    CostModel,
    auto_tp,
    constant_cost,
    fit,
    kv_capacity_tokens,
    load_points,
    roofline,
)
from sim.simulator import ProgressFn, Simulation
from sim.workload import (
    SCENARIOS,
    WorkloadConfig,
    generate,
    mean_response_tokens,
    previous_step,
)


@dataclass
class SimConfig:
    gpus: int = 64
    """GPUs in the rollout cluster (engines = gpus / tp)."""
    gpu: str = "mi300x"
    """GPU preset: mi300x, h100 or h200."""
    model: str = "qwen3-14b"
    """Model preset: qwen3-14b or qwen2.5-32b."""
    tp: int = 0
    """Tensor-parallel GPUs per engine; 0 picks the smallest that holds 16 full-length sequences."""
    cost: Literal["roofline", "constant"] = "roofline"
    """Step cost: the roofline preset (or `calibration`), or every decode step `step_s`, prefill
    free, tools instant ('constant', for cases solvable by hand)."""
    step_s: float = 0.03
    """Seconds per decode step in cost 'constant'."""
    calibration: str | None = None
    """JSON/CSV file of measured steps; its least-squares fit replaces the roofline."""
    kv_tokens: int | None = None
    """Override of each engine's KV capacity in tokens (default: from the presets)."""
    max_num_seqs: int = 1024
    """vLLM max_num_seqs: running sequences per engine at most (verl's rollout default)."""
    seed: int = 0
    """Seed of the generated workload; same seed, same result."""
    scenario: str = "paper"
    """Workload preset applied under `workload` overrides: paper, short-uniform, heavy-tail,
    tool-heavy."""
    workload: WorkloadConfig = field(default_factory=WorkloadConfig)
    """The RL step's trajectories (P prompts x N rollouts, or a trace)."""
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    """The routing policy and its knobs."""
    warm_predictor: bool = True
    """Start the scheduler's length predictor from the mean response of the step before
    (`sim.workload.previous_step`: an independent draw of the same workload, or a trace's
    earlier step), as a live scheduler knows it from the second RL step on. False: a cold
    first step (no prediction until trajectories finish; kv_aware reserves the maximum)."""

    def validate(self) -> None:
        require(self.gpus >= 1, "gpus", self.gpus, ">= 1")
        require(self.gpu in GPUS, "gpu", self.gpu, "one of " + ", ".join(GPUS))
        require(self.model in MODELS, "model", self.model, "one of " + ", ".join(MODELS))
        require(self.tp in (0, 1, 2, 4, 8), "tp", self.tp, "0 (auto), 1, 2, 4 or 8")
        require(self.tp == 0 or self.gpus % self.tp == 0, "tp", self.tp, "a divisor of gpus")
        require(self.step_s > 0, "step_s", self.step_s, "> 0")
        require(
            self.kv_tokens is None or self.kv_tokens >= 16, "kv_tokens", self.kv_tokens, ">= 16"
        )
        require(self.max_num_seqs >= 1, "max_num_seqs", self.max_num_seqs, ">= 1")
        require(
            self.scenario in SCENARIOS, "scenario", self.scenario, "one of " + ", ".join(SCENARIOS)
        )


def scenario_workload(cfg: SimConfig) -> WorkloadConfig:
    """The workload config with the scenario preset applied to fields left at their defaults."""
    defaults = WorkloadConfig()
    preset = {
        k: v
        for k, v in SCENARIOS[cfg.scenario].items()
        if getattr(cfg.workload, k) == getattr(defaults, k)
    }
    wl = replace(cfg.workload, **preset)  # type: ignore[arg-type]
    if cfg.cost == "constant":
        wl = replace(wl, tool_latency="constant", tool_latency_mean_s=0.0)
    wl.validate()
    return wl


def resolve_cluster(cfg: SimConfig, max_len: int) -> tuple[int, int, CostModel]:
    """(engines, KV tokens per engine, cost model) for the config."""
    model, gpu = MODELS[cfg.model], GPUS[cfg.gpu]
    tp = cfg.tp or auto_tp(model, gpu, cfg.gpus, 16 * max_len)
    kv = cfg.kv_tokens if cfg.kv_tokens is not None else kv_capacity_tokens(model, gpu, tp)
    if cfg.cost == "constant":
        cost = constant_cost(cfg.step_s)
    elif cfg.calibration is not None:
        cost = fit(load_points(cfg.calibration))
    else:
        cost = roofline(model, gpu, tp)
    return cfg.gpus // tp, kv, cost


def build(cfg: SimConfig, progress: ProgressFn | None = None) -> Simulation:
    """A ready-to-run simulation of one RL step under `cfg`."""
    wl = scenario_workload(cfg)
    trajectories = generate(wl, cfg.seed)
    max_len = max(t.prompt_tokens + t.max_response_tokens for t in trajectories)
    engines, kv, cost = resolve_cluster(cfg, max_len)
    policy = make_policy(cfg.scheduler, engines)
    return Simulation(
        policy, trajectories, engines, kv, cost, cfg.max_num_seqs, progress,
        move_turns=cfg.scheduler.move_turns, predictor=predictor(cfg, wl),
    )  # fmt: skip


def predictor(cfg: SimConfig, wl: WorkloadConfig) -> LengthPredictor:
    """The length predictor a run starts with (see `SimConfig.warm_predictor`)."""
    before = previous_step(wl, cfg.seed) if cfg.warm_predictor else None
    if not before:
        return LengthPredictor()
    return LengthPredictor(mean_response_tokens(before), len(before))
