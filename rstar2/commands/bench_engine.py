"""`rstar2 bench engine`: embedded engine vs Hugging Face `generate`, tokens/s, same workload.

See `rstar2.engine.benchmark` for the workload and how each side is run. Prints a table, or
with `--json` one object with `engine_tok_s`, `hf_generate_tok_s`, `ratio` and the HF sweep.
"""

from __future__ import annotations

import argparse
import json
import logging

import torch

from rstar2.commands.arguments import int_list, model_directory, nonnegative_int, positive_int
from rstar2.engine.benchmark import make_workload, run_engine, run_hf, tiny_random_model
from rstar2.engine.config import EngineConfig
from rstar2.engine.core import load_causal_lm

log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model",
        type=model_directory,
        help="local HF model directory (default: random tiny Qwen2)",
    )
    parser.add_argument("--requests", type=positive_int, default=256, help="number of requests")
    parser.add_argument(
        "--max-tokens", type=positive_int, default=512, help="cap on output lengths"
    )
    parser.add_argument(
        "--batch-sizes",
        type=int_list,
        default="4,8,16,32,64,128,256",
        help="HF generate batch sizes to sweep",
    )
    parser.add_argument("--kv-budget", type=positive_int, default=65536, help="engine KV tokens")
    parser.add_argument(
        "--threads", type=nonnegative_int, default=0, help="torch threads (0: default)"
    )
    parser.add_argument("--seed", type=int, default=0, help="workload and weights seed")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def run(args: argparse.Namespace) -> int:
    if args.threads:
        torch.set_num_threads(args.threads)
    sizes: list[int] = args.batch_sizes
    model = load_causal_lm(args.model) if args.model else tiny_random_model(args.seed)
    work = make_workload(args.requests, model.config.vocab_size, args.max_tokens, args.seed)
    cfg = EngineConfig(kv_budget_tokens=args.kv_budget, max_num_seqs=max(args.requests, 1))
    log.info("workload: %d requests, %d output tokens", args.requests, work.total_tokens)
    seconds, core = run_engine(model, work, cfg)
    engine_tok_s = work.total_tokens / seconds
    log.info("engine: %.1f s, %.0f tok/s, %s", seconds, engine_tok_s, core.stats())
    sweep = []
    for size in sizes:
        hf = run_hf(model, work, size)
        log.info("hf generate batch %d: %.1f s, %.0f tok/s", size, hf.seconds, hf.tok_s)
        sweep.append(hf)
    best = max(sweep, key=lambda r: r.tok_s)
    stats = core.stats()
    result = {
        "engine_tok_s": round(engine_tok_s, 1),
        "hf_generate_tok_s": round(best.tok_s, 1),
        "ratio": round(engine_tok_s / best.tok_s, 2),
        "hf_best_batch_size": best.batch_size,
        "hf_sweep": [
            {
                "batch_size": r.batch_size,
                "tok_s": round(r.tok_s, 1),
                "seconds": round(r.seconds, 2),
                "computed_tokens": r.computed_tokens,
            }
            for r in sweep
        ],
        "engine_seconds": round(seconds, 2),
        "engine_preemptions": stats.preemptions,
        "requests": args.requests,
        "output_tokens": work.total_tokens,
        "params": sum(p.numel() for p in model.parameters()),
        "threads": torch.get_num_threads(),
    }
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"{'side':<22}{'tok/s':>10}{'seconds':>10}{'computed':>10}")
    print(f"{'engine':<22}{engine_tok_s:>10.0f}{seconds:>10.1f}{work.total_tokens:>10}")
    for r in sweep:
        name = f"hf generate bs={r.batch_size}"
        print(f"{name:<22}{r.tok_s:>10.0f}{r.seconds:>10.1f}{r.computed_tokens:>10}")
    print(f"ratio engine / best hf: {result['ratio']:.2f}x (best hf batch {best.batch_size})")
    return 0
