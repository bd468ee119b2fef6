"""`rstar2 bench learner`'s measurement (`rstar2.commands.bench_learner` holds its flags,
checks them and documents the figures): the model on its device, the ranks, one warm-up
update and `--steps` timed ones with their time split, the optional profile, the weight
push's memory, MFU.

What it does not do: parse or check flags (the light half does, so `--help` imports none of
this).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch._dynamo.utils import counters as dynamo_counters

from rstar2.learner import packing
from rstar2.learner.learner_config import LearnerConfig
from rstar2.learner.op_profile import compile_report, profile_call
from rstar2.learner.policy import (
    LearnerPolicy,
    backend_for,
    load_policy,
    policy_rank,
    use_device,
)
from rstar2.learner.rank_group import RankGroup, free_port, join_group
from rstar2.learner.step_timer import StepTimer
from rstar2.learner.workload import fixed_batch, rl_batch, trace_batch
from rstar2.rl.resampling import TrainingBatch
from rstar2.rl.rl_config import RLConfig
from rstar2.weights.flat_codec import flatten_weights

PEAK_TFLOPS = {"H100": 989.0, "H200": 989.0, "MI300X": 1307.0, "A100": 312.0}
"""Dense bf16 peak TFLOP/s per GPU, by a substring of the device name."""


def _learner_config(args: argparse.Namespace) -> LearnerConfig:
    budget = args.micro_batch_tokens
    return LearnerConfig(
        lr=1e-6, warmup_steps=0, bf16=args.bf16, device=args.device,
        # without a token budget: --micro-batch sequences of --tokens (the earlier figures)
        micro_batch_size=args.micro_batch if budget == 0 else 1_000_000,
        micro_batch_tokens=budget or args.micro_batch * args.tokens,
        packed=not args.padded, head_chunk=args.head_chunk, compile=args.compile,
        compile_mode=args.compile_mode, compile_head=args.compile_head,
        activation_checkpointing=args.activation_checkpointing,
        checkpoint_every=args.checkpoint_every, checkpoint_policy=args.checkpoint_policy,
        reshard_after_forward=True if args.reshard else None,
        sync_every_micro_batch=True if args.sync_every_micro_batch else None,
        shard_per_layer=True if args.shard_per_layer else None,
    )  # fmt: skip


def benchmark_batch(args: argparse.Namespace, vocab: int) -> TrainingBatch:
    """The batch `--workload` / `--trace` name (`rstar2.learner.workload`)."""
    if args.trace is not None:
        return trace_batch(args.trace, vocab, args.rollouts)
    if args.workload == "rl":
        return rl_batch(vocab, args.rollouts, args.tokens)
    return fixed_batch(vocab, args.rollouts, args.tokens)


def _threads(ranks: int, threads: int = 0) -> int:
    return threads if threads > 0 else max(1, (os.cpu_count() or 1) // ranks)


class _RssPeak:
    """Samples this process's resident memory every millisecond while open."""

    def __init__(self) -> None:
        _trim_heap()  # hand freed heap back first, or reused free pages would hide the rise
        self.base = self.peak = _rss_mb()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(0.001):
            self.peak = max(self.peak, _rss_mb())

    def __enter__(self) -> _RssPeak:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _rss_mb())

    @property
    def extra_mb(self) -> float:
        return self.peak - self.base


def _trim_heap() -> None:
    """glibc's malloc_trim(0): return the heap's free pages to the OS (no-op elsewhere)."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def measure(args: argparse.Namespace, model_dir: Path) -> dict[str, Any]:
    cfg = _learner_config(args)
    device = use_device(cfg.device)
    group, alone = _start_ranks(args, model_dir, cfg, device)
    dynamo_counters.clear()  # one process may measure several variants (gpu_figures.py)

    def run(op: str, *a: Any) -> Any:
        return group.run(policy, op, *a) if group else getattr(policy, op)(*a)

    try:
        policy, _ = load_policy(model_dir, cfg, RLConfig(), 0)
        vocab = int(policy.model.config.vocab_size)
        params = sum(p.numel() for p in policy.model.parameters())  # DTensors: global
        batch = benchmark_batch(args, vocab)
        run("update", batch)  # warm-up
        times = _timed_updates(run, batch, args.steps, device)
        peak = run("peak_memory_mb")
        # one more update, its phases timed (they synchronise the device)
        split = _update_phases(run, batch, device) if group is None else None
        profiled = None
        if args.profile and group is None:
            profiled = profile_call(lambda: run("update", batch), device)
        push = _push_extra_mb(policy, group, args)
    except BaseException:
        if group:  # a follower may be inside the failed operation's collective: STOP unread
            group.close(abort=True)
        raise
    finally:
        if group:
            group.close()
        if alone:
            dist.destroy_process_group()
    step_s = statistics.median(times)
    tokens = sum(len(r.token_ids) for r in batch.rollouts)
    tokens_per_s = tokens / step_s
    return {
        "model_params": params,
        "ranks": args.ranks,
        "fsdp": policy.sharded,
        "bf16": args.bf16,
        "activation_checkpointing": args.activation_checkpointing,
        "checkpoint_every": args.checkpoint_every,
        "checkpoint_policy": args.checkpoint_policy,
        "packed": policy.packed,
        "attention": sorted(packing.attention_paths),
        "compile": args.compile,
        "compile_mode": args.compile_mode,
        "compile_head": args.compile_head,
        "reshard_after_forward": policy.reshard_after_forward,
        "sync_every_micro_batch": policy.sync_every_micro_batch,
        "shard_per_layer": policy.shard_per_layer,
        "workload": "trace" if args.trace is not None else args.workload,
        "rollouts": args.rollouts,
        "tokens": args.tokens,
        "batch_tokens": tokens,
        "loss_tokens": sum(sum(r.loss_mask[1:]) for r in batch.rollouts),
        "micro_batch": args.micro_batch,
        "micro_batch_tokens": cfg.micro_batch_tokens,
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "tokens_per_s": tokens_per_s,
        "step_s": step_s,
        "peak_memory_mb": peak,
        "mfu": _mfu(params, tokens_per_s, args, device),
        "time_split_s": split,
        "profile": profiled,
        "compiled": compile_report(dynamo_counters) if args.compile or args.compile_head else None,
        "push_bucket_mb": args.bucket_mb,
        "push_bucket_extra_mb": push["bucket"],
        "push_full_extra_mb": push["full"],
    }


def _start_ranks(
    args: argparse.Namespace, model_dir: Path, cfg: LearnerConfig, device: torch.device
) -> tuple[RankGroup | None, bool]:
    """Resets this process's counters, sets its threads, and spawns the other ranks (a group of
    `--ranks`) or, for `--fsdp` on one rank, joins a one-rank process group. Returns the group
    (None on one rank) and whether a one-rank process group was joined."""
    packing.attention_paths.clear()
    if device.type == "cuda":  # one process may measure several variants (gpu_figures.py)
        torch.cuda.reset_peak_memory_stats(device)
    threads = _threads(args.ranks, args.threads)
    torch.set_num_threads(threads)
    backend = backend_for(device)
    group = (
        RankGroup.spawn(
            args.ranks, policy_rank, (str(model_dir), cfg, RLConfig(), threads), backend
        )
        if args.ranks > 1
        else None
    )
    alone = args.fsdp and group is None  # a one-rank group: FSDP2 (and NCCL) on one device
    if alone:
        join_group(0, 1, f"tcp://127.0.0.1:{free_port()}", backend)
    return group, alone


def _timed_updates(
    run: Callable[..., Any], batch: TrainingBatch, steps: int, device: torch.device
) -> list[float]:
    """Seconds of each of `steps` updates, the device synchronised around each."""
    times = []
    for _ in range(steps):
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        run("update", batch)
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return times


def _update_phases(
    run: Callable[..., Any], batch: TrainingBatch, device: torch.device
) -> dict[str, float]:
    """Seconds of each phase of one update, and its total."""
    with StepTimer(device) as timer:
        start = time.perf_counter()
        run("update", batch)
        timer.seconds["total"] = time.perf_counter() - start
    return timer.seconds


def _push_extra_mb(
    policy: LearnerPolicy, group: RankGroup | None, args: argparse.Namespace
) -> dict[str, float | None]:
    """The resident memory a weight push adds, in bucket-sized pieces and in one piece."""
    push: dict[str, float | None] = {"bucket": None, "full": None}
    for name, size in (("bucket", int(args.bucket_mb * 2**20)), ("full", 2**62)):
        if args.no_push:
            break
        with _RssPeak() as rss:
            if group:
                group.call("weights", size)
            for bucket in policy.weights(size):
                # as the learner actor: flatten into the message buffer, send, drop both
                flat = flatten_weights(bucket)[2]
                del bucket, flat
        push[name] = rss.extra_mb
    return push


def _mfu(params: int, tokens_per_s: float, args: argparse.Namespace, device: torch.device) -> Any:
    if device.type != "cuda":
        return None
    peak = args.peak_tflops
    if peak <= 0:
        name = torch.cuda.get_device_name(device).upper()
        peak = next((v for k, v in PEAK_TFLOPS.items() if k in name), 0.0)
    if peak <= 0:
        return None
    return 6 * params * tokens_per_s / (peak * 1e12 * args.ranks)
