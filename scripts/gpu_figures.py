"""The production trainer's GPU figures in one command (docs/production.md, "On a GPU").

    python3 scripts/gpu_figures.py --out DIR [--part engine|bench|train|variants|all] [--smoke]
                                   [--deadline S] [--only NAME,...] [--train-set KEY=VALUE]
                                   [--wide-steps N] [--variant NAME:KEY=VALUE[,...]]

Made for a machine lent for a short while (no network, a time limit per command): every
measurement has a time limit, and DIR/gpu_figures.json is rewritten after each one, so a run
cut short keeps what it measured. Several invocations into one DIR add to its results; each
is on record under `invocations` (its arguments, its exit, or what it died of), since the
machine may return only the end of a command's output. Parts (`all`: engine, train, bench,
in that order):

- `engine`: first `--check-engine` (the embedded engine's decode paths, fixed-shape with and
  without CUDA graphs and dynamic, against each other and HF `generate`: greedy tokens, a
  preempting KV budget, a multi-turn continuation, sampled log-probs, rounds of 8 decode
  steps against single steps, a step of batched prefill groups against the model's logits and
  the attention kernel torch picks for each kind of call), then `scripts/engine_host_split.py`
  on the tiny and 25m shapes, one step at a time and in rounds of 8 (a step's time, part by
  part: the host's work, the graph replay, the wait for the GPU) and over 4-turn
  conversations, then `rstar2 bench engine` (the engine against HF
  `generate`'s batch sizes) for each entry of `ENGINE_PLAN`; the host splits and the entries
  one after another in one worker process (`--engine-worker`; replaced if it times out or
  dies).

- `bench`: first `--check-packed` (the packed, chunked-head log-probs against the padded
  full-logits ones on the GPU), then `rstar2 bench learner` measurements (an RL update on a
  synthetic batch) of random-weight models of Qwen2.5-0.5B and Qwen2.5-1.5B shape (`rstar2
  init-model --shape`), bf16 compute with fp32 master weights, for each entry of `VARIANTS`:
  the learner before packing (`--padded --reshard`) and as `rstar2 train` runs it on a GPU,
  plain and with FSDP2 (a one-rank NCCL group) + activation checkpointing, on fixed-length and
  RL-shaped batches, then each optimisation alone against its "before". The measurements of
  one model run one after another in a worker process (`--worker`; Python, torch and CUDA start
  once per model); a worker that times out or dies is replaced. (GPU peak memory is reset for
  each measurement; on the CPU, `--smoke`, the peak is the worker process's so far.) Figures: tokens/s, MFU, peak
  GPU memory, s/update and its split. A benchmark that fails (out of memory, most likely) is
  tried once more with half the micro-batch; the entry says so (`first_try`). `--deadline S`
  starts no benchmark after S seconds; `--only` runs the named entries in the given order.
- `train`: `rstar2 train --config configs/gpu_20m.toml` (a 19.8M model from scratch: SFT, the
  learner and the embedded engine on CUDA), then its figures from the run directory: SFT time,
  RL s/step (with and without evaluations) and its parts, generated tokens/s, validation and
  test accuracy after SFT and after RL, and the GPU's peak memory in use (`nvidia-smi`, sampled
  every second). The run's metrics.jsonl and summary.json are copied into DIR. `--train-set
  KEY=VALUE` (repeatable) passes a setting to the run (e.g. `engine.decode_steps=1`). Then a
  wide run (`--wide-steps`, default 8; 0: none): RL only from the run's SFT model with 4x the
  rollouts at once (`wide_settings`), for what the batch does to generated tokens/s. Then each
  `--variant NAME:KEY=VALUE[,...]`: RL only from the SFT model at the run's own batch with
  those settings (an A/B of a setting, e.g. `graph.switch_interval_ms=5`).
- `variants`: only the wide run (with `--wide-steps N`) and the `--variant` runs, from the
  SFT model an earlier `--part train` left in `--work`.

`--smoke` runs both parts at toy size on whatever torch finds (the tiny shape, small batches,
`train --quick`): the check, where no GPU is, that the script itself works. Prints a Markdown
table of everything at the end (also DIR/gpu_figures.md). Before anything, the Python packages
rstar2 imports are checked; a missing one stops the script with the list to carry as wheels.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import queue
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpu_checks import engine_check, packed_check
from gpu_markdown import markdown

ROOT = Path(__file__).resolve().parents[1]

NEEDED = (
    "torch", "transformers", "tokenizers", "zmq", "msgspec", "anyio", "trio", "sympy",
    "math_verify", "numpy", "matplotlib", "safetensors",
)  # fmt: skip
"""Modules `rstar2 train` and `rstar2 bench learner` import (the GPU image lacks zmq, msgspec,
trio and math_verify: carry them as wheels, docs/production.md "On a GPU")."""

BATCH = ("--rollouts", "16", "--tokens", "2048", "--micro-batch", "4", "--steps", "3", "--no-push")
SMOKE_BATCH = (
    "--rollouts",
    "2",
    "--tokens",
    "64",
    "--micro-batch",
    "2",
    "--steps",
    "1",
    "--no-push",
)
BEFORE = ("--padded", "--reshard", "--sync-every-micro-batch", "--shard-per-layer")
"""The learner as it was before packing: padded rows, full-vocabulary logits, FSDP2 units of
one decoder layer each, resharding after forward and reducing gradients after every
micro-batch on one rank (and no compiled layers: `bench learner` compiles only when asked)."""
AFTER = ("--compile", "--compile-head")
"""The learner as `rstar2 train` runs it on a GPU: packed rows, the chunked LM head with its
element-wise work compiled, compiled layers, fused AdamW, FSDP2 on one rank with the whole
model one unit, keeping its gathered parameters and reducing once a mini-batch."""
PER_LAYER = ("--shard-per-layer",)
PROFILE = ("--profile",)
"""One more update under torch.profiler, after the timed ones (figures unchanged): where the
FSDP2 variants' time above the plain one's goes, and how much of an update the GPU had work
(`device_busy_ms`: whether the update is bound by the host's launches)."""
RL = ("--workload", "rl", "--micro-batch-tokens", "8192")
FSDP_AC = ("--fsdp", "--activation-checkpointing")
SELECTIVE = ("--checkpoint-policy", "selective")
VARIANTS = (
    # (name, extra arguments, both shapes?), most important first: a deadline drops the tail
    ("before-plain", BEFORE, True),
    ("plain", (*AFTER, *PROFILE), True),
    ("no-compile-head", ("--compile",), True),
    ("before-fsdp-ac", (*BEFORE, *FSDP_AC), True),
    ("fsdp-ac", (*AFTER, *FSDP_AC, *PROFILE), True),
    # checkpointing that keeps the matmuls' outputs and recomputes only element-wise work
    ("fsdp-ac-selective", (*AFTER, *FSDP_AC, *SELECTIVE, *PROFILE), True),
    # the same in micro-batches of 4,096 tokens: selective's kept outputs halved (memory)
    ("fsdp-ac-selective-micro-batch-4k", (*AFTER, *FSDP_AC, *SELECTIVE, "--micro-batch", "2"),
     False),
    ("fsdp-ac-every-2", (*AFTER, *FSDP_AC, "--checkpoint-every", "2"), True),
    ("fsdp-ac-per-layer", (*AFTER, *FSDP_AC, *PER_LAYER, *PROFILE), True),
    # FSDP2 with checkpointing as run 6 measured it (2026-11-27)
    ("fsdp-ac-per-layer-sync-every",
     (*AFTER, *FSDP_AC, *PER_LAYER, "--sync-every-micro-batch", *PROFILE), True),
    # micro-batches of 16,384 tokens, `learner.micro_batch_tokens`' default in train
    ("plain-micro-batch-16k", (*AFTER, "--micro-batch", "8"), True),
    # the 0.5B update pays a fixed host cost per forward (runs 8-9): the whole batch in one
    # micro-batch, and selective checkpointing in half as many
    ("plain-micro-batch-32k", (*AFTER, "--micro-batch", "16", *PROFILE), False),
    ("fsdp-ac-selective-micro-batch-16k", (*AFTER, *FSDP_AC, *SELECTIVE, "--micro-batch", "8"),
     False),
    # the same update with CUDA graphs (each compiled layer's kernels as one launch): the
    # lever for a host-bound update, the fixed workload's micro-batches one shape
    ("plain-reduce-overhead", (*AFTER, "--compile-mode", "reduce-overhead", *PROFILE), False),
    ("rl-before-plain", (*RL, *BEFORE), True),
    ("rl-plain", (*RL, *AFTER), True),
    # each optimisation alone, against "before" (the 0.5B shape only)
    ("packed-alone", (), False),
    ("compile-alone", (*BEFORE, "--compile"), False),
    ("before-fsdp", (*BEFORE, "--fsdp"), False),
    ("fsdp-keep-alone", ("--padded", "--sync-every-micro-batch", *PER_LAYER, "--fsdp"), False),
    ("fsdp-defer-alone", ("--padded", "--reshard", *PER_LAYER, "--fsdp"), False),
    ("fsdp-one-unit-alone", ("--padded", "--reshard", "--sync-every-micro-batch", "--fsdp"),
     False),
    ("before-ac", ("--padded", "--activation-checkpointing"), False),
    ("ac-every-2-alone", ("--padded", "--activation-checkpointing", "--checkpoint-every", "2"),
     False),
    ("ac-selective-alone", ("--padded", "--activation-checkpointing", *SELECTIVE), False),
    ("chunk-2048", (*AFTER, "--head-chunk", "2048"), False),
)  # fmt: skip
SHAPES_FIRST = ("qwen2.5-0.5b", "qwen2.5-1.5b")
ROUNDS = ("--decode-steps", "8")
TURNS = ("--turns", "4", "--max-tokens", "128", "--kv-budget", "262144")  # fit 1,024 positions
PREFILL = ("--prefill-graphs", "64")  # prefills of up to 64 new tokens on fixed shapes
ENGINE_WORK = ("--requests", "256", "--max-tokens", "256", "--batch-sizes", "64,256")
ENGINE_PLAN = (
    # (name, `rstar2 bench engine` arguments), most important first: the fixed-shape decode
    # with CUDA graphs (the GPU default) on each shape, the 25m one first (the nearest to
    # `configs/gpu_20m.toml`'s 19.8M model), beside it in rounds of 8 decode steps
    # (`engine.decode_steps`) and, for the small shapes, conversations of 4 turns (multi-turn
    # RL's continuations, without the tool's time), then "before" (the dynamic path) and the
    # fixed path without graphs
    ("25m-fixed", ("--model-size", "25m", "--decode", "fixed")),
    ("25m-fixed-rounds-8", ("--model-size", "25m", "--decode", "fixed", *ROUNDS)),
    ("25m-fixed-rounds-8-turns-4", ("--model-size", "25m", "--decode", "fixed", *ROUNDS, *TURNS)),
    ("25m-fixed-rounds-8-turns-4-prefill-64",
     ("--model-size", "25m", "--decode", "fixed", *ROUNDS, *TURNS, *PREFILL)),
    ("tiny-fixed", ("--model-size", "tiny", "--decode", "fixed")),
    ("tiny-fixed-rounds-8", ("--model-size", "tiny", "--decode", "fixed", *ROUNDS)),
    ("tiny-fixed-rounds-8-turns-4",
     ("--model-size", "tiny", "--decode", "fixed", *ROUNDS, *TURNS)),
    ("tiny-fixed-rounds-8-turns-4-prefill-64",
     ("--model-size", "tiny", "--decode", "fixed", *ROUNDS, *TURNS, *PREFILL)),
    ("qwen2.5-0.5b-fixed",
     ("--model-size", "qwen2.5-0.5b", "--dtype", "bfloat16", "--decode", "fixed")),
    ("qwen2.5-0.5b-fixed-rounds-8",
     ("--model-size", "qwen2.5-0.5b", "--dtype", "bfloat16", "--decode", "fixed", *ROUNDS)),
    ("qwen2.5-1.5b-fixed",
     ("--model-size", "qwen2.5-1.5b", "--dtype", "bfloat16", "--decode", "fixed")),
    ("tiny-dynamic", ("--model-size", "tiny", "--decode", "dynamic")),
    ("qwen2.5-0.5b-dynamic",
     ("--model-size", "qwen2.5-0.5b", "--dtype", "bfloat16", "--decode", "dynamic")),
    ("tiny-fixed-no-graphs", ("--model-size", "tiny", "--decode", "fixed", "--no-cuda-graphs")),
    ("qwen2.5-0.5b-fixed-no-graphs", ("--model-size", "qwen2.5-0.5b", "--dtype", "bfloat16",
                                      "--decode", "fixed", "--no-cuda-graphs")),
)  # fmt: skip
SMOKE_ENGINE_WORK = ("--requests", "8", "--max-tokens", "16", "--batch-sizes", "8")


def missing_modules(names: tuple[str, ...] = NEEDED) -> list[str]:
    """The modules of `names` this interpreter cannot import."""
    return [n for n in names if importlib.util.find_spec(n) is None]


def bench_plan(smoke: bool) -> list[tuple[str, str, list[str]]]:
    """(name, shape, `rstar2 bench learner` arguments) of every learner measurement: each
    variant on both shapes before the next variant, so that a deadline drops the least
    important ones."""
    shapes = ("tiny",) if smoke else SHAPES_FIRST
    batch = SMOKE_BATCH if smoke else BATCH
    return [
        (f"{shape}-{name}", shape, [*batch, "--bf16", *extra])
        for name, extra, both in VARIANTS
        for shape in (shapes if both else shapes[:1])
    ]


def select(
    plan: list[tuple[str, str, list[str]]], only: str | None
) -> list[tuple[str, str, list[str]]]:
    """The entries of `plan` named in `only` (comma-separated), in that order; all without it.
    An unknown name is an error."""
    if not only:
        return plan
    by_name = {name: (name, shape, extra) for name, shape, extra in plan}
    names = [n.strip() for n in only.split(",") if n.strip()]
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise SystemExit(f"--only: unknown benchmarks {', '.join(unknown)}")
    return [by_name[n] for n in names]


def engine_plan(smoke: bool) -> list[tuple[str, list[str]]]:
    """(name, `rstar2 bench engine` arguments) of every engine measurement."""
    if smoke:
        return [(name, [*SMOKE_ENGINE_WORK, *extra]) for name, extra in ENGINE_PLAN
                if name.startswith("tiny")]  # fmt: skip
    return [(name, [*ENGINE_WORK, *extra]) for name, extra in ENGINE_PLAN]


def host_split_commands(device: str, smoke: bool) -> list[list[str]]:
    """`scripts/engine_host_split.py` measurements, for the engine worker (`host-split` and the
    script's arguments): where a fixed-path engine step's time goes (the host's parts, the
    replay, the wait for the GPU), for the tiny and 25m shapes, one step at a time and in
    rounds of 8, then the largest of them in rounds of 8 over conversations of 4 turns
    (multi-turn RL's workload: how much the prefill steps, which run the dynamic forward, cost
    beside the rounds), and the same with prefills of up to 64 new tokens on fixed shapes
    (`--prefill-graphs 64`); those two also count the ops a prefill step dispatches
    (`--count-ops`: with CUDA graphs, a fixed-shape prefill's step is a replay)."""
    work = ["--requests", "8", "--max-tokens", "16"] if smoke else []
    sizes = ("tiny",) if smoke else ("tiny", "25m")
    turns = ["--turns", "4", "--count-ops"] + ([] if smoke else ["--max-tokens", "128"])
    return [["host-split", "--device", device, "--model-size", size, *work, *steps]
            for size, steps in [*((s, x) for s in sizes for x in ((), ROUNDS)),
                                (sizes[-1], (*ROUNDS, *turns)),
                                (sizes[-1], (*ROUNDS, *turns, *PREFILL))]]  # fmt: skip


def split_name(command: list[str]) -> str:
    """A host-split command's name: its shape, with `-rounds-K` for rounds of K steps."""
    name = command[command.index("--model-size") + 1]
    if "--decode-steps" in command:
        name += f"-rounds-{command[command.index('--decode-steps') + 1]}"
    if "--turns" in command:
        name += f"-turns-{command[command.index('--turns') + 1]}"
    if "--prefill-graphs" in command:
        name += f"-prefill-{command[command.index('--prefill-graphs') + 1]}"
    return name


def smaller_micro_batch(args: list[str]) -> list[str]:
    """`args` with `--micro-batch` halved (the retry of a benchmark that failed, most likely
    out of GPU memory); the same list when it is already 1 or absent."""
    out = list(args)
    if "--micro-batch" in out:  # the last one: the one argparse takes
        i = len(out) - 1 - out[::-1].index("--micro-batch") + 1
        out[i] = str(max(1, int(out[i]) // 2))
    return out


class GpuMemory:
    """The peak of the GPU's memory in use (MiB, all processes) while open, from `nvidia-smi`
    every second; `peak_mb` stays None without it."""

    def __init__(self) -> None:
        self.peak_mb: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(1.0):
            used = gpu_memory_used_mb()
            if used is not None:
                self.peak_mb = max(self.peak_mb or 0.0, used)

    def __enter__(self) -> GpuMemory:
        if shutil.which("nvidia-smi"):
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()


def gpu_memory_used_mb() -> float | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=10,
        )  # fmt: skip
        return float(out.stdout.split()[0])
    except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
        return None


def script_env() -> dict[str, str]:
    """This environment with the repository first on PYTHONPATH (carried wheels kept)."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path}


def run_command(args: list[str], timeout_s: float, log: Path) -> tuple[int, str, float]:
    """Run `python -m rstar2.cli ARGS` from the repository root: (exit code, stdout, seconds);
    stderr goes to `log`. A command past `timeout_s` is killed (exit code 124)."""
    env = script_env()
    start = time.perf_counter()
    with log.open("a") as err:
        err.write(f"\n$ rstar2 {' '.join(args)}\n")
        err.flush()
        try:
            out = subprocess.run(
                [sys.executable, "-m", "rstar2.cli", *args],
                cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=err, text=True,
                timeout=timeout_s,
            )  # fmt: skip
            return out.returncode, out.stdout, time.perf_counter() - start
        except subprocess.TimeoutExpired as e:
            stdout = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            return 124, stdout, time.perf_counter() - start


def run_check(command: list[str], timeout_s: float) -> dict[str, Any]:
    """One of this script's `--check-*` runs in a process of its own: its JSON, or the error."""
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s,
                              cwd=ROOT, env=script_env())  # fmt: skip
    except subprocess.TimeoutExpired:
        return {"error": "timed out"}
    return last_json(done.stdout) or {"error": done.stderr[-1500:]}


def last_json(stdout: str) -> dict[str, Any] | None:
    """The JSON object on stdout's last non-empty line (None if there is none)."""
    lines = [line for line in stdout.splitlines() if line.strip()]
    try:
        value = json.loads(lines[-1]) if lines else None
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def train_figures(run_dir: Path) -> dict[str, Any]:
    """A training run's figures from its directory (a run cut short gives what it has)."""
    out: dict[str, Any] = {}
    sft = run_dir / "model-sft" / "sft.json"
    if sft.is_file():
        info = json.loads(sft.read_text())
        out["sft_steps"], out["sft_s"] = info["steps"], info["seconds"]
        out["sft_final_loss"] = info.get("final_loss")
        out["sft_skipped_steps"] = len(info.get("skipped_steps", []))  # non-finite gradients
    metrics = run_dir / "metrics.jsonl"
    rows = []
    if metrics.is_file():
        rows = [json.loads(x) for x in metrics.read_text().splitlines() if x.strip()]
    steps = [r for r in rows if "step_s" in r]
    if steps:
        total = [float(r["step_s"]) for r in steps]
        bare = [float(r["step_s"]) - float(r.get("time_eval_s", 0.0)) for r in steps]
        out["rl_steps"] = len(steps)
        out["step_s_mean"] = statistics.fmean(total)
        out["step_s_without_evals_mean"] = statistics.fmean(bare)
        for key in ("time_gen_s", "time_tool_s", "time_learner_s", "time_sync_s",
                    "weights_bus_bytes"):  # fmt: skip
            values = [float(r[key]) for r in steps if key in r]
            if values:
                out[key + "_mean"] = statistics.fmean(values)
        gen_s = sum(float(r.get("time_gen_s", 0.0)) for r in steps)
        tokens = sum(float(r.get("gen_tokens", 0.0)) for r in steps)
        if gen_s > 0:
            out["gen_tokens_per_s"] = tokens / gen_s
        phase = sum(rollout_phase_s(r) for r in steps)
        if phase > 0:
            out["gen_tokens_per_phase_s"] = tokens / phase
        out.update(engine_figures(steps))
        out.update(loop_figures(steps))
        out["skipped_updates"] = sum(float(r.get("skipped_updates", 0.0)) for r in steps)
        out["reward_first_10"] = statistics.fmean(float(r["reward_mean"]) for r in steps[:10])
        out["reward_last_10"] = statistics.fmean(float(r["reward_mean"]) for r in steps[-10:])
    evals = [r for r in rows if "heldout_accuracy" in r]
    if evals:
        out["validation_sft"] = evals[0]["heldout_accuracy"]
        out["validation_last"] = evals[-1]["heldout_accuracy"]
        out["validation_last_step"] = evals[-1]["step"]
    tests = [r for r in rows if "test_accuracy" in r]
    if tests:
        out["test_sft"] = tests[0]["test_accuracy"]
        if len(tests) > 1:
            out["test_final"] = tests[-1]["test_accuracy"]
    summary = run_dir / "summary.json"
    out["finished"] = summary.is_file()
    if out["finished"]:
        out["wall_s"] = json.loads(summary.read_text())["wall_s"]
    return out


def training_run(
    run_dir: Path, args: list[str], timeout: float, log: Path, settings: list[str]
) -> dict[str, Any]:
    """`rstar2 train --run-dir RUN_DIR ARGS` within `timeout` seconds, and its figures (the
    GPU's peak memory in use sampled meanwhile)."""
    shutil.rmtree(run_dir, ignore_errors=True)
    with GpuMemory() as memory:
        rc, _, secs = run_command(["train", "--run-dir", str(run_dir), *args], timeout, log)
    return {"exit": rc, "seconds": secs, "gpu_peak_used_mb": memory.peak_mb, "set": settings,
            **train_figures(run_dir)}  # fmt: skip


WIDE_STEPS = 8
"""The wide run's RL steps unless `--wide-steps` says otherwise (after a training run)."""
WIDE = {"prompts_per_step": 4, "engine.max_num_seqs": 4, "engine.kv_budget_tokens": 4,
        "sandbox.concurrency": 2}  # fmt: skip
"""The wide run's batch: 4x the prompts a step (so 4x the rollouts at once), the engine's
sequences and its KV budget to match, and twice the sandbox's executions at once (4x the
tool calls a step; the GPU machines have 16 cores)."""


def wide_settings(sft: Path, steps: int, cfg: Any) -> list[str]:
    """The wide run's settings (`--set KEY=VALUE`): RL only, from the training run's SFT model
    (`cfg`, that run's `TrainConfig`), `steps` steps of 4x the rollouts at once
    (`configs/gpu_20m.toml`: 512 instead of 128), no evaluation. In multi-turn RL a step's
    generation takes about as many engine steps whatever the batch (its longest rollout sets
    them: on the CPU, 165 a step at 128 rollouts, 207 at 512), so on a GPU, where an engine
    step of a small model costs about the same at 128 or 512 rows, generated tokens/s grows
    with the batch: this run measures by how much."""
    base = {"prompts_per_step": cfg.prompts_per_step, "engine.max_num_seqs": cfg.engine.max_num_seqs,
            "engine.kv_budget_tokens": cfg.engine.kv_budget_tokens,
            "sandbox.concurrency": cfg.sandbox.concurrency}  # fmt: skip
    wide = [f"{key}={value * WIDE[key]}" for key, value in base.items()]
    return rl_only_settings(sft, steps) + wide


def train_args(smoke: bool, settings: list[str]) -> list[str]:
    """`rstar2 train`'s arguments for this script's runs: `configs/gpu_20m.toml` (`--quick`
    with `--smoke`), then each of `settings` as a `--set`."""
    base = ["--quick"] if smoke else ["--config", "configs/gpu_20m.toml"]
    return [*base, *(arg for setting in settings for arg in ("--set", setting))]


def rl_only_settings(sft: Path, steps: int) -> list[str]:
    """RL only, from the training run's SFT model, `steps` steps of up to 160 response
    tokens, no evaluation (the wide run's and the variants' common settings)."""
    return [f"model.path={sft}", "sft.steps=0", "heldout_problems=0", "test_problems=0",
            "eval_every=0", f"checkpoint_every={steps + 1}",
            f'stages=[{{"name": "rl1", "steps": {steps}, "max_response_tokens": 160}}]']  # fmt: skip


def parse_variant(text: str) -> tuple[str, list[str]]:
    """`NAME:KEY=VALUE[,KEY=VALUE...]` (nothing after the colon: the config as it is) as the
    variant's name and its settings; `ValueError` for anything else."""
    name, colon, rest = text.partition(":")
    name = name.strip()
    settings = [item.strip() for item in rest.split(",") if item.strip()]
    if not colon or not VARIANT_NAME.fullmatch(name) or any("=" not in i for i in settings):
        raise ValueError(
            f"--variant {text!r}: expected NAME:KEY=VALUE[,KEY=VALUE...] (or NAME: for the "
            "config as it is), NAME of letters, digits, '.', '-' and '_'"
        )
    return name, settings


VARIANT_NAME = re.compile(r"[A-Za-z0-9._-]+")
"""A variant's name: also the name of its run directory (`WORK/variant-NAME`)."""


def engine_figures(steps: list[dict[str, Any]]) -> dict[str, Any]:
    """What the engines did over the RL steps' generation (`engine_split`'s metrics): the
    share of the rollout phase's wall time spent inside engine steps (summed over engines;
    `time_gen_s` alone is no denominator: it is the phase's time apportioned by the rollouts'
    summed generation, tool and reward seconds, and an engine computes for some rollouts while
    others wait for tools, so engine time could exceed it), the share of decode steps run
    inside rounds (`engine.decode_steps`), the share of engine time in steps that prefilled
    a prompt or a new turn and what such a step took against a decode-only step, the time a
    step took, split into the host's own work and its wait for the device, and the
    generated tokens per second of engine steps (the engine's rate when it has work, tool
    waits left out); and, whatever the hardware, the engine steps an RL step's generation
    took and the tokens each generated (the batch's effect: see `wide_settings`)."""
    rows = [r for r in steps if r.get("engine_steps")]
    if not rows:
        return {}
    count = sum(float(r["engine_steps"]) for r in rows)
    busy = sum(float(r["engine_step_s"]) for r in rows)
    wait = sum(float(r["engine_wait_s"]) for r in rows)
    phase = sum(rollout_phase_s(r) for r in rows)
    rounds = sum(float(r.get("engine_round_steps", 0.0)) for r in rows)
    prefills = sum(float(r.get("engine_prefill_steps", 0.0)) for r in rows)
    prefill_s = sum(float(r.get("engine_prefill_s", 0.0)) for r in rows)
    tokens = sum(float(r.get("gen_tokens", 0.0)) for r in rows)
    return {
        "engine_steps_per_rl_step": count / len(rows),
        "gen_tokens_per_engine_step": tokens / count,
        "engine_busy_share": busy / phase if phase > 0 else None,
        "engine_round_share": rounds / count,
        "engine_prefill_share": prefill_s / busy if busy > 0 else None,
        "engine_prefill_step_ms": prefill_s * 1e3 / prefills if prefills else None,
        "engine_decode_step_ms": (busy - prefill_s) * 1e3 / (count - prefills)
        if count > prefills
        else None,
        "engine_step_ms": busy * 1e3 / count,
        "engine_host_ms": (busy - wait) * 1e3 / count,
        "engine_wait_ms": wait * 1e3 / count,
        "gen_tokens_per_engine_s": tokens / busy if busy > 0 else None,
    }


def rollout_phase_s(row: dict[str, Any]) -> float:
    """An RL step's rollout phase, wall seconds: its time apportioned to generation, tool
    calls and reward (`time_gen_s` + `time_tool_s` + `time_reward_s`)."""
    return sum(float(row.get(k, 0.0)) for k in ("time_gen_s", "time_tool_s", "time_reward_s"))


def loop_figures(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The event loops' part of the rollout phase, from the RL steps' rows that have it (an
    engine without steps, such as the instant one, included): `loop_cpu_s_mean` and
    `loop_cpu_share`, the CPU seconds of the training process's event-loop thread while a
    step's rollouts were collected (with `graph.processes = 1` every actor's Python but the
    engines' and learner's threads) and their share of the rollout phase's wall time. Near 1
    the event loop's Python bounds the phase, whatever the GPU does: the engine's host work
    waits for the same interpreter lock. The same for the busiest event loop a rollout
    worker ran in (`worker_loop_cpu_s`: with `graph.worker_processes` a worker's own
    process, where the agent loops run while the training process's loop only collects
    results): `worker_loop_cpu_s_mean` and `worker_loop_cpu_share`."""
    figures: dict[str, Any] = {}
    for key in ("loop_cpu_s", "worker_loop_cpu_s"):
        having = [r for r in rows if key in r]
        if having:
            name = key.removesuffix("_s")
            cpu = sum(float(r[key]) for r in having)
            phase = sum(rollout_phase_s(r) for r in having)
            figures[f"{key}_mean"] = cpu / len(having)
            figures[f"{name}_share"] = cpu / phase if phase > 0 else None
    return figures


class BenchWorker:
    """A process running measurements one after another: `bench learner` on one model
    directory (`--worker DIR`) or `bench engine` (`--engine-worker`). Python, torch and CUDA
    start once per worker instead of once per benchmark (about 10 of the 23 seconds each
    learner benchmark took on an H200 as separate commands). The process starts with the
    first measurement, and again with the next one after it timed out or died."""

    def __init__(self, mode: list[str], log: Path) -> None:
        self.mode, self.log = mode, log
        self.proc: subprocess.Popen[str] | None = None

    def _start(self) -> None:
        self._err = self.log.open("a")
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), *self.mode],
            cwd=ROOT, env=script_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=self._err, text=True, bufsize=1,
        )  # fmt: skip
        # each process's reader fills its own queue: a killed process's end of output (None),
        # read after the next process started, must not reach the next one's queue
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, args=(self.proc, self._lines), daemon=True).start()

    def _read(self, proc: subprocess.Popen[str], lines: queue.Queue[str | None]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    def measure(self, args: list[str], timeout_s: float) -> dict[str, Any]:
        """One measurement: {"ok": figures} or {"error": why}; a timeout or a dead worker
        is an error, after which this worker's process is closed (the next measurement
        starts another)."""
        if not self.alive:
            self.close()
            self._start()
        assert self.proc is not None and self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps(args) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            return {"error": "the worker had died (see gpu_figures.log)"}
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                self.close()
                return {"error": f"timed out after {timeout_s:.0f} s"}
            if line is None:  # its output ended: it is exiting, or as good as dead
                try:
                    code: int | str = self.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    code = "none: killed after its output ended"
                self.close()
                return {"error": f"the worker died (exit {code}; see gpu_figures.log)"}
            reply = last_json(line)
            if reply is not None and ("ok" in reply or "error" in reply):
                return reply

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def close(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self._err.close()
        self.proc = None


def serve_entries(measure: Callable[[list[str]], dict[str, Any]], reset_compiled: bool) -> int:
    """A worker's loop: one argument list per stdin line (JSON), `measure`d in this process;
    one JSON line per entry on stdout, {"ok": figures} or {"error": text}, the next entry
    going on after an error. Between entries the garbage is collected, compiled code dropped
    (`reset_compiled`) and the GPU's cached memory freed."""
    import gc

    import torch

    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            reply: dict[str, Any] = {"ok": measure(json.loads(line))}
        except Exception as e:  # noqa: BLE001 - reported as this entry's error, the next goes on
            reply = {"error": f"{type(e).__name__}: {e}"[:2000]}
        except SystemExit as e:  # argparse's own errors
            reply = {"error": f"bad arguments (exit {e.code})"}
        finally:
            gc.collect()
            if reset_compiled:
                torch._dynamo.reset()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        print(json.dumps(reply), flush=True)
    return 0


def worker(model_dir: Path) -> int:
    """`--worker DIR`: `bench learner` measurements on the model in DIR (`serve_entries`),
    each from a freshly loaded policy with the GPU's peak memory reset; compiled code is
    dropped between entries."""
    from rstar2.commands import bench_learner, bench_learner_run

    parser = argparse.ArgumentParser(prog="bench learner")
    bench_learner.add_arguments(parser)

    def measure(argv: list[str]) -> dict[str, Any]:
        args = parser.parse_args([*argv, "--model", str(model_dir)])
        bench_learner.check_arguments(args)
        return bench_learner_run.measure(args, model_dir)

    return serve_entries(measure, reset_compiled=True)


def engine_worker() -> int:
    """`--engine-worker`: `bench engine` measurements, and `scripts/engine_host_split.py`'s
    for an entry that starts with "host-split" (`serve_entries`); an entry's models, caches
    and CUDA graphs are freed before the next."""
    import engine_host_split

    from rstar2.commands import bench_engine

    parser = argparse.ArgumentParser(prog="bench engine")
    bench_engine.add_arguments(parser)

    def measure(argv: list[str]) -> dict[str, Any]:
        if argv[:1] == ["host-split"]:
            return engine_host_split.split(engine_host_split.arguments().parse_args(argv[1:]))
        return bench_engine.measure(parser.parse_args(argv))[0]

    return serve_entries(measure, reset_compiled=False)


def environment() -> dict[str, Any]:
    import torch  # the figures say which torch and device they were taken with

    has_gpu = torch.cuda.is_available()
    return {
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(0) if has_gpu else "cpu",
        "cuda": torch.version.cuda,
    }


def arg_parser() -> argparse.ArgumentParser:
    """The command line of this script (`main`)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, help="directory for the results (required)")
    p.add_argument("--part", choices=("engine", "bench", "train", "variants", "all"), default="all")
    p.add_argument("--smoke", action="store_true", help="toy sizes: check the script itself")
    p.add_argument("--bench-timeout", type=float, default=150.0, help="seconds per benchmark")
    p.add_argument(
        "--deadline",
        type=float,
        default=0.0,
        help="seconds: start no benchmark after this much time (0: none); skipped ones say so",
    )
    p.add_argument("--train-timeout", type=float, default=540.0, help="seconds for the run")
    p.add_argument(
        "--train-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a setting for the training run (`rstar2 train --set`; repeatable), e.g. "
        "engine.decode_steps=1",
    )
    p.add_argument(
        "--wide-steps",
        type=int,
        help=f"RL steps of a wide run from the training run's SFT model: 4x the rollouts at "
        f"once (0: none); after the training run (default {WIDE_STEPS}), and with `--part "
        "variants` (default 0) before the variants, from an earlier `--part train`'s model",
    )
    p.add_argument("--wide-timeout", type=float, default=150.0, help="seconds for the wide run")
    p.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME:KEY=VALUE[,KEY=VALUE...]",
        help="after the training run (and the wide run), an RL-only run from its SFT model at "
        "its batch with these settings (NAME: alone, the config as it is; repeatable); "
        "`--part variants` runs only these, from an earlier `--part train` in the same --work",
    )
    p.add_argument("--variant-steps", type=int, default=6, help="RL steps of each variant run")
    p.add_argument(
        "--variant-timeout", type=float, default=90.0, help="seconds for each variant run"
    )
    p.add_argument(
        "--work",
        type=Path,
        default=Path(tempfile.gettempdir()) / "rstar2-gpu-figures",
        help="scratch directory: models, the run (default: TMP/rstar2-gpu-figures)",
    )
    p.add_argument(
        "--check-packed",
        metavar="DEVICE",
        help="only compare the packed log-probs with the padded reference on DEVICE and print "
        "the JSON (the bench part runs it first, on cuda when there is a GPU)",
    )
    p.add_argument(
        "--check-engine",
        metavar="DEVICE",
        help="only compare the engine's decode paths and HF generate on DEVICE and print the "
        "JSON (the engine part runs it first)",
    )
    p.add_argument(
        "--engine-timeout", type=float, default=150.0, help="seconds per engine benchmark"
    )
    p.add_argument(
        "--only",
        help="comma-separated benchmark names (e.g. qwen2.5-0.5b-plain), run in this order "
        "instead of the whole plan",
    )
    p.add_argument("--worker", type=Path, metavar="MODEL_DIR", help=argparse.SUPPRESS)
    p.add_argument("--engine-worker", action="store_true", help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> int:
    p = arg_parser()
    args = p.parse_args(argv)
    if args.worker:
        return worker(args.worker)
    if args.engine_worker:
        return engine_worker()
    if args.check_packed:
        print(json.dumps(packed_check(args.check_packed)))
        return 0
    if args.check_engine:
        print(json.dumps(engine_check(args.check_engine, args.smoke)))
        return 0
    if args.out is None:
        p.error("--out is required")
    try:
        variants = [parse_variant(v) for v in args.variant]
    except ValueError as e:
        p.error(str(e))
    names = [name for name, _ in variants]
    if len(set(names)) < len(names):
        p.error(f"--variant: each name once, got {', '.join(names)}")
    if args.wide_steps is not None and args.wide_steps < 0:
        p.error("--wide-steps must be >= 0")
    if args.part == "variants" and not variants and not args.wide_steps:
        p.error("--part variants needs at least one --variant or --wide-steps N")
    if args.variant_steps < 1:
        p.error("--variant-steps must be >= 1")
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    path = out / "gpu_figures.json"
    results: dict[str, Any] = json.loads(path.read_text()) if path.is_file() else {}
    # each invocation on record, with how it ended: a part that dies leaves its reason here
    # even where the machine's output keeps only the last invocation's lines
    invocation: dict[str, Any] = {"argv": sys.argv[1:] if argv is None else argv}
    results.setdefault("invocations", []).append(invocation)

    def save() -> None:
        path.write_text(json.dumps(results, indent=1))
        (out / "gpu_figures.md").write_text(markdown(results))

    missing = missing_modules()
    if missing:
        invocation["error"] = f"missing Python modules: {', '.join(missing)}"
        save()
        print(f"{invocation['error']} (carry them as wheels: docs/production.md, 'On a GPU')",
              file=sys.stderr)  # fmt: skip
        return 2
    print(f"gpu_figures --part {args.part}: started", flush=True)
    try:
        invocation["exit"] = measure(args, variants, out, results, save)
    except BaseException as e:
        invocation["error"] = f"{type(e).__name__}: {e}"
        save()
        raise
    save()
    print(markdown(results))
    return invocation["exit"]


def measure(
    args: argparse.Namespace,
    variants: list[tuple[str, list[str]]],
    out: Path,
    results: dict[str, Any],
    save: Callable[[], None],
) -> int:
    """`main`'s measurements of `args.part` into `results` (saved after each entry)."""
    work: Path = args.work
    work.mkdir(parents=True, exist_ok=True)
    log = out / "gpu_figures.log"
    results["environment"] = environment()
    save()
    started = time.perf_counter()

    skipped = {"error": f"skipped: past the {args.deadline:.0f} s deadline"}  # an entry's

    def past_deadline() -> bool:
        return args.deadline > 0 and time.perf_counter() - started > args.deadline

    if args.part in ("engine", "all"):
        device = "cuda" if results["environment"]["device"] != "cpu" else "cpu"
        check = [sys.executable, str(Path(__file__).resolve()), "--check-engine", device,
                 *(["--smoke"] if args.smoke else [])]  # fmt: skip
        results["engine_check"] = run_check(check, 180)
        print(f"engine check: {json.dumps(results['engine_check'])}", flush=True)
        save()
        splits = results.setdefault("engine_host_split", {})
        engine_runner = BenchWorker(["--engine-worker"], log)
        for command in host_split_commands(device, args.smoke):
            name = split_name(command)
            if past_deadline():
                splits[name] = dict(skipped)
                save()
                continue
            reply = engine_runner.measure(command, 120)
            splits[name] = reply.get("ok", {"error": reply.get("error")})
            print(f"engine host split {name}: {json.dumps(splits[name])}", flush=True)
            save()
        engines = results.setdefault("engine", {})
        for name, extra in engine_plan(args.smoke):
            if past_deadline():
                engines[name] = dict(skipped)
                save()
                continue
            begun = time.perf_counter()
            reply = engine_runner.measure([*extra, "--json"], args.engine_timeout)
            secs = time.perf_counter() - begun
            engines[name] = {"seconds": secs, "args": extra,
                             **reply.get("ok", {"error": reply.get("error")})}  # fmt: skip
            print(f"engine {name}: {secs:.0f}s {json.dumps(reply)}", flush=True)
            save()
        engine_runner.close()
    run_dir = work / "run"  # the training run's; the wide run and the variants start from
    sft = run_dir / "model-sft"  # its SFT model
    if args.part in ("train", "all"):
        cmd = train_args(args.smoke, args.train_set)
        results["train"] = training_run(run_dir, cmd, args.train_timeout, log, args.train_set)
        for name in ("metrics.jsonl", "summary.json"):
            if (run_dir / name).is_file():
                shutil.copy(run_dir / name, out / f"train_{name}")
        print(f"train: exit {results['train']['exit']} in {results['train']['seconds']:.0f}s",
              flush=True)  # fmt: skip
        save()

    def from_sft(run: str, settings: list[str], timeout: float) -> dict[str, Any]:
        """An RL-only run (`settings`: `rl_only_settings` and more) from the training run's
        SFT model, in `work / run`; an error entry when there is no SFT model."""
        if not (sft / "config.json").is_file():
            return {"error": f"no SFT model at {sft}: run --part train first"}
        every = [*args.train_set, *settings]
        return training_run(work / run, train_args(args.smoke, every), timeout, log, every)

    def outcome(run: dict[str, Any]) -> str:
        return run["error"] if "error" in run else f"exit {run['exit']}"

    wide_steps = args.wide_steps
    if wide_steps is None:  # after a training run by default; `--part variants` when asked
        wide_steps = WIDE_STEPS if args.part in ("train", "all") else 0
    if args.part in ("train", "variants", "all") and wide_steps > 0:
        from rstar2.train.config import load_train_config

        ran = load_train_config(None if args.smoke else "configs/gpu_20m.toml",
                                quick=args.smoke, sets=args.train_set)  # fmt: skip
        wide = from_sft("wide", wide_settings(sft, wide_steps, ran), args.wide_timeout)
        results["train_wide"] = wide
        print(f"train, wide: {outcome(wide)}", flush=True)
        save()
    if args.part in ("train", "variants", "all") and variants:
        runs = results.setdefault("train_variants", {})
        for name, settings in variants:
            every = [*rl_only_settings(sft, args.variant_steps), *settings]
            runs[name] = {"variant": settings,
                          **from_sft(f"variant-{name}", every, args.variant_timeout)}  # fmt: skip
            print(f"train, variant {name}: {outcome(runs[name])}", flush=True)
            save()
    if args.part in ("bench", "all"):
        bench = results.setdefault("bench", {})
        models: dict[str, Path] = {}
        workers: dict[str, BenchWorker] = {}
        check = [sys.executable, str(Path(__file__).resolve()), "--check-packed",
                 "cuda" if results["environment"]["device"] != "cpu" else "cpu"]  # fmt: skip
        if not args.only:  # `--only` runs the named entries and nothing else
            results["packed_check"] = run_check(check, 120)
            print(f"packed check: {json.dumps(results['packed_check'])}", flush=True)
            save()
        for name, shape, extra in select(bench_plan(args.smoke), args.only):
            if past_deadline():
                bench[name] = {"shape": shape, "variant": name.removeprefix(shape + "-"), **skipped}
                save()
                continue
            if shape not in models:
                models[shape] = work / shape
                if not (models[shape] / "config.json").is_file():
                    rc, _, secs = run_command(
                        ["init-model", str(models[shape]), "--shape", shape, "--force"],
                        args.bench_timeout, log,
                    )  # fmt: skip
                    print(f"init-model --shape {shape}: exit {rc} in {secs:.0f}s", flush=True)
            variant = name.removeprefix(shape + "-")
            entry: dict[str, Any] = {"shape": shape, "variant": variant}
            reply: dict[str, Any] = {}
            runner = workers.setdefault(shape, BenchWorker(["--worker", str(models[shape])], log))
            for attempt in (extra, smaller_micro_batch(extra)):
                begun = time.perf_counter()
                reply = runner.measure([*attempt, "--json"], args.bench_timeout)
                entry.update(seconds=time.perf_counter() - begun, **reply.get("ok", {}))
                if "ok" in reply or attempt == smaller_micro_batch(attempt):
                    break
                entry["first_try"] = f"{reply['error']} at {' '.join(attempt)}"
            if "error" in reply:
                entry["error"] = reply["error"]
            bench[name] = entry
            print(f"{name}: {entry['seconds']:.0f}s {json.dumps(reply)}", flush=True)
            save()
        for w in workers.values():
            w.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
