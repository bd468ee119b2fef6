"""Runs an experiment's arms (`rstar2.train.experiment` plans them) and writes its results.

`run_experiment(spec, progress)`:

1. for each seed, SFT once (`OUT/sft-models/seed-<s>/model-sft/`), shared by every env and
   arm of that seed: SFT never calls the sandbox, so the envs' SFT would be the same model;
   with `sft_min_validation` > 0 it is evaluated on the validation problems (`val/`) and,
   below that level, trained again from another initialisation (`retry-<k>/`, at most
   `sft_attempts` in all; `rstar2.train.experiment.sft_choice`); the attempts and the choice
   in `OUT/sft-models/seed-<s>/sft-choice.json`;
2. each arm run in `OUT/<env>/<arm>/seed-<s>/`, in `plan_runs` order:
   - `grpo` / `roc`: an RL run (`run_training`) from the shared SFT model;
   - `sft`: the `test_sft` evaluation of that (env, seed)'s first RL run (the same policy,
     problems, seeds and sandbox), or, without RL arms, an evaluation-only run in `eval/`;
   - `sft_flops`: the SFT recipe again (a second cosine cycle, `sft.seed + 1` batch order) from
     the SFT model on the same demonstrations for the largest compute of that (env, seed)'s RL
     arms (`model-sft-flops/`; steps = the budget's tokens over a step's mean tokens), then an
     evaluation-only run of it in `eval/` (its `test_sft`);
   - `sft_best`: the same continued SFT for `best_steps` steps (`model-sft-best/`), a
     checkpoint every `best_every`; each checkpoint and the SFT model itself evaluated on the
     validation problems (`val-<step>/`), the best one (the earliest of equals) on the test
     problems (`eval/`);
   - with an `[ood_task]`, every arm's final policy is also evaluated on that task's held-out
     problems (`ood/`);
   each finished arm writes `arm.json` and is skipped on a rerun; an arm stopped midway is
   started again (its directory cleared);
3. `OUT/results.json` (every arm run, the table rows), `OUT/accuracy.png` and
   `OUT/tool_error_ratio_correct.png`.

What it does not do: RL, SFT or evaluation itself (`rstar2.train.runner`,
`rstar2.learner.sft`), or argument parsing.
"""

from __future__ import annotations

import json
import logging
import math
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

from rstar2.config import ConfigError  # noqa: E402
from rstar2.learner.sft import sft_threads, train_sft  # noqa: E402
from rstar2.metrics import read_metrics  # noqa: E402
from rstar2.model.loader import load_model  # noqa: E402
from rstar2.train.config import TrainConfig, load_train_config  # noqa: E402
from rstar2.train.experiment import (  # noqa: E402
    ARMS,
    ENVS,
    PAIRS,
    RL_ARMS,
    ArmResult,
    ArmRun,
    best_checkpoint,
    eval_overrides,
    format_differences,
    format_table,
    paired_differences,
    plan_runs,
    rl_compute_tokens,
    rl_overrides,
    run_overrides,
    sft_choice,
    sft_retry_overrides,
    summarize,
    training_figures,
)
from rstar2.train.runner import prepare_policy, run_training, sft_examples  # noqa: E402
from rstar2.whole_file import replacing, write_text  # noqa: E402

log = logging.getLogger(__name__)


@dataclass
class ExperimentSpec:
    """What `rstar2 experiment` was asked to run."""

    out: Path
    config: str | None = None
    """A train config file (None: the embedded default)."""
    sets: list[str] | None = None
    """`--set` overrides applied to every run, before the experiment's own."""
    arms: Sequence[str] = ARMS
    envs: Sequence[str] = ENVS
    seeds: Sequence[int] = (0, 1, 2)
    fault_rate: float = 0.1
    """`sandbox.fault_rate` of the noisy env."""
    best_steps: int = 0
    """`sft_best`'s further SFT steps (0: `sft.steps`, as many again as the first SFT)."""
    best_every: int = 0
    """`sft_best`'s checkpoint interval in steps (0: a quarter of `best_steps`)."""
    sft_min_validation: float = 0.0
    """A seed's SFT below this validation accuracy is trained again from another
    initialisation (0: never; the CLI's default is 0.05)."""
    sft_attempts: int = 3
    """SFT attempts per seed at most, the first included."""


def run_config(spec: ExperimentSpec, run: ArmRun, extra: list[str]) -> TrainConfig:
    return load_train_config(
        spec.config, sets=[*(spec.sets or []), *run_overrides(run, spec.fault_rate), *extra]
    )


def check_spec(spec: ExperimentSpec) -> list[ArmRun]:
    """The planned runs; a bad config or flag fails here, before anything runs."""
    runs = plan_runs(spec.arms, spec.envs, spec.seeds)
    cfg = run_config(spec, runs[0], [])
    if cfg.test_problems < 1:
        raise ConfigError("test_problems", cfg.test_problems, ">= 1: an experiment reports test")
    if cfg.sft.steps < 1:
        raise ConfigError("sft.steps", cfg.sft.steps, ">= 1: the arms share one SFT per seed")
    if not 0 <= spec.fault_rate <= 1:
        raise ConfigError("--fault-rate", spec.fault_rate, "a number in [0, 1]")
    if spec.best_steps < 0 or spec.best_every < 0:
        raise ConfigError("--sft-best-steps", spec.best_steps, ">= 0 (and --sft-best-every too)")
    if not 0 <= spec.sft_min_validation <= 1:
        raise ConfigError("--sft-min-validation", spec.sft_min_validation, "a number in [0, 1]")
    if spec.sft_min_validation > 0 and cfg.heldout_problems < 1:
        raise ConfigError(
            "--sft-min-validation", spec.sft_min_validation, "0 when heldout_problems = 0"
        )
    if spec.sft_attempts < 1:
        raise ConfigError("--sft-attempts", spec.sft_attempts, ">= 1")
    return runs


def run_experiment(spec: ExperimentSpec, progress: Callable[[str], None]) -> dict[str, Any]:
    """Run every arm not yet finished; returns (and writes) `results.json`'s content."""
    runs = check_spec(spec)
    results = []
    for i, run in enumerate(runs, 1):
        arm_dir = run.directory(spec.out)
        done = arm_dir / "arm.json"
        if done.is_file():
            result = ArmResult(**json.loads(done.read_text()))
            progress(f"[{i}/{len(runs)}] {run.name}: done before, {_figure(result)}")
        else:
            progress(f"[{i}/{len(runs)}] {run.name}: started")
            start = time.time()
            result = _run_arm(spec, run, progress)
            arm_dir.mkdir(parents=True, exist_ok=True)
            write_text(done, json.dumps(result.as_dict(), indent=1))
            took = time.time() - start
            progress(f"[{i}/{len(runs)}] {run.name}: done in {took:.0f}s, {_figure(result)}")
        results.append(result)
    rows = summarize(results)
    diffs = paired_differences(results, PAIRS)
    out = {
        "spec": {**asdict(spec), "out": str(spec.out)},
        "table": [asdict(r) for r in rows],
        "differences": [asdict(d) for d in diffs],
        "runs": [r.as_dict() for r in results],
        "table_text": format_table(rows),
        "differences_text": format_differences(diffs),
    }
    write_text(spec.out / "results.json", json.dumps(out, indent=1))
    plot_accuracy(rows, spec.out / "accuracy.png")
    plot_error_curves(results, spec.out / "tool_error_ratio_correct.png")
    return out


def _figure(r: ArmResult) -> str:
    low, high = r.test_ci95
    return f"test pass@1 {100 * r.test_accuracy:.1f}% (95% CI {100 * low:.1f}-{100 * high:.1f})"


def _run_arm(spec: ExperimentSpec, run: ArmRun, progress: Callable[[str], None]) -> ArmResult:
    sft_model = shared_sft(spec, run, progress)
    if run.arm in RL_ARMS:
        result, policy = _rl_arm(spec, run, sft_model)
    elif run.arm == "sft":
        result, policy = _sft_arm(spec, run, sft_model), sft_model
    elif run.arm == "sft_flops":
        result, policy = _sft_flops_arm(spec, run, sft_model)
    else:
        result, policy = _sft_best_arm(spec, run, sft_model, progress)
    ood = _ood(spec, run, policy)
    if ood is not None:
        result = replace(result, ood_accuracy=ood[0], ood_ci95=ood[1])
    return result


def _ood(spec: ExperimentSpec, run: ArmRun, policy: Path) -> tuple[float, list[float]] | None:
    """`policy`'s accuracy on the `[ood_task]`'s first `test_problems` held-out problems (None
    without one): an evaluation-only run whose task is the OOD task (no validation split: the
    OOD task is never tuned on)."""
    ood_task = run_config(spec, run, []).ood_task
    if not ood_task:
        return None
    sets = [f"task.{k}={v if isinstance(v, str) else json.dumps(v)}" for k, v in ood_task.items()]
    cfg = run_config(spec, run, [*eval_overrides(policy), "heldout_problems=0", *sets])
    return _test(_fresh_run(cfg, run.directory(spec.out) / "ood"), "test_sft")


def shared_sft(spec: ExperimentSpec, run: ArmRun, progress: Callable[[str], None]) -> Path:
    """The seed's SFT model (trained on first use; with `sft_min_validation`, the attempt
    `sft_choice` keeps, recorded in `sft-choice.json`)."""
    seed_root = spec.out / "sft-models" / f"seed-{run.seed}"
    if spec.sft_min_validation <= 0:
        return _sft_attempt(spec, run, seed_root, 0, progress)
    choice_file = seed_root / "sft-choice.json"
    if choice_file.is_file():
        return Path(json.loads(choice_file.read_text())["model"])
    problems = run_config(spec, run, []).heldout_problems
    validations: list[float] = []
    models: list[Path] = []
    chosen = None
    while chosen is None:
        attempt = len(models)
        root = seed_root if attempt == 0 else seed_root / f"retry-{attempt}"
        model = _sft_attempt(spec, run, root, attempt, progress)
        cfg = run_config(spec, run, validation_overrides(model, problems))
        accuracy, _ = _test(_fresh_run(cfg, root / "val"), "test_sft")
        models.append(model)
        validations.append(accuracy)
        chosen = sft_choice(validations, spec.sft_min_validation, spec.sft_attempts)
        verdict = "kept" if chosen is not None else "below the level: trained again"
        progress(
            f"SFT of seed {run.seed}, attempt {attempt + 1}: validation {100 * accuracy:.1f}% "
            f"(level {100 * spec.sft_min_validation:.1f}%), {verdict}"
        )
    reached = validations[chosen] >= spec.sft_min_validation
    if not reached:
        progress(f"SFT of seed {run.seed}: no attempt reached the level; the best one is kept")
    record = {
        "level": spec.sft_min_validation,
        "validations": validations,
        "models": [str(m) for m in models],
        "chosen": chosen,
        "reached": reached,
        "model": str(models[chosen]),
    }
    write_text(choice_file, json.dumps(record, indent=1))
    return models[chosen]


def _sft_attempt(
    spec: ExperimentSpec, run: ArmRun, root: Path, attempt: int, progress: Callable[[str], None]
) -> Path:
    """SFT attempt `attempt` of the seed in `root` (done before: its model)."""
    if (root / "model-sft" / "sft.json").is_file():
        return root / "model-sft"
    tag = f"SFT of seed {run.seed}" + (f", attempt {attempt + 1}" if attempt else "")
    progress(f"{tag} (shared by every env and arm): started")
    model = prepare_policy(run_config(spec, run, sft_retry_overrides(run.seed, attempt)), root)
    seconds = json.loads((model / "sft.json").read_text())["seconds"]
    progress(f"{tag}: done in {seconds:.0f}s")
    return model


def _fresh_run(cfg: TrainConfig, run_dir: Path) -> dict[str, Any]:
    """`run_training` in `run_dir`, or its summary if it finished (an arm that stopped after
    its run but before `arm.json`); a run stopped midway starts again."""
    summary = run_dir / "summary.json"
    if summary.is_file():
        return json.loads(summary.read_text())
    if run_dir.exists():
        log.warning("%s: an unfinished run, started again", run_dir)
        shutil.rmtree(run_dir)
    return run_training(cfg, run_dir)


def _test(summary: dict[str, Any], key: str) -> tuple[float, list[float]]:
    acc = summary["evaluations"][key]
    return float(acc["accuracy"]), [float(x) for x in acc["ci95"]]


def _test_use(summary: dict[str, Any], key: str) -> dict[str, float]:
    """Response tokens and tool calls per rollout and pass@k on that test evaluation (absent in
    runs that predate them): the same measure for every arm, SFT ones included."""
    acc = summary["evaluations"][key]
    pairs = (
        ("response_tokens", "response_tokens_mean"),
        ("tool_calls", "tool_calls_mean"),
        ("pass_at_k", "pass_at_k"),
    )
    return {ours: float(acc[theirs]) for ours, theirs in pairs if theirs in acc}


def _rl_arm(spec: ExperimentSpec, run: ArmRun, sft_model: Path) -> tuple[ArmResult, Path]:
    run_dir = run.directory(spec.out)
    summary = _fresh_run(run_config(spec, run, rl_overrides(run.arm, sft_model)), run_dir)
    accuracy, ci = _test(summary, "test_final")
    rows = read_metrics(run_dir / "metrics.jsonl")
    figures = training_figures(rows)
    figures.update(_test_use(summary, "test_final"))
    wall = float(summary["wall_s"])
    compute = rl_compute_tokens(rows)
    result = ArmResult(run.env, run.arm, run.seed, accuracy, ci, wall, compute_tokens=compute,
                       **figures)  # fmt: skip
    return result, run_dir / "model-rl"


def _sft_arm(spec: ExperimentSpec, run: ArmRun, sft_model: Path) -> ArmResult:
    """The SFT model's result: the `test_sft` evaluation of the (env, seed)'s first RL run
    that has one, else an evaluation-only run of it (`eval/`)."""
    seconds = float(json.loads((sft_model / "sft.json").read_text())["seconds"])
    for algo in RL_ARMS:
        summary_path = replace(run, arm=algo).directory(spec.out) / "summary.json"
        if summary_path.is_file():
            summary = json.loads(summary_path.read_text())
            source = {"test_sft_of": str(summary_path.parent)}
            return _test_sft_result(run, summary, seconds, 0.0, source)
    return _eval_arm(spec, run, sft_model, seconds, 0.0, {})


def rl_budget(spec: ExperimentSpec, run: ArmRun) -> float:
    """The largest compute (training-token equivalents) of the (env, seed)'s finished RL arms."""
    budgets = []
    for algo in RL_ARMS:
        path = replace(run, arm=algo).directory(spec.out) / "arm.json"
        if path.is_file():
            compute = json.loads(path.read_text()).get("compute_tokens")
            if compute is not None:
                budgets.append(float(compute))
    if not budgets:
        raise ConfigError("--arms", ",".join(spec.arms), "grpo or roc beside sft_flops")
    return max(budgets)


def _eval_arm(
    spec: ExperimentSpec,
    run: ArmRun,
    policy: Path,
    seconds: float,
    tokens: float,
    extra: dict[str, Any],
) -> ArmResult:
    """An SFT arm's result: `policy` evaluated on the test problems (`eval/`), with the arm's
    training seconds, compute (`tokens`) and `extra` facts."""
    summary = _fresh_run(
        run_config(spec, run, eval_overrides(policy)), run.directory(spec.out) / "eval"
    )
    return _test_sft_result(run, summary, seconds, tokens, extra)


def _test_sft_result(
    run: ArmRun, summary: dict[str, Any], seconds: float, tokens: float, extra: dict[str, Any]
) -> ArmResult:
    """An arm's result from a run's `test_sft` evaluation (accuracy, response tokens, tool
    calls), with the arm's training seconds, compute (`tokens`) and `extra` facts."""
    accuracy, ci = _test(summary, "test_sft")
    use = _test_use(summary, "test_sft")
    return ArmResult(run.env, run.arm, run.seed, accuracy, ci, seconds, compute_tokens=tokens,
                     extra=extra, **use)  # fmt: skip


def _sft_flops_arm(spec: ExperimentSpec, run: ArmRun, sft_model: Path) -> tuple[ArmResult, Path]:
    model_dir = run.directory(spec.out) / "model-sft-flops"
    if not (model_dir / "sft_more.json").is_file():
        continue_sft(run_config(spec, run, []), sft_model, model_dir, tokens=rl_budget(spec, run))
    info = json.loads((model_dir / "sft_more.json").read_text())
    seconds, tokens = float(info["seconds"]), float(info["tokens"])
    return _eval_arm(spec, run, model_dir, seconds, tokens, info), model_dir


def validation_overrides(model_dir: Path, problems: int) -> list[str]:
    """An evaluation-only run of `model_dir` on the validation problems: with no validation
    split, its test split is the held-out source's first `problems` (the run's validation
    problems), evaluated as its `test_sft`."""
    return [*eval_overrides(model_dir), "heldout_problems=0", f"test_problems={problems}"]


def _sft_best_arm(
    spec: ExperimentSpec, run: ArmRun, sft_model: Path, progress: Callable[[str], None]
) -> tuple[ArmResult, Path]:
    arm_dir = run.directory(spec.out)
    cfg = run_config(spec, run, [])
    root = arm_dir / "model-sft-best"
    steps = spec.best_steps or cfg.sft.steps
    every = spec.best_every or max(1, steps // 4)
    if not (root / "sft_more.json").is_file():
        continue_sft(cfg, sft_model, root, steps=steps, save_every=every)
    info = json.loads((root / "sft_more.json").read_text())
    candidates = [(0, sft_model)] + [(k, root / f"step-{k:05d}") for k in info["saved"]]
    validation: dict[int, float] = {}
    for k, path in candidates:
        val_cfg = run_config(spec, run, validation_overrides(path, cfg.heldout_problems))
        validation[k], _ = _test(_fresh_run(val_cfg, arm_dir / f"val-{k:05d}"), "test_sft")
        progress(f"{run.name}: validation after {k} more SFT steps: {100 * validation[k]:.1f}%")
    k = best_checkpoint(validation)
    best = dict(candidates)[k]
    per_step = float(info["tokens"]) / max(int(info["steps"]), 1)
    # the tokens the chosen checkpoint trained on after SFT (none for the SFT model itself)
    info = {**info, "best_step": k, "validation": {str(s): a for s, a in validation.items()},
            "tokens": k * per_step}  # fmt: skip
    return _eval_arm(spec, run, best, float(info["seconds"]), float(info["tokens"]), info), best


def continue_sft(
    cfg: TrainConfig,
    start: Path,
    out: Path,
    *,
    steps: int = 0,
    tokens: float = 0.0,
    save_every: int = 0,
) -> dict[str, Any]:
    """Train the model in `start` further on the run's demonstrations and save it in `out`
    (with `sft_more.json`): `steps` steps, or as many as `tokens` training tokens take at a
    step's mean tokens (`sft.batch_size` x the demonstrations' mean length); with
    `save_every`, the model after every `save_every`-th step also in `out/step-<k>/`.

    The recipe is SFT's own again - warm-up, peak `sft.lr`, cosine to `lr * min_lr_ratio` - as
    a second cycle (a warm restart); the batch order is `sft.seed + 1`, so it is not a replay."""
    torch.set_num_threads(sft_threads(cfg.sft))
    model, tokenizer = load_model(start)
    examples = sft_examples(cfg, tokenizer)
    per_step = cfg.sft.batch_size * sum(len(e[0]) for e in examples) / max(len(examples), 1)
    if not steps:
        steps = max(1, math.ceil(tokens / per_step))
    sft_cfg = replace(cfg.sft, steps=steps, seed=cfg.sft.seed + 1)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    saved: list[int] = []

    def save(step: int) -> None:
        if save_every and step % save_every == 0:
            model.save_pretrained(tmp / f"step-{step:05d}")
            tokenizer.save_pretrained(tmp / f"step-{step:05d}")
            saved.append(step)

    began = time.perf_counter()
    train_sft(model, examples, sft_cfg, int(tokenizer.pad_token_id or 0), save)
    model.eval()
    info = {
        "steps": steps,
        "tokens": steps * per_step,
        "tokens_budget": tokens,
        "seconds": time.perf_counter() - began,
        "saved": saved,
    }
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    (tmp / "sft_more.json").write_text(json.dumps(info))
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return info


def plot_accuracy(rows: Sequence[Any], out: Path) -> Path:
    """Bars of test pass@1 per arm, one group per env, error bars the 95% interval."""
    envs = [e for e in ENVS if any(r.env == e for r in rows)]
    arms = [a for a in ARMS if any(r.arm == a for r in rows)]
    fig, ax = plt.subplots(figsize=(1.6 + 1.4 * len(arms) * len(envs), 3.6))
    width = 0.8 / max(len(arms), 1)
    for j, arm in enumerate(arms):
        xs, ys, err = [], [], [[], []]
        for i, env in enumerate(envs):
            for r in rows:
                if r.env == env and r.arm == arm:
                    xs.append(i + (j - (len(arms) - 1) / 2) * width)
                    ys.append(100 * r.accuracy)
                    err[0].append(100 * (r.accuracy - r.ci95[0]))
                    err[1].append(100 * (r.ci95[1] - r.accuracy))
        ax.bar(xs, ys, width, yerr=err, capsize=3, label=arm)
    ax.set_xticks(range(len(envs)), envs)
    ax.set_ylabel("test pass@1 (%)")
    ax.set_title("test accuracy (bars: 95% CI)", fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    return _save_png(fig, out)


def plot_error_curves(results: Sequence[ArmResult], out: Path) -> Path:
    """Tool-error ratio inside correct rollouts against step (paper Figure 9): one panel per
    env, one line per RL arm and seed."""
    envs = [e for e in ENVS if any(r.env == e and r.curve for r in results)] or ["clean"]
    fig, axes = plt.subplots(1, len(envs), figsize=(4.6 * len(envs), 3.4), squeeze=False)
    for ax, env in zip(axes.flat, envs, strict=True):
        for r in sorted(results, key=lambda r: (r.arm, r.seed)):
            if r.env == env and r.curve:
                xs, ys = zip(*r.curve, strict=True)
                ax.plot(xs, ys, label=f"{r.arm} seed {r.seed}", alpha=0.8)
        ax.set_title(f"{env}: tool errors in correct rollouts", fontsize=10)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=7)
    return _save_png(fig, out)


def _save_png(fig: plt.Figure, out: Path) -> Path:
    """Save `fig` as `out`, whole or not at all (`rstar2.whole_file`), and close it."""
    fig.tight_layout()
    try:
        with replacing(out) as tmp:
            fig.savefig(tmp, dpi=90, format="png")
    finally:
        plt.close(fig)
    return out
