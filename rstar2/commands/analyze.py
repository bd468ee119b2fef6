"""`rstar2 analyze TRAJECTORIES --model DIR [--compare-model DIR2]`: high-entropy tokens.

The paper's mechanism study on any model's trajectories: reads recorded trajectories (token ids
and loss masks: `rstar2 eval --out FILE`, or a run's `rollout_trace.jsonl` written with
`rollout_trace_tokens = true`), teacher-forces them through the model (batched forward passes,
a progress line on stderr), takes the policy's entropy at every model-generated token, and
splits the top `--top` fraction by entropy into reflection tokens (fewer than `--window`
generated tokens after a tool response ends) and forking tokens (the rest); definitions in
`rstar2.analysis.high_entropy`. With `--compare-model` the same trajectories go through a second
model too (e.g. `RUN/model-sft` against `RUN/model-rl`) and the change B - A is reported.

Writes `OUT/analysis.json` (keys `tokens`, `high_entropy_tokens`, `reflection_fraction`,
`forking_fraction`, `top_reflection_tokens`, `top_forking_tokens`, `entropy_by_distance` and
more; with `--compare-model` also `compare` and `change`), `OUT/entropy_by_distance.png` and,
comparing, `OUT/comparison.png`; prints a table, or with `--json` the analysis.json content.

Where the records carry the sampling logprobs (eval's do), `recorded_logprob_gap` is the mean
|teacher-forced - recorded logprob| over generated tokens: about 0 for the model that sampled
the trajectories at temperature 1 (engine rounding aside), larger for any other.

This module is the light half, the flags (so `--help` and a bad flag answer in a fraction of
a second); the analysis is `rstar2.commands.analyze_run` (torch, transformers, the model),
imported when the command runs.

What it does not do: generate trajectories (`rstar2 eval`) or analyse tool tokens (mask 0).
"""

from __future__ import annotations

import argparse

from rstar2.commands.arguments import model_directory, positive_int


def fraction(text: str) -> float:
    """A number in (0, 1] (`--top`)."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {text!r}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "trajectories", metavar="TRAJECTORIES",
        help="JSONL trajectories: rstar2 eval --out FILE, or RUN/rollout_trace.jsonl of a run "
        "with rollout_trace_tokens=true",
    )  # fmt: skip
    parser.add_argument(
        "--model", required=True, metavar="DIR", type=model_directory,
        help="the model to teacher-force with: a HF model, run or checkpoint directory",
    )  # fmt: skip
    parser.add_argument(
        "--compare-model", metavar="DIR2", type=model_directory,
        help="a second model on the same trajectories (e.g. RUN/model-sft vs RUN/model-rl)",
    )  # fmt: skip
    parser.add_argument(
        "--top",
        type=fraction,
        default=0.2,
        help="fraction of generated tokens, by entropy, that are high-entropy",
    )
    parser.add_argument(
        "--window", type=positive_int, default=8, metavar="N",
        help="a high-entropy token fewer than N generated tokens after a tool response is "
        "a reflection token",
    )  # fmt: skip
    parser.add_argument(
        "--max-distance", type=positive_int, default=64, metavar="N",
        help="entropy by distance covers distances 0..N-1",
    )  # fmt: skip
    parser.add_argument(
        "--top-tokens", type=positive_int, default=15, metavar="N",
        help="most frequent high-entropy tokens listed per kind",
    )  # fmt: skip
    parser.add_argument(
        "--limit",
        type=positive_int,
        metavar="N",
        help="only the first N trajectories (default: all)",
    )
    parser.add_argument(
        "--step",
        type=positive_int,
        metavar="N",
        help="only RL step N's (a rollout trace) (default: every step)",
    )
    parser.add_argument(
        "--batch-tokens", type=positive_int, default=4096, metavar="N",
        help="tokens per forward pass (padded); lower it for a large vocabulary",
    )  # fmt: skip
    parser.add_argument("--device", default="auto", help="torch device (auto: cuda if available)")
    parser.add_argument(
        "--out", default="analysis", metavar="DIR", help="directory for analysis.json and PNGs"
    )
    parser.add_argument("--json", action="store_true", help="print analysis.json's content")


def run(args: argparse.Namespace) -> int:
    from rstar2.commands.analyze_run import run as analyze  # torch, transformers, the model

    return analyze(args)
