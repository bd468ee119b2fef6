"""Presenting simulator results: the comparison table and the PNG plots of `rstar2 sim compare`,
the key-value table of `rstar2 sim calibrate`, and the table and plot of `rstar2 sim
compare-staleness` (runs of several steps by max staleness k).

Plots use matplotlib's Agg backend (files only, no display): KV use per engine over time (one
panel per policy), idle fraction per engine, and makespan per policy against the lower bound.
It does not run simulations.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 - the backend must be chosen first
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from sim.run_result import RunResult  # noqa: E402
from sim.simulator import SimResult  # noqa: E402

TABLE_LEGEND = """\
x_static    makespan / the static policy's ('-': static was not simulated; see sim compare)
x_bound     makespan / the lower bound (1.000 is optimal)
preempt     requests preempted for KV space; recomputed: the tokens they computed again
sticky_lb   the lower bound given the engine each trajectory ran on ('-': a turn moved)
idle        the engines' idle share of the makespan; kv_util: their KV blocks' mean use"""
"""What the columns of `table` mean, printed under it."""

RUN_LEGEND = """\
step_s_mean     run_s / steps, the pipeline's fill (k+1 steps start at once) and drain included
step_s_steady   mean time between weight pushes with the pipeline full (pushes k+1 to N-k);
                the fill and drain can make it shorter or longer than step_s_mean
staleness       policy versions a trajectory lagged the learner (histogram: trajectories)
partial_rollout_fraction  trajectories generated under more than one policy version"""
"""What the less obvious keys of `rstar2 sim run --steps N` mean, printed under its table."""


def table(results: Sequence[SimResult]) -> str:
    """A fixed-width table and its legend (`TABLE_LEGEND`); ratios are to the static split
    (only when it is among `results`) and to the lower bound."""
    static = next((r for r in results if r.policy == "static"), None)
    head = (
        f"{'policy':<18} {'makespan_s':>10} {'x_static':>8} {'x_bound':>7} {'preempt':>7} "
        f"{'recomputed':>10} {'sticky_lb':>9} {'idle':>6} {'kv_util':>7} {'tokens/s':>10} {'events':>8} {'wall_s':>6}"
    )
    lines = [head, "-" * len(head)]
    for r in results:
        sticky = "-" if r.sticky_bound_s is None else f"{r.sticky_bound_s:.1f}"
        x_static = "-" if static is None else f"{r.makespan_s / static.makespan_s:.3f}"
        lines.append(
            f"{r.policy:<18} {r.makespan_s:>10.1f} {x_static:>8} "
            f"{r.ratio_to_bound:>7.3f} {r.preemptions:>7d} {r.recomputed_tokens:>10d} {sticky:>9} "
            f"{r.idle_fraction:>6.3f} {r.kv_utilisation:>7.3f} {r.tokens_per_s:>10.0f} "
            f"{r.events:>8d} {r.wall_s:>6.2f}"
        )
    lines.append(
        f"lower bound: {results[0].lower_bound_s:.1f} s; spread floor (no even length-blind "
        f"sticky split beats it): {results[0].spread_floor_s:.1f} s (see docs/sim.md)"
    )
    return "\n".join([*lines, "", TABLE_LEGEND])


def key_value_table(report: Mapping[object, object], indent: int = 0) -> str:
    """A report (`rstar2 sim calibrate`, `rstar2 sim run --steps N`) as aligned `name  value`
    lines: a nested mapping (the fitted cost model, an error summary, a histogram) is a heading
    with its entries indented under it; keys need not be strings (a histogram's are ints);
    floats show 6 significant digits."""
    lines = []
    for key, value in report.items():
        if isinstance(value, Mapping):
            lines.append(f"{' ' * indent}{key}:")
            lines.append(key_value_table(value, indent + 2))
        else:
            text = f"{value:.6g}" if isinstance(value, float) else str(value)
            lines.append(f"{' ' * indent}{key!s:<{32 - indent}}{text}")
    return "\n".join(lines)


def run_table(summary: Mapping[object, object]) -> str:
    """The summary of `rstar2 sim run --steps N` (`RunResult.summary()`) and its legend."""
    return f"{key_value_table(summary)}\n\n{RUN_LEGEND}"


def _save(fig: Figure, path: Path, dpi: int) -> None:
    """Save `fig` to `path` whole or not at all: into a temporary file renamed over `path` (a
    full disk leaves no half-written PNG), then close it."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        fig.savefig(tmp, dpi=dpi, format="png")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
        plt.close(fig)


def _downsample(line: list[tuple[float, int]], points: int = 400) -> tuple[list[float], list[int]]:
    step = max(1, len(line) // points)
    sampled = line[::step] + [line[-1]]
    return [t for t, _ in sampled], [u for _, u in sampled]


def plot_kv(results: Sequence[SimResult], path: Path) -> None:
    cols = min(3, len(results))
    rows = -(-len(results) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.2 * rows), sharey=True, squeeze=False)
    for ax, r in zip(axes.flat, results, strict=False):
        for line in r.kv_timelines:
            ts, used = _downsample(line)
            ax.plot(ts, [u / r.kv_capacity_blocks for u in used], linewidth=0.4, alpha=0.5)
        ax.set_title(f"{r.policy} ({r.preemptions} preemptions)", fontsize=9)
        ax.set_xlabel("simulated time (s)")
        ax.set_ylim(0, 1.05)
    for ax in axes[:, 0]:
        ax.set_ylabel("KV blocks in use (fraction)")
    for ax in list(axes.flat)[len(results) :]:
        ax.axis("off")
    fig.suptitle("KV use per engine over time")
    fig.tight_layout()
    _save(fig, path, dpi=110)


def plot_idle(results: Sequence[SimResult], path: Path) -> None:
    fig, ax = plt.subplots(figsize=(9, 3.5))
    for r in results:
        ax.plot(range(len(r.busy_s)), r.idle_fractions, marker=".", linewidth=0.8, label=r.policy)
    ax.set_xlabel("engine")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # engines are numbered, no 1.5
    ax.set_ylabel("idle fraction of the makespan")
    ax.set_title("Idle fraction per engine")
    ax.legend(fontsize=8)
    fig.tight_layout()
    _save(fig, path, dpi=110)


def plot_makespan(results: Sequence[SimResult], path: Path) -> None:
    fig, ax = plt.subplots(figsize=(8, 3.5))
    names = [r.policy for r in results]
    ax.bar(names, [r.makespan_s for r in results], color="tab:blue")
    ax.axhline(results[0].lower_bound_s, color="tab:red", linestyle="--", label="lower bound")
    ax.set_ylabel("step makespan (s)")
    ax.set_title("Makespan per policy")
    ax.tick_params(axis="x", labelsize=8)
    ax.legend()
    fig.tight_layout()
    _save(fig, path, dpi=110)


def write_plots(results: Sequence[SimResult], out_dir: str | Path) -> list[Path]:
    """Write the three PNGs into `out_dir` (created); returns their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "kv_per_engine.png", out / "idle_per_engine.png", out / "makespan.png"]
    plot_kv(results, paths[0])
    plot_idle(results, paths[1])
    plot_makespan(results, paths[2])
    return paths


def staleness_table(results: Sequence[RunResult]) -> str:
    """One row per max staleness k; `speedup` is trajectories per hour over the first row's;
    `steady_s` is `step_s_steady` (`RUN_LEGEND`, printed under the table)."""
    base = results[0].trajectories_per_hour
    head = (
        f"{'k':>2} {'step_s_mean':>11} {'steady_s':>9} {'traj/hour':>10} {'speedup':>7} {'engine_idle':>11} "
        f"{'stale_mean':>10} {'stale_max':>9} {'partial':>7} {'push_wait_s':>11}"
    )
    lines = [head, "-" * len(head)]
    for r in results:
        s = r.summary()
        lines.append(
            f"{r.max_staleness:>2d} {r.step_s_mean:>11.3f} {r.step_s_steady:>9.3f} "
            f"{r.trajectories_per_hour:>10.0f} "
            f"{r.trajectories_per_hour / base:>7.3f} {r.engine_idle_fraction:>11.3f} "
            f"{s['staleness_mean']:>10.3f} {s['staleness_max']:>9} "
            f"{s['partial_rollout_fraction']:>7.3f} {s['push_wait_s_mean']:>11.3f}"
        )
    first = results[0]
    lines.append(f"{first.steps} steps, {first.policy}, learner {s['learner']}")
    return "\n".join([*lines, "", RUN_LEGEND.replace("step_s_steady", "steady_s     ")])


def write_staleness_plot(results: Sequence[RunResult], out_dir: str | Path) -> Path:
    """staleness.png: trajectories per hour and engine idle fraction against k."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    ks = [r.max_staleness for r in results]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    left.plot(ks, [r.trajectories_per_hour for r in results], marker="o")
    left.set_xlabel("max staleness k")
    left.set_ylabel("trajectories / hour")
    right.plot(ks, [r.engine_idle_fraction for r in results], marker="o", color="tab:red")
    right.set_xlabel("max staleness k")
    right.set_ylabel("engine idle fraction")
    right.set_ylim(0, 1)
    for ax in (left, right):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
    fig.suptitle(f"{results[0].steps} simulated steps, learner "
                 f"{'colocated' if results[0].colocated else 'separate'}")  # fmt: skip
    fig.tight_layout()
    path = out / "staleness.png"
    _save(fig, path, dpi=100)
    return path
