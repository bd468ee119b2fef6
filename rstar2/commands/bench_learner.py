"""`rstar2 bench learner`: the RL learner's update on a fixed synthetic batch, 1 or N ranks.

The same `LearnerPolicy` and `RankGroup` as `rstar2 train` (`cluster.learner_ranks`): rank 0 is
this process, ranks 1..N-1 are spawned on this host (gloo on CPU, NCCL on GPUs). The batch is
`--rollouts` sequences of `--tokens` tokens (the first quarter a masked prompt), drawn from a
fixed seed, with behaviour logprobs of a uniform policy and alternating-sign advantages, so
every run does the same work. After one warm-up update, `--steps` updates are timed. The model
is `--model DIR`, or a random-weight model of `--shape` (`rstar2.model.tiny_config.SHAPES`:
tiny, 25m, qwen2.5-0.5b, qwen2.5-1.5b) built in a temporary directory. `--fsdp` with one rank
joins a one-rank group of its own, so the sharded path (FSDP2, its mixed precision, NCCL on a
GPU) runs on a single device; N ranks are always sharded.

Figures (`--json` keys): `model_params`, `ranks`, `fsdp`, `bf16`, `activation_checkpointing`,
`checkpoint_every`, `checkpoint_policy`, `compile`, `compile_mode`, `compile_head`, `reshard_after_forward`, `sync_every_micro_batch`, `shard_per_layer`
(FSDP2's settings as resolved; null without FSDP2), the batch (`rollouts`, `tokens`, `micro_batch`), `device`,
`device_name`, `tokens_per_s` (sequence tokens through forward and backward per second, all
ranks together), `step_s` (median update), `peak_memory_mb` (the largest of any rank: GPU memory allocated by torch, or the
process's peak RSS on the CPU), `mfu` (GPUs only: 6 x parameters x tokens/s over the GPUs' peak
bf16 FLOP/s, `--peak-tflops` per GPU; null on the CPU; the model's FLOPs only: attention's score
products, recomputed activations and the update's extra forward passes are not counted), and the
weight push's memory on rank 0: `push_bucket_extra_mb` / `push_full_extra_mb`, the rise of rank
0's resident memory over its level before the push (after handing freed heap back with
malloc_trim, sampled every millisecond; CPU memory) while the policy is gathered and flattened
into a message buffer in `--bucket-mb` buckets, each dropped once "sent" as the learner actor
does / gathered whole; with `--profile`, `profile`: one more update's top operations and
FSDP2's work by phase (`rstar2.learner.op_profile`; null without it or with several ranks);
with `--compile` or `--compile-head`, `compiled`: the graphs torch.compile built and its graph
breaks by reason (rank 0's process).

This module is the light half, the flags and their checks (so `--help` and a bad flag answer
in a fraction of a second, without torch); the measurement is
`rstar2.commands.bench_learner_run`, imported once the flags are checked.

What it does not do: roll out, or compare with another trainer.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from rstar2.commands.arguments import model_directory, nonnegative_float
from rstar2.config import ConfigError
from rstar2.devices import resolve_device
from rstar2.learner.learner_config import CHECKPOINT_POLICIES, COMPILE_MODES
from rstar2.learner.workload import WORKLOADS, trace_shapes
from rstar2.model.tiny_config import SHAPES, shaped_config


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--model", type=model_directory, help="a Hugging Face model directory (default: --shape)"
    )
    p.add_argument(
        "--shape",
        choices=sorted(SHAPES),
        default="tiny",
        help="without --model: a random-weight model of this shape (default: tiny)",
    )
    p.add_argument("--ranks", type=int, default=1, help="learner ranks (default 1)")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--rollouts", type=int, default=32, help="sequences in the batch")
    p.add_argument("--tokens", type=int, default=256, help="tokens per sequence")
    p.add_argument("--micro-batch", type=int, default=8, help="sequences per forward")
    p.add_argument("--steps", type=int, default=3, help="timed updates (after one warm-up)")
    _add_precision_options(p)
    _add_workload_options(p)
    _add_compile_options(p)
    _add_output_options(p)


def _add_precision_options(p: argparse.ArgumentParser) -> None:
    """Precision, activation checkpointing and FSDP on one rank."""
    p.add_argument("--bf16", action="store_true", help="bf16 compute, fp32 master weights")
    p.add_argument(
        "--activation-checkpointing",
        action="store_true",
        help="recompute each layer's activations in backward",
    )
    p.add_argument(
        "--fsdp",
        action="store_true",
        help="with --ranks 1: FSDP2 in a one-rank group (NCCL on a GPU) instead of the plain model",
    )


def _add_workload_options(p: argparse.ArgumentParser) -> None:
    """The sequence shapes of the batch and how it is cut into micro-batches."""
    p.add_argument(
        "--workload",
        choices=WORKLOADS,
        default="fixed",
        help="fixed: every sequence --tokens long, a masked prompt quarter; rl: lengths up to "
        "--tokens shaped like agentic rollouts (masked prompt and tool responses)",
    )
    p.add_argument(
        "--trace",
        type=Path,
        help="sequence shapes from a run's rollout_trace.jsonl (its last step) instead",
    )
    p.add_argument(
        "--micro-batch-tokens",
        type=int,
        default=0,
        help="micro-batches by this token budget (0: --micro-batch sequences)",
    )
    p.add_argument(
        "--padded",
        action="store_true",
        help="the reference path: padded rows and full-vocabulary logits (not packed, no "
        "chunked head)",
    )
    p.add_argument("--head-chunk", type=int, default=1024, help="positions per LM-head chunk")


def _add_compile_options(p: argparse.ArgumentParser) -> None:
    """torch.compile, checkpoint spacing and FSDP resharding."""
    p.add_argument(
        "--compile",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="torch.compile each decoder layer (default: off here, so each optimisation is "
        "measured alone; learner.compile is on by default on GPUs)",
    )
    p.add_argument(
        "--compile-mode",
        choices=COMPILE_MODES,
        default="default",
        help="with --compile: torch.compile's mode for the layers (learner.compile_mode; "
        "reduce-overhead: CUDA graphs)",
    )
    p.add_argument(
        "--compile-head",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="torch.compile the chunked LM head's element-wise work (default: off here; "
        "learner.compile_head is on by default on GPUs; no effect with --padded)",
    )
    p.add_argument(
        "--checkpoint-every",
        type=int,
        default=1,
        help="with --activation-checkpointing: every k-th decoder layer (default 1: all)",
    )
    p.add_argument(
        "--checkpoint-policy",
        choices=CHECKPOINT_POLICIES,
        default="full",
        help="with --activation-checkpointing: what a checkpointed layer keeps (full: its "
        "input only; selective: also its matmul and attention outputs)",
    )
    p.add_argument(
        "--reshard",
        action="store_true",
        help="FSDP2 on one rank reshards after forward (the earlier setting; default: keeps "
        "the gathered parameters for backward)",
    )
    p.add_argument(
        "--sync-every-micro-batch",
        action="store_true",
        help="FSDP2 on one rank reduces gradients after every micro-batch (the earlier "
        "setting; default: once per mini-batch, after its last micro-batch)",
    )
    p.add_argument(
        "--shard-per-layer",
        action="store_true",
        help="FSDP2 on one rank wraps each decoder layer as a unit of its own (the earlier "
        "setting; default: the whole model as one unit)",
    )


def _add_output_options(p: argparse.ArgumentParser) -> None:
    """The weight-push measurement, threads, the MFU peak and the output format."""
    p.add_argument("--no-push", action="store_true", help="skip the weight-push measurement")
    p.add_argument("--bucket-mb", type=float, default=8.0, help="weight-push bucket (MiB)")
    p.add_argument("--threads", type=int, default=0, help="torch threads per rank (0: cores/ranks)")
    p.add_argument(
        "--peak-tflops", type=nonnegative_float, default=0.0, help="GPU peak (0: by name)"
    )
    p.add_argument(
        "--profile",
        action="store_true",
        help="one more update under torch.profiler: its top operations and FSDP2's work by "
        "phase (`profile`; one rank)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")


def check_arguments(args: argparse.Namespace) -> None:
    """Bad flags are a one-line error naming the flag (exit code 2)."""
    for flag, value, ok, want in (
        ("--ranks", args.ranks, args.ranks >= 1, ">= 1"),
        ("--rollouts", args.rollouts, args.rollouts >= 1, ">= 1"),
        ("--micro-batch", args.micro_batch, args.micro_batch >= 1, ">= 1"),
        ("--steps", args.steps, args.steps >= 1, ">= 1"),
        ("--tokens", args.tokens, args.tokens >= 8, ">= 8"),
        ("--threads", args.threads, args.threads >= 0, ">= 0"),
        ("--bucket-mb", args.bucket_mb, args.bucket_mb > 0, "> 0"),
        ("--micro-batch-tokens", args.micro_batch_tokens, args.micro_batch_tokens >= 0, ">= 0"),
        ("--head-chunk", args.head_chunk, args.head_chunk >= 1, ">= 1"),
        ("--checkpoint-every", args.checkpoint_every, args.checkpoint_every >= 1, ">= 1"),
        ("--tokens", args.tokens, args.workload != "rl" or args.tokens >= 64, ">= 64 with rl"),
        (
            "--checkpoint-every",
            args.checkpoint_every,
            args.checkpoint_every == 1 or args.activation_checkpointing,
            "1 (its default) without --activation-checkpointing",
        ),
        (
            "--compile-mode",
            args.compile_mode,
            args.compile_mode == "default" or args.compile,
            "default (its default) without --compile",
        ),
        (
            "--checkpoint-policy",
            args.checkpoint_policy,
            args.checkpoint_policy == "full" or args.activation_checkpointing,
            "full (its default) without --activation-checkpointing",
        ),
    ):
        if not ok:
            raise ConfigError(flag, value, want)
    resolve_device(args.device, "--device")  # "cuda" without a GPU: one line, before any work
    if args.trace is not None:  # read now, not after the model is built
        try:
            trace_shapes(args.trace)
        except (ValueError, KeyError, TypeError) as e:  # JSON errors are ValueErrors too
            why = f"no field {e}" if isinstance(e, KeyError) else str(e)
            raise ConfigError(
                "--trace", str(args.trace), f"a rollout_trace.jsonl ({why})"
            ) from None


def run(args: argparse.Namespace) -> int:
    check_arguments(args)
    from rstar2.commands.bench_learner_run import measure  # torch: after the flags' checks
    from rstar2.model.tiny import init_model

    with tempfile.TemporaryDirectory() as tmp:
        model_dir = args.model
        if model_dir is None:
            model_dir = Path(tmp) / args.shape
            init_model(model_dir, shaped_config(args.shape))
        out = measure(args, Path(model_dir))
    if args.json:
        print(json.dumps(out))
        return 0
    print(
        f"learner: {out['model_params'] / 1e6:.2f}M params, {out['ranks']} rank(s)"
        f"{' (FSDP2)' if out['fsdp'] else ''} on {out['device_name']}: "
        f"{out['step_s']:.3f} s/update, {out['tokens_per_s']:.0f} tokens/s, "
        f"peak {out['peak_memory_mb']:.0f} MiB"
        + (f", MFU {out['mfu']:.1%}" if out["mfu"] is not None else "")
    )
    if out["time_split_s"]:
        print("update time split (s): " + ", ".join(
            f"{k} {v:.3f}" for k, v in out["time_split_s"].items()
        ))  # fmt: skip
    if out["push_bucket_extra_mb"] is None:
        return 0
    print(
        f"weight push on rank 0: +{out['push_bucket_extra_mb']:.1f} MiB in "
        f"{out['push_bucket_mb']:g} MiB buckets, +{out['push_full_extra_mb']:.1f} MiB gathered whole"
    )
    return 0
