"""Configuration of one simulator run, and turning it into a ready `Simulation`.

`SimConfig` names the cluster (GPU and model presets, GPUs, tensor parallelism), the cost model
(roofline preset, a calibration file, or the hand-solvable constant mode), the engines'
vLLM limits, the workload and the scheduler; for a run of several steps (`build_run`) also the
staleness bound and the learner (`LearnerConfig`). `build(cfg, progress)` resolves presets and
returns the one-step `Simulation`, `build_run` the `TrainingRun`; they do no I/O except reading
a calibration, trace or metrics file.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal

from rstar2.config import require
from rstar2.scheduler import SchedulerConfig, make_policy
from rstar2.scheduler.length_predictor import LengthPredictor
from sim.cluster import Cluster
from sim.cost import (
    GPUS,
    MODELS,
    auto_tp,
    constant_cost,
    fit,
    kv_capacity_tokens,
    load_points,
    roofline,
)
from sim.learner import LearnerCost, from_metrics, roofline_learner
from sim.run_steps import RunSteps
from sim.simulator import ProgressFn, Simulation
from sim.training_run import TrainingRun
from sim.workload import (
    SCENARIOS,
    WorkloadConfig,
    generate,
    load_trace_steps,
    mean_response_tokens,
    previous_step,
)


@dataclass
class LearnerConfig:
    """The learner of a simulated run (`sim.learner`: the formulas)."""

    colocated: bool = False
    """False: the learner has its own devices and updates while the engines generate. True: it
    shares the engines' devices; the engines drain and stop for the update and the push."""
    gpus: int = 0
    """Learner GPUs for the FLOPs model; 0: as many as the rollout cluster (`SimConfig.gpus`)."""
    mfu: float = 0.3
    """Model FLOPs utilisation of the update."""
    epochs: int = 1
    """Passes (forward + backward) over the step's batch."""
    forwards: int = 0
    """Extra forward passes per token (reference or old-logprob models); rstar2's recipe: 0."""
    train_fraction: float = 0.5
    """Share of a step's tokens trained (GRPO-RoC keeps G of its 2G rollouts)."""
    push_bandwidth_gbs: float = 8.6
    """Weight push bandwidth in GB/s (verl's checkpoint engine: 60 GB in ~7 s)."""
    push_latency_s: float = 0.1
    """Fixed seconds of every push."""
    update_s: float | None = None
    """Every update takes this long (overrides the FLOPs model or the fit)."""
    push_s: float | None = None
    """Every push takes this long (overrides bytes / bandwidth or the fit)."""
    metrics: str | None = None
    """A run's metrics.jsonl to fit the update and push costs to (needs the run's trace)."""

    def validate(self) -> None:
        require(self.gpus >= 0, "learner.gpus", self.gpus, ">= 0")
        require(0 < self.mfu <= 1, "learner.mfu", self.mfu, "in (0, 1]")
        require(self.epochs >= 1, "learner.epochs", self.epochs, ">= 1")
        require(self.forwards >= 0, "learner.forwards", self.forwards, ">= 0")
        require(
            0 < self.train_fraction <= 1, "learner.train_fraction", self.train_fraction, "in (0, 1]"
        )
        require(self.push_bandwidth_gbs > 0, "learner.push_bandwidth_gbs",
                self.push_bandwidth_gbs, "> 0")  # fmt: skip
        require(self.push_latency_s >= 0, "learner.push_latency_s", self.push_latency_s, ">= 0")
        for name in ("update_s", "push_s"):
            value = getattr(self, name)
            require(value is None or value >= 0, f"learner.{name}", value, ">= 0")


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
    tool_workers: int | None = None
    """Sandbox workers serving tool calls first come, first served (None: unlimited)."""
    steps: int = 1
    """RL steps to simulate (`build_run`); 1 with `build`."""
    max_staleness: int = 0
    """k: step t's generation may start once the engines hold version t-1-k (0: synchronous)."""
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    """The learner's update and push costs (runs of several steps)."""
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
        require(
            self.tool_workers is None or self.tool_workers >= 1,
            "tool_workers", self.tool_workers, ">= 1",
        )  # fmt: skip
        require(self.steps >= 1, "steps", self.steps, ">= 1")
        require(self.max_staleness >= 0, "max_staleness", self.max_staleness, ">= 0")
        self.learner.validate()


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


def resolve_cluster(cfg: SimConfig, max_len: int) -> Cluster:
    """The engines, KV tokens per engine, sequence limit and cost model of the config."""
    model, gpu = MODELS[cfg.model], GPUS[cfg.gpu]
    tp = cfg.tp or auto_tp(model, gpu, cfg.gpus, 16 * max_len)
    kv = cfg.kv_tokens if cfg.kv_tokens is not None else kv_capacity_tokens(model, gpu, tp)
    if cfg.cost == "constant":
        cost = constant_cost(cfg.step_s)
    elif cfg.calibration is not None:
        cost = fit(load_points(cfg.calibration))
    else:
        cost = roofline(model, gpu, tp)
    return Cluster(cfg.gpus // tp, kv, cost, cfg.max_num_seqs)


def build(cfg: SimConfig, progress: ProgressFn | None = None) -> Simulation:
    """A ready-to-run simulation of one RL step under `cfg`."""
    wl = scenario_workload(cfg)
    trajectories = generate(wl, cfg.seed)
    max_len = max(t.prompt_tokens + t.max_response_tokens for t in trajectories)
    cluster = resolve_cluster(cfg, max_len)
    return Simulation(
        make_policy(cfg.scheduler, cluster.num_engines), trajectories, cluster,
        progress=progress, move_turns=cfg.scheduler.move_turns, predictor=predictor(cfg, wl),
        tool_workers=cfg.tool_workers,
    )  # fmt: skip


RUN_STEP_SEED = 7919
"""Seed offset between consecutive generated steps of a run (step t: seed + (t-1) x this)."""


def run_steps(cfg: SimConfig, wl: WorkloadConfig) -> RunSteps:
    """The trajectories of each of the run's `cfg.steps` steps, made when asked for.

    Generated: step t is `generate(wl, seed + (t-1) x RUN_STEP_SEED)` (step 1 is the one-step
    simulator's step). A trace: its steps in order from `trace_step` (default: its first),
    starting over at the first when the trace has fewer steps than the run."""
    if wl.trace is None:
        seed = cfg.seed
        return RunSteps(lambda t: generate(wl, seed + (t - 1) * RUN_STEP_SEED), cfg.steps)
    recorded = load_trace_steps(wl.trace)
    if wl.trace_step is not None and wl.trace_step not in recorded:
        raise ValueError(f"{wl.trace}: no records of step {wl.trace_step}")
    order = list(recorded)
    first = order.index(wl.trace_step) if wl.trace_step is not None else 0
    return RunSteps(lambda t: recorded[order[(first + t - 1) % len(order)]], cfg.steps)


def learner_cost(cfg: SimConfig, wl: WorkloadConfig) -> LearnerCost:
    """The learner's costs: the FLOPs model, or the fit to `learner.metrics`, then overrides."""
    lc = cfg.learner
    if lc.metrics is not None:
        if wl.trace is None:
            raise ValueError("learner.metrics needs the run's trace (workload.trace)")
        cost = from_metrics(lc.metrics, load_trace_steps(wl.trace))
    else:
        cost = roofline_learner(
            MODELS[cfg.model], GPUS[cfg.gpu], lc.gpus or cfg.gpus, lc.mfu, lc.epochs,
            lc.forwards, lc.train_fraction, lc.push_bandwidth_gbs * 1e9, lc.push_latency_s,
        )  # fmt: skip
    if lc.update_s is not None:
        cost = replace(cost, fixed_s=lc.update_s, per_token_s=0.0)
    if lc.push_s is not None:
        cost = replace(cost, push_s=lc.push_s)
    return cost


def build_run(cfg: SimConfig, progress: ProgressFn | None = None) -> TrainingRun:
    """A ready-to-run simulation of `cfg.steps` RL steps under `cfg.max_staleness`."""
    wl = scenario_workload(cfg)
    steps = run_steps(cfg, wl)
    cluster = resolve_cluster(cfg, steps.max_len)
    return TrainingRun(
        make_policy(cfg.scheduler, cluster.num_engines), steps, cluster, learner_cost(cfg, wl),
        max_staleness=cfg.max_staleness, colocated=cfg.learner.colocated, progress=progress,
        move_turns=cfg.scheduler.move_turns, predictor=predictor(cfg, wl),
        tool_workers=cfg.tool_workers,
    )  # fmt: skip


def predictor(cfg: SimConfig, wl: WorkloadConfig) -> LengthPredictor:
    """The length predictor a run starts with (see `SimConfig.warm_predictor`)."""
    before = previous_step(wl, cfg.seed) if cfg.warm_predictor else None
    if not before:
        return LengthPredictor()
    return LengthPredictor(mean_response_tokens(before), len(before))
