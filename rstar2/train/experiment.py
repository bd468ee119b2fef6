"""`rstar2 experiment`'s plan and arithmetic: which arms run in what order, with which config
overrides, and how per-seed results become the table.

An experiment crosses arms x envs x seeds. Arms:

- `sft`: the SFT policy alone;
- `sft_flops`: the SFT policy trained further on the same demonstrations for the compute that
  (env, seed)'s RL took, counted in FLOPs (the equal-compute control; `rl_compute_tokens`);
- `sft_best`: the SFT policy trained further on the same demonstrations to its plateau, the
  checkpoint with the best validation accuracy kept (the best SFT can do with them);
- `grpo`, `roc`: RL from the SFT policy (`rl.algo`).

Compute is counted in FLOPs with the usual 6N per token trained (forward and backward) and 2N
per token through a forward pass: an RL run spends 6N per trained token (`trained_tokens`) and
2N per rollout token (`rollout_tokens`: every token of every rollout, prompt and tool responses
included, an upper bound on the engines' work), so the equal-compute SFT trains on
`trained + rollout / 3` tokens (N cancels). Wall time would depend on the machine's load.

Envs: `clean` (`sandbox.fault_rate = 0`) and `noisy` (`sandbox.fault_rate = --fault-rate`). A
seed is an independent replicate of the whole pipeline: it sets `seed` (RL sampling, data
order), `sft.seed` (SFT batch order and traces) and `model.tiny.seed` (the tiny model's initial
weights); the test problems are the same for every seed.

A seed's SFT that does not learn the task (validation below `--sft-min-validation`) is trained
again from another initialisation (`sft_retry_overrides`: `model.tiny.seed` only, so the
demonstrations and their batch order stay the seed's), at most `--sft-attempts` times in all;
the first attempt that reaches the level is the seed's SFT model, or the best of them if none
does (`sft_choice`). Every arm of the seed starts from that one model, so the paired comparison
stays paired; the attempts are recorded. Why: an SFT run can learn the format but not the task
(docs/results.md: one seed at 1.4% on validation against ~20% for the others, unchanged by 800
more SFT steps), and RL from it measures nothing.

The interval of an arm is over seeds (the spread a reader cares about: would another training
run land there?): Student's t with n - 1 degrees of freedom,

    mean = sum(a_s) / n,  sd = sd(a_s, ddof=1),  ci95 = mean +- t(0.975, n-1) * sd / sqrt(n)

over the seeds' test accuracies a_s, clipped to [0, 1]. With one seed there is no spread over seeds, and the run's
own interval over problems (`rstar2.train.accuracy`) is reported instead (marked "problems").

What it does not do: run anything (`rstar2.train.experiment_runner`) or parse flags.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rstar2.config import ConfigError

ARMS = ("sft", "sft_best", "sft_flops", "grpo", "roc")
RL_ARMS = ("grpo", "roc")
SFT_CONTROLS = ("sft_best", "sft_flops")
ENVS = ("clean", "noisy")
RUN_ORDER = ("grpo", "roc", "sft", "sft_flops", "sft_best")
"""Within an (env, seed): RL first, since `sft` reuses an RL run's `test_sft` and `sft_flops`
needs the RL arms' compute."""

T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228)
"""Student's t 97.5% quantiles for 1..10 degrees of freedom (beyond: 1.96, within 5%)."""


@dataclass(frozen=True)
class ArmRun:
    """One arm of one env and seed: a run directory `OUT/<env>/<arm>/seed-<s>/`."""

    env: str
    arm: str
    seed: int

    @property
    def name(self) -> str:
        return f"{self.env}/{self.arm}/seed-{self.seed}"

    def directory(self, out: Path) -> Path:
        return out / self.env / self.arm / f"seed-{self.seed}"


def parse_names(text: str, allowed: Sequence[str], flag: str) -> list[str]:
    """A comma-separated subset of `allowed`, in the given order, without repeats."""
    names = list(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    bad = [n for n in names if n not in allowed]
    if not names or bad:
        raise ConfigError(flag, text, f"a comma-separated list of {', '.join(allowed)}")
    return names


def plan_runs(arms: Sequence[str], envs: Sequence[str], seeds: Sequence[int]) -> list[ArmRun]:
    """Every arm run in execution order: seed by seed (a finished seed is a whole table row
    set), then env, then `RUN_ORDER`."""
    if "sft_flops" in arms and not any(a in RL_ARMS for a in arms):
        raise ConfigError("--arms", ",".join(arms), "grpo or roc beside sft_flops (its budget)")
    if len(set(seeds)) != len(seeds):
        raise ConfigError("--seeds", list(seeds), "distinct seeds")
    return [
        ArmRun(env, arm, seed) for seed in seeds for env in envs for arm in RUN_ORDER if arm in arms
    ]


def run_overrides(run: ArmRun, fault_rate: float) -> list[str]:
    """`--set` items of every run of `run`'s env and seed (after the user's)."""
    rate = fault_rate if run.env == "noisy" else 0.0
    return [
        f"seed={run.seed}",
        f"sft.seed={run.seed}",
        f"model.tiny.seed={run.seed}",
        f"sandbox.fault_rate={rate}",
    ]


SFT_RETRY_SEED_STRIDE = 1000
"""An SFT retry's initialisation seed: the seed plus this times the attempt number."""


def sft_retry_overrides(seed: int, attempt: int) -> list[str]:
    """`--set` items of a seed's SFT attempt `attempt` (0: the seed's own, no change): another
    initialisation of the model, the same demonstrations and batch order."""
    if attempt == 0:
        return []
    return [f"model.tiny.seed={seed + SFT_RETRY_SEED_STRIDE * attempt}"]


def sft_choice(validations: Sequence[float], level: float, attempts: int) -> int | None:
    """Which SFT attempt a seed keeps, given the validation accuracies of the attempts so far:
    the last one if it reached `level`; after `attempts` attempts, the best (the earliest of
    equals); otherwise None (train another)."""
    if not validations:
        raise ValueError("sft_choice needs at least one attempt")
    if validations[-1] >= level:
        return len(validations) - 1
    if len(validations) >= attempts:
        return best_checkpoint(dict(enumerate(validations)))
    return None


def rl_overrides(algo: str, sft_model: Path) -> list[str]:
    """RL from the shared SFT model: no SFT of its own."""
    return [f"rl.algo={algo}", f"model.path={sft_model}", "sft.steps=0"]


def eval_overrides(model_dir: Path) -> list[str]:
    """A run that only evaluates `model_dir` on the test split: its `test_sft` is the trainer's
    own evaluation (same problems, seeds, `eval_samples`, sandbox). A run has at least one RL
    step, so it takes one as small as a config allows and does not evaluate validation (the
    validation problems stay held out: `heldout_problems=0` would move the test split onto
    them); its `test_final` (after that step) is not used."""
    return [
        f"model.path={model_dir}",
        "sft.steps=0",
        "evaluate_validation=false",
        "prompts_per_step=1",
        "rollouts_per_prompt=2",
        "rl.algo=grpo",
        "rl.group_size=2",
        "rollout_trace=false",
        'stages=[{"name": "eval", "steps": 1}]',
    ]


@dataclass
class ArmResult:
    """What one finished arm run measured (`arm.json` in its directory)."""

    env: str
    arm: str
    seed: int
    test_accuracy: float
    test_ci95: list[float]
    """The run's own 95% interval over test problems."""
    wall_s: float
    """RL: the run's `wall_s`; sft: SFT's seconds; sft_flops / sft_best: the continued
    training's."""
    response_tokens: float | None = None
    """Mean response tokens per rollout on the test evaluation (every arm; runs that predate
    it: RL training steps' mean, SFT arms None)."""
    tool_calls: float | None = None
    """Mean tool calls per rollout on the test evaluation (as `response_tokens`)."""
    pass_at_k: float | None = None
    """Share of test problems solved by at least one of their `eval_samples` samples (runs
    that predate it: None)."""
    tool_error_ratio_correct: float | None = None
    """RL: mean over steps of the share of failed calls inside correct rollouts (Figure 9)."""
    curve: list[list[float]] = field(default_factory=list)
    """RL: [step, tool_error_ratio_correct] per training step."""
    compute_tokens: float | None = None
    """Training-token equivalents of the arm's training after SFT (`rl_compute_tokens`; the
    SFT controls: the tokens they trained on)."""
    ood_accuracy: float | None = None
    """Accuracy on the out-of-distribution test (`ood_task`), None without one."""
    ood_ci95: list[float] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    """Where the numbers came from (e.g. the RL run whose `test_sft` is the sft arm's)."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def training_figures(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Means over an RL run's step rows (metrics.jsonl; the sft and final rows have no
    rollout figures) and the tool-error-ratio-in-correct curve."""
    steps = [r for r in rows if isinstance(r.get("tool_error_ratio_correct"), int | float)]

    def mean(key: str) -> float | None:
        values = [float(r[key]) for r in steps if isinstance(r.get(key), int | float)]
        return sum(values) / len(values) if values else None

    return {
        "response_tokens": mean("response_tokens_mean"),
        "tool_calls": mean("tool_calls_mean"),
        "tool_error_ratio_correct": mean("tool_error_ratio_correct"),
        "curve": [[float(r["step"]), float(r["tool_error_ratio_correct"])] for r in steps],
    }


def rl_compute_tokens(rows: Sequence[dict[str, Any]]) -> float:
    """An RL run's compute as training-token equivalents (module docstring): the sum over its
    steps of `trained_tokens + rollout_tokens / 3`."""
    total = 0.0
    for r in rows:
        if "trained_tokens" in r:
            total += float(r["trained_tokens"]) + float(r.get("rollout_tokens", 0.0)) / 3
    return total


@dataclass(frozen=True)
class Difference:
    """An arm minus another, seed by seed, in one env: the mean paired difference and its t
    interval over the seeds both have."""

    env: str
    arm: str
    minus: str
    measure: str
    """"test" or "ood"."""
    seeds: list[int]
    mean: float
    ci95: list[float]


def paired_differences(
    results: Sequence[ArmResult], pairs: Sequence[tuple[str, str]]
) -> list[Difference]:
    """For each env, pair in `pairs` and measure (test, and ood where both arms have it): the
    differences of the arms' accuracies over the seeds both ran. A pair with one common seed
    has no interval (its bounds are the difference itself)."""
    by_key = {(r.env, r.arm, r.seed): r for r in results}
    out = []
    for env in ENVS:
        for arm, minus in pairs:
            seeds = sorted(s for e, a, s in by_key if e == env and a == arm
                           and (env, minus, s) in by_key)  # fmt: skip
            if not seeds:
                continue
            for measure in ("test", "ood"):
                diffs = []
                for s in seeds:
                    a, b = by_key[(env, arm, s)], by_key[(env, minus, s)]
                    x = a.test_accuracy if measure == "test" else a.ood_accuracy
                    y = b.test_accuracy if measure == "test" else b.ood_accuracy
                    if x is not None and y is not None:
                        diffs.append(x - y)
                if len(diffs) == len(seeds):
                    mean, _, low, high = seed_interval(diffs)
                    out.append(Difference(env, arm, minus, measure, seeds, mean, [low, high]))
    return out


def format_differences(diffs: Sequence[Difference]) -> str:
    """The paired differences as lines (points, 95% interval over seeds)."""
    lines = []
    for d in diffs:
        lines.append(
            f"{d.env:<6} {d.arm} - {d.minus} ({d.measure}, {len(d.seeds)} seeds): "
            f"{100 * d.mean:+.1f} points (95% CI {100 * d.ci95[0]:+.1f} to {100 * d.ci95[1]:+.1f})"
        )
    return "\n".join(lines)


PAIRS = (("roc", "sft_best"), ("roc", "sft_flops"), ("grpo", "sft_best"), ("roc", "grpo"),
         ("roc", "sft"))  # fmt: skip
"""The paired differences an experiment reports (those whose two arms ran)."""


def best_checkpoint(validation: dict[int, float]) -> int:
    """The step of the best validation accuracy in {step: accuracy}; the earliest of equals
    (fewer steps for the same result)."""
    if not validation:
        raise ValueError("best_checkpoint needs at least one checkpoint")
    return min(validation, key=lambda step: (-validation[step], step))


def seed_interval(values: Sequence[float]) -> tuple[float, float | None, float, float]:
    """(mean, sd, low, high) over seeds: a t interval (module docstring); one value: (v, None,
    v, v), its interval left to the caller."""
    if not values:
        raise ValueError("seed_interval needs at least one value")
    n = len(values)
    mean = sum(values) / n
    if n == 1:
        return mean, None, mean, mean
    sd = statistics.stdev(values)
    t = T975[n - 2] if n - 1 <= len(T975) else 1.96
    half = t * sd / math.sqrt(n)
    return mean, sd, mean - half, mean + half


@dataclass
class ArmSummary:
    """One row of the table: an (env, arm) over its seeds."""

    env: str
    arm: str
    seeds: list[int]
    accuracy: float
    sd: float | None
    ci95: list[float]
    ci_over: str
    """"seeds" (t interval over seeds) or "problems" (one seed: the run's own interval)."""
    wall_s: float
    response_tokens: float | None
    tool_calls: float | None
    tool_error_ratio_correct: float | None
    compute_tokens: float | None = None
    ood_accuracy: float | None = None
    ood_ci95: list[float] | None = None
    """Over seeds (t interval) like `ci95`; with one seed, the run's own interval."""
    pass_at_k: float | None = None
    """Mean over seeds of the test pass@k (`ArmResult.pass_at_k`)."""


def _mean_of(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


def summarize(results: Sequence[ArmResult]) -> list[ArmSummary]:
    """The table's rows, in env then `ARMS` order."""
    groups: dict[tuple[str, str], list[ArmResult]] = {}
    for r in results:
        groups.setdefault((r.env, r.arm), []).append(r)
    out = []
    for (env, arm), rs in sorted(
        groups.items(), key=lambda kv: (ENVS.index(kv[0][0]), ARMS.index(kv[0][1]))
    ):
        rs = sorted(rs, key=lambda r: r.seed)
        mean, sd, low, high = seed_interval([r.test_accuracy for r in rs])
        over = "seeds"
        if len(rs) == 1:
            low, high = rs[0].test_ci95
            over = "problems"
        low, high = max(0.0, low), min(1.0, high)  # as accuracy intervals are
        ood_accuracy = ood_ci95 = None
        oods = [r.ood_accuracy for r in rs if r.ood_accuracy is not None]
        if len(oods) == len(rs):
            ood_accuracy, _, o_low, o_high = seed_interval(oods)
            if len(rs) == 1 and rs[0].ood_ci95 is not None:
                o_low, o_high = rs[0].ood_ci95
            ood_ci95 = [max(0.0, o_low), min(1.0, o_high)]
        out.append(
            ArmSummary(
                env=env,
                arm=arm,
                seeds=[r.seed for r in rs],
                accuracy=mean,
                sd=sd,
                ci95=[low, high],
                ci_over=over,
                wall_s=sum(r.wall_s for r in rs) / len(rs),
                response_tokens=_mean_of([r.response_tokens for r in rs]),
                tool_calls=_mean_of([r.tool_calls for r in rs]),
                tool_error_ratio_correct=_mean_of([r.tool_error_ratio_correct for r in rs]),
                compute_tokens=_mean_of([r.compute_tokens for r in rs]),
                ood_accuracy=ood_accuracy,
                ood_ci95=ood_ci95,
                pass_at_k=_mean_of([r.pass_at_k for r in rs]),
            )
        )
    return out


def _num(x: float | None, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def format_table(rows: Sequence[ArmSummary]) -> str:
    """The fixed-width table `rstar2 experiment` prints (accuracies in percent)."""
    head = (
        f"{'env':<6} {'arm':<9} {'n':>2}  {'test pass@1':>15}  {'95% CI':>13} {'over':<8} "
        f"{'pass@k':>6} {'time':>7} {'len':>6} {'tools':>5} {'err+':>6} {'ood':>5}"
    )
    lines = [head]
    for r in rows:
        sd = "" if r.sd is None else f" +- {100 * r.sd:4.1f}"
        acc = f"{100 * r.accuracy:5.1f}{sd}"
        ci = f"{100 * r.ci95[0]:5.1f}-{100 * r.ci95[1]:5.1f}"
        lines.append(
            f"{r.env:<6} {r.arm:<9} {len(r.seeds):>2}  {acc:>15}  {ci:>13} {r.ci_over:<8} "
            f"{_num(None if r.pass_at_k is None else 100 * r.pass_at_k, '6.1f'):>6} "
            f"{r.wall_s:6.0f}s {_num(r.response_tokens, '6.1f'):>6} "
            f"{_num(r.tool_calls, '5.2f'):>5} {_num(r.tool_error_ratio_correct, '6.3f'):>6} "
            f"{_num(None if r.ood_accuracy is None else 100 * r.ood_accuracy, '5.1f'):>5}"
        )
    return "\n".join(lines)
