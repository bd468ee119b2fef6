"""How well a split that KNOWS every trajectory's length does: an oracle reference for the bound.

Not a policy a live scheduler can run (no scheduler knows lengths before generating them). It
answers: how much of the gap between `kv_aware` and the lower bound is the price of not knowing
the lengths? (docs/sim.md, "How tight is the bound".)

The split is sticky and made up front. Trajectories of at least `--threshold` generated tokens
may only go to the first `--long-engines` engines, so that few engines pay for the long
trajectories' many steps, as long as their full lengths fit an engine's KV together (they all
run at once near the end); every trajectory, longest first, goes to the allowed engine whose
floor ``a * longest + per-token work`` (`sim.bound.sticky_bound`) grows least. `--sweep` scores
a grid of (long engines, threshold) by that floor, which predicts a sticky run's makespan
closely (it ignores KV, so a candidate may preempt), and simulates the best five. It prints the simulated makespan, its ratio to the lower
bound and to the spread floor, and preemptions.

    .venv/bin/python scripts/sim_oracle_split.py --sweep [--seed 0] [--json]
    .venv/bin/python scripts/sim_oracle_split.py --long-engines 36 --threshold 7500
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import replace

from rstar2.scheduler.policy import Policy, TurnRequest
from sim.bound import bound_parts, trajectory_work
from sim.cluster import Cluster
from sim.config import SimConfig, build
from sim.cost import CostModel
from sim.simulator import SimResult, Simulation
from sim.workload import TrajectorySpec, WorkloadConfig


class FixedSplit(Policy):
    """Every turn of a trajectory to the engine chosen for it up front."""

    name = "oracle_split"

    def __init__(self, num_engines: int, engine_of: dict[str, int]) -> None:
        super().__init__(num_engines)
        self.engine_of = engine_of

    def assign(self, req: TurnRequest) -> int:
        return self.engine_of[req.traj_id]


def oracle_split(
    workload: Sequence[TrajectorySpec],
    cost: CostModel,
    num_engines: int,
    kv_tokens: int,
    long_engines: int,
    threshold: int,
) -> tuple[dict[str, int], float]:
    """(engine of each trajectory id, the largest predicted engine floor in seconds)."""
    a = cost.step_overhead_s
    items = []
    for spec in workload:
        tokens, work = trajectory_work(spec, cost)
        items.append((tokens, work, spec.total_tokens, spec.traj_id))
    items.sort(key=lambda x: -x[0])
    longest, work_of, long_kv = [0] * num_engines, [0.0] * num_engines, [0] * num_engines
    engine_of: dict[str, int] = {}
    for tokens, work, total, traj_id in items:
        allowed = list(range(num_engines))
        if tokens >= threshold:
            allowed = [f for f in range(long_engines) if long_kv[f] + total <= kv_tokens] or allowed
        e = min(allowed, key=lambda f: a * max(longest[f], tokens) + work_of[f] + work)
        if tokens >= threshold:
            long_kv[e] += total
        engine_of[traj_id] = e
        longest[e] = max(longest[e], tokens)
        work_of[e] += work
    return engine_of, max(a * m + w for m, w in zip(longest, work_of, strict=True))


def simulate(base: Simulation, long_engines: int, threshold: int) -> tuple[SimResult, float]:
    """Run `base`'s workload and cluster under the oracle split (`base` itself is not run)."""
    engines = len(base.engines)
    engine_of, predicted = oracle_split(
        base.workload, base.cost, engines, base.kv_tokens, long_engines, threshold
    )
    cluster = Cluster(engines, base.kv_tokens, base.cost, base.max_num_seqs)
    sim = Simulation(FixedSplit(engines, engine_of), base.workload, cluster)
    return sim.run(), predicted


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--scenario", default="paper")
    parser.add_argument("--gpus", type=int, default=64)
    parser.add_argument("--prompts", type=int, help="prompts per step (default 512)")
    parser.add_argument("--rollouts", type=int, help="rollouts per prompt (default 32)")
    parser.add_argument("--long-engines", type=int, help="engines the long trajectories share")
    parser.add_argument("--threshold", type=int, help="generated tokens that make one long")
    parser.add_argument("--sweep", action="store_true", help="search a grid, simulate the best 5")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    workload = WorkloadConfig()
    for flag in ("prompts", "rollouts"):
        if getattr(args, flag) is not None:
            workload = replace(workload, **{flag: getattr(args, flag)})
    cfg = SimConfig(gpus=args.gpus, seed=args.seed, scenario=args.scenario, workload=workload)
    cfg.validate()
    base = build(cfg)
    engines = len(base.engines)
    parts = bound_parts(base.workload, base.cost, engines, base.kv_tokens, base.max_num_seqs)
    if args.sweep:
        grid = [
            (k, t)
            for k in sorted({max(1, engines * q // 16) for q in range(4, 17)})
            for t in (4000, 5000, 6000, 7000, 7500, 8000, 9000, 10000, 11000)
        ]
        scored = sorted(
            grid,
            key=lambda kt: oracle_split(base.workload, base.cost, engines, base.kv_tokens, *kt)[1],
        )
        candidates = scored[:5]
    elif args.long_engines is None or args.threshold is None:
        parser.error("give --long-engines and --threshold, or --sweep")
    elif not 1 <= args.long_engines <= engines:
        parser.error(f"--long-engines must be in 1..{engines}, got {args.long_engines}")
    else:
        candidates = [(args.long_engines, args.threshold)]
    rows = []
    for k, t in candidates:
        r, predicted = simulate(base, k, t)
        rows.append({
            "long_engines": k,
            "threshold": t,
            "predicted_s": round(predicted, 3),
            "makespan_s": round(r.makespan_s, 3),
            "ratio_to_bound": round(r.makespan_s / parts.bound_s, 4),
            "ratio_to_spread_floor": round(r.makespan_s / parts.spread_floor_s, 4),
            "preemptions": r.preemptions,
        })  # fmt: skip
    rows.sort(key=lambda row: row["makespan_s"])
    if args.json:
        print(json.dumps({"lower_bound_s": round(parts.bound_s, 3),
                          "spread_floor_s": round(parts.spread_floor_s, 3), "runs": rows},
                         indent=2))  # fmt: skip
    else:
        print(f"lower bound {parts.bound_s:.1f} s, spread floor {parts.spread_floor_s:.1f} s")
        for row in rows:
            print(" ".join(f"{k}={v}" for k, v in row.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
