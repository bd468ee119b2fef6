"""`rstar2 analyze`'s work (`rstar2.commands.analyze` holds its flags and documents it):
resolve the device, read the trajectories, teacher-force them through one model or two
(`rstar2.analysis`), write `OUT/analysis.json` and the plots, print the table.

What it does not do: parse flags (the light half does, so `--help` imports none of this).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import TextIO

import numpy as np
import torch
from transformers import AutoConfig

from rstar2.analysis import (
    RecordedTrajectory,
    Settings,
    TokenScores,
    TokenTable,
    analyze,
    compare,
    load_trajectories,
    logprob_gap,
    plot_comparison,
    plot_entropy_by_distance,
    teacher_force,
    token_table,
)
from rstar2.commands.arguments import out_dir
from rstar2.config import ConfigError
from rstar2.model.loader import load_model
from rstar2.whole_file import write_text

log = logging.getLogger(__name__)


def run(args: argparse.Namespace) -> int:
    device = resolve_device(args.device)  # a device this machine lacks: before reading anything
    with out_dir(args.out, "--out") as out:  # ... and an --out that cannot be written
        return _analyze(args, device, out)


def _analyze(args: argparse.Namespace, device: torch.device, out: Path) -> int:
    try:
        loaded = load_trajectories(args.trajectories, args.limit, args.step)
    except ValueError as e:  # a line that is not a trajectory record (named by file and line)
        raise ConfigError("TRAJECTORIES", args.trajectories, f"a trajectories file ({e})") from None
    if loaded.skipped:
        log.warning("skipped %d trajectories with no generated token", loaded.skipped)
    trajs = loaded.trajectories
    if not trajs:
        raise ConfigError("TRAJECTORIES", args.trajectories, "a file with a generated token")
    settings = Settings(args.top, args.window, args.max_distance, args.top_tokens)
    result: dict[str, object] = {
        "trajectories_file": args.trajectories,
        "trajectories": len(trajs),
        "skipped": loaded.skipped,
        "settings": {"top": args.top, "window": args.window, "max_distance": args.max_distance},
    }
    table_a, report_a = model_report(args.model, trajs, settings, args.batch_tokens, device)
    result.update(report_a)
    reports = [(label_of(args.model), report_a)]
    if args.compare_model:
        table_b, report_b = model_report(
            args.compare_model, trajs, settings, args.batch_tokens, device
        )
        result["compare"] = report_b
        result["change"] = compare(table_a, table_b, report_a, report_b, args.top)
        reports.append((label_of(args.compare_model), report_b))
    plots = [plot_entropy_by_distance(reports, args.window, out / "entropy_by_distance.png")]
    if args.compare_model:
        plots.append(plot_comparison(reports, out / "comparison.png"))
    result["plots"] = [str(p) for p in plots]
    write_text(out / "analysis.json", json.dumps(result, indent=1) + "\n")
    if args.json:
        print(json.dumps(result))
    else:
        print_table(result, reports, sys.stdout)
    return 0


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ConfigError("--device", name, "a torch device (cpu, cuda, cuda:1, ...)") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--device", name, "a device torch sees: no GPU on this machine")
    return device


def label_of(model_dir: str) -> str:
    """A short name for a model directory: its name, with its parent's when that is `model`
    (a checkpoint's `step-N/model`)."""
    path = Path(model_dir)
    return f"{path.parent.name}/{path.name}" if path.name == "model" else path.name


def model_report(
    model_dir: str,
    trajs: list[RecordedTrajectory],
    settings: Settings,
    batch_tokens: int,
    device: torch.device,
) -> tuple[TokenTable, dict[str, object]]:
    """Teacher-force `trajs` through one model; its token table and report."""
    vocab = AutoConfig.from_pretrained(model_dir, local_files_only=True).vocab_size
    check_vocabulary(model_dir, trajs, int(vocab))  # before the weights load
    model, tokenizer = load_model(model_dir)
    model.to(device)
    progress = Progress(label_of(model_dir), len(trajs), sys.stderr)
    scores = teacher_force(
        model, [t.token_ids for t in trajs], batch_tokens, device, progress.advance
    )
    progress.close()
    table = token_table(
        [t.loss_mask for t in trajs], [t.token_ids for t in trajs], [s.entropy for s in scores]
    )
    report = analyze(table, settings, lambda i: tokenizer.decode([i]))
    report = {"model": model_dir, **report, "recorded_logprob_gap": recorded_gap(trajs, scores)}
    return table, report


def check_vocabulary(model_dir: str, trajs: list[RecordedTrajectory], vocab: int) -> None:
    """Every token id must be one of the model's (trajectories of another tokenizer are not)."""
    largest = max(max(t.token_ids) for t in trajs)
    if largest >= vocab:
        raise ConfigError(
            "--model", model_dir,
            f"a model whose vocabulary ({vocab}) holds the trajectories' token ids (up to "
            f"{largest}): the one that wrote them or one with the same tokenizer",
        )  # fmt: skip


def recorded_gap(trajs: list[RecordedTrajectory], scores: list[TokenScores]) -> float | None:
    """`logprob_gap` over the trajectories that recorded their logprobs (None: none did)."""
    pairs = [(t, s) for t, s in zip(trajs, scores, strict=True) if t.logprobs is not None]
    if not pairs:
        return None
    return logprob_gap(
        [t.loss_mask for t, _ in pairs],
        [t.logprobs for t, _ in pairs],  # type: ignore[misc]
        [s.logprob for _, s in pairs],
    )


class Progress:
    """One line per 10% of the trajectories scored (redrawn in place on a terminal)."""

    def __init__(self, label: str, total: int, out: TextIO) -> None:
        self.label, self.total, self.out = label, total, out
        self.done = 0
        self.tty = out.isatty()
        self._last_decile = -1

    def advance(self, n: int) -> None:
        self.done += n
        decile = 10 * self.done // self.total
        line = f"analyze {self.label}: {self.done}/{self.total} trajectories teacher-forced"
        if self.tty:
            self.out.write("\r" + line)
        elif decile != self._last_decile:
            self.out.write(line + "\n")
        self._last_decile = decile
        self.out.flush()

    def close(self) -> None:
        if self.tty:
            self.out.write("\n")
            self.out.flush()


def print_table(
    result: dict[str, object], reports: list[tuple[str, dict[str, object]]], out: TextIO
) -> None:
    """The figures of each model side by side (with the change when two), then each kind's
    most frequent high-entropy tokens."""
    settings = result["settings"]
    window, top = settings["window"], settings["top"]  # type: ignore[index]
    rows: list[tuple[str, str]] = [
        ("generated tokens", "tokens", "{:,}"),
        (f"high-entropy (top {top:.0%})", "high_entropy_tokens", "{:,}"),
        ("entropy threshold (nats)", "entropy_threshold", "{:.3f}"),
        ("mean entropy (nats)", "mean_entropy", "{:.3f}"),
        (f"reflection share (d < {window})", "reflection_fraction", "{:.1%}"),
        ("forking share", "forking_fraction", "{:.1%}"),
        ("window's share of tokens", "window_token_fraction", "{:.1%}"),
        ("mean entropy in window", "mean_entropy_in_window", "{:.3f}"),
        ("mean entropy elsewhere", "mean_entropy_outside_window", "{:.3f}"),
        ("recorded logprob gap", "recorded_logprob_gap", "{:.3f}"),
    ]  # type: ignore[list-item]
    out.write(f"trajectories {result['trajectories']} from {result['trajectories_file']}\n")
    head = f"{'':<32}" + "".join(f"{label:>18}" for label, _ in reports)
    out.write(head + (f"{'change':>12}" if len(reports) == 2 else "") + "\n")
    for name, key, fmt in rows:
        values = [r[key] for _, r in reports]
        line = f"{name:<32}" + "".join(f"{_fmt(fmt, v):>18}" for v in values)
        if len(reports) == 2 and key != "recorded_logprob_gap":
            change = result["change"].get(key)  # type: ignore[union-attr]
            line += f"{_fmt(fmt.replace(':', ':+'), change):>12}" if change is not None else ""
        out.write(line.rstrip() + "\n")
    if len(reports) == 2:
        overlap = result["change"]["high_entropy_overlap"]  # type: ignore[index]
        out.write(f"{'high-entropy tokens in common':<32}{overlap:.1%}\n")
    for label, report in reports:
        for kind in ("reflection", "forking"):
            tokens = report[f"top_{kind}_tokens"]
            listed = ", ".join(f"{t['text']!r} {t['count']}" for t in tokens[:10])  # type: ignore[index, union-attr]
            out.write(f"{label} top {kind} tokens: {listed or '-'}\n")
    by_distance = ", ".join(
        f"{r['distance']}: {r['mean_entropy']:.2f}"
        for r in reports[0][1]["entropy_by_distance"][:window]  # type: ignore[index]
    )
    out.write(f"{reports[0][0]} mean entropy by distance: {by_distance or '-'}\n")
    out.write(f"wrote {Path(result['plots'][0]).parent / 'analysis.json'} and the plots\n")  # type: ignore[index]


def _fmt(fmt: str, value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float) and np.isnan(value):
        return "nan"
    return fmt.format(value)
