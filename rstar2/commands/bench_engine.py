"""`rstar2 bench engine`: embedded engine vs Hugging Face `generate`, tokens/s, same workload.

See `rstar2.engine.benchmark` for the workload and how each side is run (the engine is timed
again before each HF batch size). Prints a table, or with `--json` one object with
`engine_tok_s` (median of the engine's runs), `hf_generate_tok_s` (the best batch size),
`ratio`, the HF sweep (each with the engine run next to it), CPU microseconds per token of both
sides, the load average before and after, and the conditions (`model_size`, `params`,
`threads`, `contention`, `omp_wait_policy`, `device`, `dtype`, `decode` and, on the fixed
path, `decode_graphs`: shapes used, graphs captured, failed captures), and the median engine
run's steps split (`engine_steps`, `engine_step_ms` wall per step, of which `engine_wait_ms`
waiting for the device in the step's one transfer and `engine_host_ms` the rest: on a GPU's
fixed path, what the host's Python costs a step; on the CPU the computation is in the host's
share).

`--turns T` makes each request a conversation of T turns (multi-turn RL without the tool's
time): later turns are continuations the engine prefills from its prefix cache, and HF
`generate` runs each turn over the whole context.

`--contention N` runs everything beside N busy-loop processes (`bench_contention`), so a
figure under CPU contention can be reproduced.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
from typing import TYPE_CHECKING, Any

from rstar2 import devices
from rstar2.commands.arguments import (
    flag_names,
    int_list,
    model_directory,
    nonnegative_int,
    positive_int,
)
from rstar2.commands.bench_contention import busy_processes, load_average
from rstar2.config import UsageError
from rstar2.devices import DEVICES
from rstar2.engine.config import DECODE_PATHS, EngineConfig
from rstar2.model.tiny_config import SHAPES

if TYPE_CHECKING:  # the benchmark imports torch: `measure` imports it, after the flags
    from rstar2.engine.benchmark import Sweep, Timing, Workload

log = logging.getLogger(__name__)

DTYPES = ("float32", "bfloat16")
"""`--dtype`'s choices: names of torch dtypes."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model",
        type=model_directory,
        help="local HF model directory (default: a random Qwen2 of --model-size)",
    )
    parser.add_argument(
        "--model-size",
        choices=sorted(SHAPES),
        default="tiny",
        help="random model without --model (rstar2.model.tiny_config.SHAPES): tiny (~1.05M "
        "parameters), 25m (~25M), qwen2.5-0.5b or qwen2.5-1.5b (those checkpoints' shapes)",
    )
    parser.add_argument("--requests", type=positive_int, default=256, help="number of requests")
    parser.add_argument(
        "--max-tokens", type=positive_int, default=512, help="cap on output lengths"
    )
    parser.add_argument(
        "--turns",
        type=positive_int,
        default=1,
        help="turns per request: each later turn a continuation (the context, the output and a "
        "random 8-48-token tool response), sent when the turn before it ends, as in multi-turn "
        "RL; HF generate runs each turn over the whole context",
    )
    parser.add_argument(
        "--batch-sizes",
        type=int_list,
        default="4,8,16,32,64,128,256",
        help="HF generate batch sizes to sweep (the engine runs before each)",
    )
    parser.add_argument("--kv-budget", type=positive_int, default=65536, help="engine KV tokens")
    parser.add_argument(
        "--threads", type=nonnegative_int, default=0, help="torch threads (0: default)"
    )
    parser.add_argument(
        "--contention",
        type=nonnegative_int,
        default=0,
        help="busy-loop processes to run beside the benchmark (CPU contention)",
    )
    parser.add_argument(
        "--device",
        choices=DEVICES,
        default="auto",
        help="where the engine and HF generate run (auto: a GPU when torch sees one)",
    )
    parser.add_argument(
        "--dtype",
        choices=sorted(DTYPES),
        default="float32",
        help="the model's dtype on both sides (bfloat16 for the GPU shapes)",
    )
    parser.add_argument(
        "--decode",
        choices=DECODE_PATHS,
        default="auto",
        help="the engine's decode path (engine.decode; auto: fixed-shape on a GPU)",
    )
    parser.add_argument(
        "--no-cuda-graphs",
        action="store_true",
        help="run the fixed-shape decode eagerly on a GPU (engine.cuda_graphs = false)",
    )
    parser.add_argument(
        "--decode-steps",
        type=int,
        default=1,
        metavar="K",
        help="with the fixed-shape decode: up to K decode steps a round, one transfer back "
        "(engine.decode_steps; default 1)",
    )
    parser.add_argument(
        "--prefill-graphs",
        type=int,
        default=0,
        metavar="N",
        help="with the fixed-shape decode: prefills of 2 to N new tokens on fixed shapes too, "
        "CUDA graphs on a GPU (engine.prefill_graph_tokens; default 0: off)",
    )
    parser.add_argument("--seed", type=int, default=0, help="workload and weights seed")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def report(sweep: Sweep, tokens: int) -> dict[str, Any]:
    """The JSON figures of one sweep (no conditions)."""
    best = sweep.best_hf
    engine_cpu = sorted(t.cpu_us_per_token(tokens) for t in sweep.engine)
    median = sorted(sweep.engine, key=lambda t: t.seconds)[len(sweep.engine) // 2]
    return {
        "engine_tok_s": round(sweep.engine_tok_s, 1),
        "hf_generate_tok_s": round(best.tok_s, 1),
        "ratio": round(sweep.engine_tok_s / best.tok_s, 2),
        "hf_best_batch_size": best.batch_size,
        "engine_runs_tok_s": [round(t.tok_s, 1) for t in sweep.engine],
        "engine_cpu_us_per_token": round(engine_cpu[len(engine_cpu) // 2], 1),
        "hf_sweep": [
            {
                "batch_size": r.batch_size,
                "tok_s": round(r.tok_s, 1),
                "seconds": round(r.seconds, 2),
                "computed_tokens": r.computed_tokens,
                "cpu_us_per_token": round(r.cpu_seconds * 1e6 / tokens, 1),
                "engine_tok_s_before": round(e.tok_s, 1),
                "paired_ratio": round(e.tok_s / r.tok_s, 2),
            }
            for e, r in zip(sweep.engine, sweep.hf, strict=True)
        ],
        "engine_seconds": round(median.seconds, 2),
        "engine_preemptions": sweep.core.stats().preemptions,
        **step_split(median),
    }


def step_split(run: Timing) -> dict[str, Any]:
    """An engine run per step: its wall time and, of that, the wait for the device in the
    step's one transfer (fixed path; the host's own work is the rest)."""
    clock = run.clock
    steps = max(clock.steps, 1)
    return {
        "engine_steps": clock.steps,
        "engine_round_steps": clock.round_steps,
        "engine_prefill_steps": clock.prefill_steps,
        "engine_prefill_step_ms": round(clock.prefill_s * 1e3 / max(clock.prefill_steps, 1), 3),
        "engine_step_ms": round(run.seconds * 1e3 / steps, 3),
        "engine_wait_ms": round(clock.wait_s * 1e3 / steps, 3),
        "engine_host_ms": round((run.seconds - clock.wait_s) * 1e3 / steps, 3),
    }


ENGINE_FLAGS = {
    "kv_budget_tokens": "--kv-budget",
    "decode": "--decode",
    "decode_steps": "--decode-steps",
    "prefill_graph_tokens": "--prefill-graphs",
}
"""The `EngineConfig` keys this command's flags set."""


def run(args: argparse.Namespace) -> int:
    result, sweep, work = measure(args)
    if args.json:
        print(json.dumps(result))
        return 0
    print_table(result, sweep, work.total_tokens)
    return 0


def measure(args: argparse.Namespace) -> tuple[dict[str, Any], Sweep, Workload]:
    """The benchmark as the arguments ask: its JSON figures (with the conditions), the sweep
    and the workload. Raises UsageError for arguments that cannot run."""
    if args.model and args.model_size != "tiny":
        raise UsageError("--model-size is for the random model; --model names its own")
    import torch

    from rstar2.engine.benchmark import make_workload, random_model, run_sweep
    from rstar2.engine.core import load_causal_lm

    if args.threads:
        torch.set_num_threads(args.threads)
    sizes: list[int] = args.batch_sizes
    device = devices.resolve_device(args.device, "--device")  # before any work, no GPU: fails
    cfg = EngineConfig(
        kv_budget_tokens=args.kv_budget,
        max_num_seqs=max(args.requests, 1),
        device=device.type,
        decode=args.decode,
        cuda_graphs=not args.no_cuda_graphs,
        decode_steps=args.decode_steps,
        prefill_graph_tokens=args.prefill_graphs,
    )
    with flag_names(ENGINE_FLAGS.get):  # before the model is built
        cfg.validate()
    if args.model:
        model = load_causal_lm(args.model)
    else:
        model = random_model(args.model_size, args.seed, device)
    model.to(device=device, dtype=getattr(torch, args.dtype))
    work = make_workload(
        args.requests, model.config.vocab_size, args.max_tokens, args.seed, args.turns
    )
    log.info(
        "workload: %d requests of %d turn(s), %d output tokens",
        args.requests,
        args.turns,
        work.total_tokens,
    )
    load_before = load_average()
    with busy_processes(args.contention):
        try:
            sweep = run_sweep(model, work, cfg, sizes)
        except ValueError as e:  # the workload does not fit the model's positions
            raise UsageError(str(e)) from None
    result = report(sweep, work.total_tokens)
    result |= {
        "requests": args.requests,
        "turns": args.turns,
        "output_tokens": work.total_tokens,
        "model_size": "model" if args.model else args.model_size,
        "params": sum(p.numel() for p in model.parameters()),
        "threads": torch.get_num_threads(),
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "dtype": args.dtype,
        "decode": "fixed" if sweep.core.fixed is not None else "dynamic",
        "decode_steps": sweep.core.round_steps,
        "decode_graphs": sweep.core.fixed.stats() if sweep.core.fixed is not None else None,
        "prefill_graphs": (
            None if sweep.core.fixed_prefill is None else sweep.core.fixed_prefill.stats()
        ),
        "prefill_graph_tokens": (
            0 if sweep.core.fixed_prefill is None else sweep.core.fixed_prefill.max_tokens
        ),
        "contention": args.contention,
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", ""),
        "gomp_spincount": os.environ.get("GOMP_SPINCOUNT", ""),
        "load_avg": [load_before, load_average()],
    }
    return result, sweep, work


def print_table(result: dict[str, Any], sweep: Sweep, tokens: int) -> None:
    """What the command prints without `--json`: each engine run beside the HF batch size
    after it, then the ratio and the conditions."""
    print(f"{'side':<22}{'tok/s':>10}{'seconds':>10}{'computed':>10}{'cpu us/tok':>12}")
    for e, r in zip(sweep.engine, sweep.hf, strict=True):
        cpu = e.cpu_us_per_token(tokens)
        print(f"{'engine':<22}{e.tok_s:>10.0f}{e.seconds:>10.1f}{tokens:>10}{cpu:>12.0f}")
        name = f"hf generate bs={r.batch_size}"
        cpu = r.cpu_seconds * 1e6 / tokens
        print(f"{name:<22}{r.tok_s:>10.0f}{r.seconds:>10.1f}{r.computed_tokens:>10}{cpu:>12.0f}")
    print(
        f"ratio median engine / best hf: {result['ratio']:.2f}x (best hf batch "
        f"{result['hf_best_batch_size']}); {result['params']:,} parameters, "
        f"{result['threads']} threads, {result['contention']} busy processes, load average "
        f"{result['load_avg'][0]} -> {result['load_avg'][1]}"
    )
