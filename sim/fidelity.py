"""Fidelity check of the simulator against a real engine: the embedded CPU `EngineCore`.

Two workloads run for real on the embedded engine (`rstar2/engine/`, one process, one torch
thread by default):

1. *Calibration*: single-turn requests with uniform output lengths, submitted at once. Every
   `EngineCore.step()` is timed and recorded as a `StepPoint` (batch = requests in the step,
   context = KV tokens the decoding requests attend to, prefill = tokens of admitted requests),
   and `sim.cost.fit` fits ``a + b*batch + c*context + p*prefill`` to them.
2. *Check*: a different workload (log-normal output lengths, more requests, a KV budget tight
   enough to force vLLM-style preemption). Its makespan (first submission to last finish) is
   measured on the engine and predicted by `sim.simulator.Simulation` with the fitted cost
   model, one engine, the same KV blocks and `max_num_seqs`.

The reported error is ``|predicted - measured| / measured`` of the check's makespan (target:
within 15%). Both runs use fixed seeds; the timings are wall-clock, so a loaded machine makes
them noisy. What it does not model: the engine's per-step token budget (set high enough here
never to bind), Python overhead between steps (inside the measured makespan, outside the
fitted steps), and multi-turn traffic (the embedded engine serves single requests).
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass

from torch import nn

from rstar2.engine.config import EngineConfig
from rstar2.engine.core import EngineCore
from rstar2.engine.protocol import SamplingParams
from rstar2.engine.scheduler import ScheduleResult
from rstar2.scheduler.static_split import StaticSplit
from sim.cluster import Cluster
from sim.cost import CostModel, StepPoint, fit
from sim.simulator import Simulation
from sim.workload import TrajectorySpec, Turn


@dataclass(frozen=True)
class EngineWorkload:
    """Single-turn requests: prompt lengths, output lengths, and the engine's limits."""

    prompt_lengths: list[int]
    output_lengths: list[int]
    kv_tokens: int
    """KV budget of the engine, in tokens (whole 16-token blocks)."""
    max_num_seqs: int
    arrival_steps: list[int] | None = None
    """Engine step at which each request is submitted (None: all before the first step)."""


@dataclass(frozen=True)
class EngineRun:
    """What a real run measured."""

    makespan_s: float
    steps: list[StepPoint]
    preemptions: int


@dataclass(frozen=True)
class FidelityReport:
    cost: CostModel
    calibration: EngineRun
    check: EngineRun
    predicted_makespan_s: float
    predicted_preemptions: int
    fit_step_error: float
    """Mean relative error of the fitted step times on the calibration points."""

    @property
    def makespan_error(self) -> float:
        return abs(self.predicted_makespan_s - self.check.makespan_s) / self.check.makespan_s


def calibration_workload(
    n: int = 192, max_tokens: int = 256, spread_steps: int = 400, seed: int = 0
) -> EngineWorkload:
    """A sweep: uniform output lengths 8..max_tokens and prompts 16..256 arriving at random
    steps over `spread_steps`, so the batch, the context and the prefill per step all vary;
    a KV budget that never binds."""
    rng = random.Random(seed)
    prompts = [rng.randint(16, 256) for _ in range(n)]
    outputs = [rng.randint(8, max_tokens) for _ in range(n)]
    arrivals = sorted(rng.randint(0, spread_steps) for _ in range(n))
    return EngineWorkload(prompts, outputs, 16 * 4096, max_num_seqs=256, arrival_steps=arrivals)


def check_workload(
    n: int = 96, median_tokens: int = 96, max_tokens: int = 640, seed: int = 1
) -> EngineWorkload:
    """Log-normal output lengths (sigma 0.8, capped), prompts 32..128, and a KV budget of
    about a third of the peak demand, so the engine queues and preempts."""
    rng = random.Random(seed)
    prompts = [rng.randint(32, 128) for _ in range(n)]
    outputs = [
        min(max_tokens, max(4, round(rng.lognormvariate(math.log(median_tokens), 0.8))))
        for _ in range(n)
    ]
    demand = sum(p + o for p, o in zip(prompts, outputs, strict=True))
    kv = max(16 * -(-(max(prompts) + max_tokens) // 16), 16 * (demand // 3 // 16))
    return EngineWorkload(prompts, outputs, kv_tokens=kv, max_num_seqs=256)


def _point(result: ScheduleResult, step_s: float) -> StepPoint:
    """The step's shape as the cost model sees it (called after the step updated the requests)."""
    prefill = sum(n for _, n in result.scheduled if n > 1)
    context = sum(req.num_computed for req, n in result.scheduled if n == 1)
    return StepPoint(len(result.scheduled), context, prefill, step_s)


def run_on_engine(model: nn.Module, work: EngineWorkload, threads: int = 1) -> EngineRun:
    """Run the workload on a fresh EngineCore, timing every step."""
    cfg = EngineConfig(
        kv_budget_tokens=work.kv_tokens,
        max_num_seqs=work.max_num_seqs,
        max_num_batched_tokens=1 << 20,  # the simulator has no per-step token budget
        num_threads=threads,
    )
    core = EngineCore(model, cfg)
    core.generate([[1] * 8], SamplingParams(4, seed=0))  # warm-up
    recorded: list[ScheduleResult] = []
    schedule = core.scheduler.schedule

    def recording(admit: bool = True) -> ScheduleResult:
        recorded.append(schedule(admit=admit))
        return recorded[-1]

    core.scheduler.schedule = recording  # type: ignore[method-assign]
    arrivals = work.arrival_steps or [0] * len(work.prompt_lengths)
    pending = sorted(range(len(arrivals)), key=lambda i: (arrivals[i], i), reverse=True)
    points: list[StepPoint] = []
    step = 0
    start = time.thread_time()
    while pending or core.has_unfinished():
        while pending and arrivals[pending[-1]] <= step:
            _submit(core, work, pending.pop())
        step += 1
        t0 = time.thread_time()
        core.step()
        step_s = time.thread_time() - t0
        if recorded[-1].scheduled:
            points.append(_point(recorded[-1], step_s))
    makespan = time.thread_time() - start
    return EngineRun(makespan, points, core.stats().preemptions)


def _submit(core: EngineCore, work: EngineWorkload, i: int) -> None:
    """Add request i: a deterministic pseudo-random prompt of its length, sampled at T=1 with
    no stop token, so it produces exactly its output length."""
    vocab = core.vocab_size
    prompt = [1 + (i * 7919 + k * 31) % (vocab - 1) for k in range(work.prompt_lengths[i])]
    params = SamplingParams(work.output_lengths[i], temperature=1.0, seed=i)
    core.add_request(f"r{i}", prompt, params)


def simulate_engine(work: EngineWorkload, cost: CostModel) -> tuple[float, int]:
    """(makespan, preemptions) the simulator predicts for the workload on one engine."""
    if work.arrival_steps is not None and any(work.arrival_steps):
        raise ValueError("the simulator replays workloads whose requests all arrive at once")
    specs = [
        TrajectorySpec(f"r{i}", f"r{i}", p, n, (Turn(n),))
        for i, (p, n) in enumerate(zip(work.prompt_lengths, work.output_lengths, strict=True))
    ]
    cluster = Cluster(1, work.kv_tokens, cost, work.max_num_seqs)
    result = Simulation(StaticSplit(1), specs, cluster).run()
    return result.makespan_s, result.preemptions


def step_error(cost: CostModel, points: list[StepPoint]) -> float:
    """Mean relative error of the model's step times on measured points."""
    errors = [
        abs(cost.step_s(p.batch, p.context_tokens, p.prefill_tokens) - p.step_s) / p.step_s
        for p in points
    ]
    return sum(errors) / len(errors)


def fidelity(
    model: nn.Module,
    calibration: EngineWorkload | None = None,
    check: EngineWorkload | None = None,
    threads: int = 1,
) -> FidelityReport:
    """Calibrate on one workload, predict another's makespan; see the module docstring."""
    calib = run_on_engine(model, calibration or calibration_workload(), threads)
    cost = fit(calib.steps)
    check_work = check or check_workload()
    real = run_on_engine(model, check_work, threads)
    predicted, preemptions = simulate_engine(check_work, cost)
    return FidelityReport(cost, calib, real, predicted, preemptions, step_error(cost, calib.steps))
