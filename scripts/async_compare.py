"""Synchronous vs asynchronous RL, measured: the same RL run for k = 0, 1, 2 (`rl.max_staleness`).

    .venv/bin/python scripts/async_compare.py --model RUN/model-sft --out runs/async \
        [--ks 0,1,2] [--seeds 0,1] [--config C] [--set KEY=VALUE ...] [--sim-set KEY=VALUE ...]

Every run starts from the same SFT'd model (`--model`, e.g. the default run's `model-sft/`;
`model.path` = it, `sft.steps = 0`), so the arms differ only in k and the seed. A run whose
`summary.json` exists is not run again (interrupt and start again at will). Per run: RL wall
time (the sum of the RL steps' `step_s`, evaluations included, start-up and SFT excluded),
completions/s (trajectories trained on per RL second), the final test accuracy (avg@k with its
95% CI), the mean staleness, and the wall time to reach the synchronous run's final validation
accuracy (same seed; the first evaluation at or above it, so `eval_every` sets the resolution).

Then the simulator's prediction for the same configuration (`rstar2 sim run --steps N
--max-staleness K --trace <the k=0 run's rollout_trace.jsonl> --json` plus `--sim-set` options),
beside the measured seconds per step, and the relative error.

`--async-set KEY=VALUE` applies to the k > 0 runs only, e.g. more RL steps than the synchronous
run so that they can reach its final accuracy; the validation accuracy at the synchronous run's
step count is reported beside it (`validation_at_sync_steps`), so `eval_every` should divide
that count.

Prints a table per run and one per k over the seeds (mean s/step and its speed-up, mean final
test accuracy and its sd, mean validation at the synchronous step count, the seeds that reached
the synchronous final validation accuracy and the mean wall-time speed-up to it over those);
writes OUT/async_compare.json (the runs, and `summary`: the per-k table).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

RL_STAGES_EXCLUDED = ("sft", "final")


def rl_rows(metrics: Path) -> list[dict[str, Any]]:
    """The RL steps' rows of a run's metrics.jsonl (not the SFT or final evaluation rows)."""
    rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    return [r for r in rows if r.get("stage") not in RL_STAGES_EXCLUDED and "step_s" in r]


def time_to_target(rows: list[dict[str, Any]], target: float) -> float | None:
    """RL seconds (cumulative `step_s`) until the first evaluation at or above `target`
    (None: never reached)."""
    elapsed = 0.0
    for r in rows:
        elapsed += float(r["step_s"])
        acc = r.get("heldout_accuracy")
        if isinstance(acc, float | int) and acc >= target:
            return elapsed
    return None


def run_figures(run: Path) -> dict[str, Any]:
    """A finished run's figures (see the module docstring)."""
    rows = rl_rows(run / "metrics.jsonl")
    summary = json.loads((run / "summary.json").read_text())
    config = json.loads((run / "config.json").read_text())
    rl_s = sum(float(r["step_s"]) for r in rows)
    trajectories = len(rows) * config["prompts_per_step"] * config["rollouts_per_prompt"]
    evaluations = summary.get("evaluations", {})
    test = evaluations.get("test_final", {})
    validation = evaluations.get("validation_final", {})
    return {
        "steps": len(rows),
        "rl_s": rl_s,
        "step_s_mean": rl_s / len(rows) if rows else 0.0,
        "completions_per_s": trajectories / rl_s if rl_s else 0.0,
        "test_accuracy": test.get("accuracy"),
        "test_ci95": test.get("ci95"),
        "validation_accuracy": validation.get("accuracy"),
        "staleness_mean": statistics.fmean(r.get("staleness_mean", 0.0) for r in rows)
        if rows
        else 0.0,
        "rows": rows,
    }


def accuracy_at_step(rows: list[dict[str, Any]], step: int) -> float | None:
    """The validation accuracy evaluated at RL step `step` (None: no evaluation there)."""
    for r in rows:
        if r.get("step") == step and isinstance(r.get("heldout_accuracy"), float | int):
            return float(r["heldout_accuracy"])
    return None


def aggregate(
    results: dict[str, dict[str, Any]], ks: list[int], seeds: list[int]
) -> list[dict[str, Any]]:
    """Per k, over seeds: mean s/step and its speed-up over k = 0 (the mean of per-seed
    ratios), the mean final test accuracy and validation accuracy at the synchronous run's
    step count, how many seeds reached the synchronous run's final validation accuracy, and
    the mean wall-time speed-up to it over those: the synchronous run's own time to first reach
    it (it may get there before its last step) / this run's."""
    out = []
    for k in ks:
        runs = [(results[f"seed-{s}/k0"], results[f"seed-{s}/k{k}"]) for s in seeds]
        reached = [(ref, f) for ref, f in runs if f["time_to_sync_final_s"] is not None]
        tests = [f["test_accuracy"] for _, f in runs if f["test_accuracy"] is not None]
        at_sync = [f["validation_at_sync_steps"] for _, f in runs]
        at_sync = [a for a in at_sync if a is not None]
        out.append({
            "k": k,
            "seeds": len(runs),
            "step_s_mean": statistics.fmean(f["step_s_mean"] for _, f in runs),
            "step_speedup": statistics.fmean(
                ref["step_s_mean"] / f["step_s_mean"] for ref, f in runs
            ),
            "test_accuracy_mean": statistics.fmean(tests) if tests else None,
            "test_accuracy_sd": statistics.stdev(tests) if len(tests) > 1 else None,
            "validation_at_sync_steps_mean": statistics.fmean(at_sync) if at_sync else None,
            "reached_sync_final": len(reached),
            "time_to_sync_speedup": statistics.fmean(
                ref["time_to_sync_final_s"] / f["time_to_sync_final_s"] for ref, f in reached
            ) if reached else None,
        })  # fmt: skip
    return out


def _fmt(x: float | None, spec: str) -> str:
    """`x` formatted, or "-" as wide as the format's width."""
    return format(x, spec) if x is not None else "-".rjust(int(spec.split(".")[0]))


def relative_error(predicted: float, measured: float) -> float:
    return (predicted - measured) / measured if measured else float("nan")


def _rstar2(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rstar2.cli", *args], capture_output=True, text=True, check=False
    )


def _train(run: Path, args: argparse.Namespace, k: int, seed: int) -> None:
    if (run / "summary.json").is_file():
        print(f"k={k} seed={seed}: done already ({run})", flush=True)
        return
    sets = [f"model.path={args.model}", "sft.steps=0", f"rl.max_staleness={k}", *args.set]
    if k > 0:
        sets += args.async_set
    cmd = ["-q", "train", "--run-dir", str(run), "--seed", str(seed)]
    if args.config:
        cmd += ["--config", args.config]
    if (run / "checkpoints" / "LATEST").is_file():
        cmd = ["-q", "train", "--resume", str(run)]
        sets = []
    cmd += [x for s in sets for x in ("--set", s)]
    print(f"k={k} seed={seed}: training into {run}", flush=True)
    out = _rstar2(*cmd)
    if out.returncode != 0:
        raise SystemExit(f"k={k} seed={seed} failed ({out.returncode}):\n{out.stderr[-3000:]}")


def _predict(trace: Path, steps: int, k: int, sim_sets: list[str]) -> dict[str, Any]:
    out = _rstar2(
        "sim", "run", "--trace", str(trace), "--steps", str(steps), "--max-staleness", str(k),
        "--json", *sim_sets,
    )  # fmt: skip
    if out.returncode != 0:
        raise SystemExit(f"rstar2 sim run failed ({out.returncode}):\n{out.stderr[-3000:]}")
    return json.loads(out.stdout)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", required=True, help="the SFT'd model every run starts from")
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--ks", default="0,1,2", help="rl.max_staleness values (default 0,1,2)")
    p.add_argument("--seeds", default="0", help="seeds (default 0)")
    p.add_argument("--config", default="", help="a train config (default: the embedded one)")
    p.add_argument("--set", action="append", default=[], help="train --set KEY=VALUE")
    p.add_argument(
        "--async-set", action="append", default=[],
        help="train --set KEY=VALUE for the k > 0 runs only (after --set), e.g. more steps so "
        "that they can reach the synchronous run's final accuracy",
    )  # fmt: skip
    p.add_argument(
        "--sim-set", action="append", default=[],
        help="an extra `rstar2 sim run` option, e.g. --sim-set=--learner-mfu=0.2",
    )  # fmt: skip
    args = p.parse_args()
    ks = [int(k) for k in args.ks.split(",")]
    seeds = [int(s) for s in args.seeds.split(",")]
    if 0 not in ks:
        raise SystemExit("--ks must hold 0: the synchronous run is the reference")
    results: dict[str, dict[str, Any]] = {}
    for seed in seeds:
        for k in ks:
            _train(args.out / f"seed-{seed}" / f"k{k}", args, k, seed)
    for seed in seeds:
        ref = run_figures(args.out / f"seed-{seed}" / "k0")
        target = ref["validation_accuracy"]
        trace = args.out / f"seed-{seed}" / "k0" / "rollout_trace.jsonl"
        for k in ks:
            fig = run_figures(args.out / f"seed-{seed}" / f"k{k}")
            fig["time_to_sync_final_s"] = (
                time_to_target(fig["rows"], target) if target is not None else None
            )
            fig["validation_at_sync_steps"] = accuracy_at_step(fig["rows"], ref["steps"])
            if trace.is_file():
                pred = _predict(trace, fig["steps"], k, args.sim_set)
                fig["predicted_step_s"] = pred["step_s_mean"]
                fig["predicted_error"] = relative_error(pred["step_s_mean"], fig["step_s_mean"])
            del fig["rows"]
            results[f"seed-{seed}/k{k}"] = fig
    summary = aggregate(results, ks, seeds)
    document = {**results, "summary": summary}
    (args.out / "async_compare.json").write_text(json.dumps(document, indent=2) + "\n")
    print(
        f"{'run':<12} {'RL s':>7} {'s/step':>7} {'compl/s':>8} {'test':>6} {'stale':>6} "
        f"{'to sync':>8} {'sim s/step':>10} {'err':>6}"
    )
    for name, f in results.items():
        reach, pred = f["time_to_sync_final_s"], f.get("predicted_step_s")
        reach_text = f"{reach:8.1f}" if reach is not None else "       -"
        pred_text = f"{pred:10.2f}" if pred is not None else "         -"
        err_text = f"{f['predicted_error']:+6.0%}" if pred is not None else "     -"
        print(
            f"{name:<12} {f['rl_s']:7.1f} {f['step_s_mean']:7.2f} {f['completions_per_s']:8.2f} "
            f"{(f['test_accuracy'] or 0.0):6.3f} {f['staleness_mean']:6.2f} "
            f"{reach_text} {pred_text} {err_text}"
        )
    print(
        f"\n{'k':>2} {'seeds':>5} {'s/step':>7} {'speed-up':>8} {'test mean':>9} {'sd':>5} "
        f"{'val@sync':>8} {'reached':>7} {'to-sync speed-up':>16}"
    )
    for a in summary:
        print(
            f"{a['k']:>2} {a['seeds']:>5} {a['step_s_mean']:7.2f} {a['step_speedup']:7.2f}x "
            f"{_fmt(a['test_accuracy_mean'], '9.3f')} {_fmt(a['test_accuracy_sd'], '5.3f')} "
            f"{_fmt(a['validation_at_sync_steps_mean'], '8.3f')} "
            f"{a['reached_sync_final']:>3}/{a['seeds']:<3} "
            f"{_fmt(a['time_to_sync_speedup'], '15.2f')}x"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
