"""Per-step training metrics: JSON lines, TensorBoard scalars and a PNG of the curves.

`MetricsLog` appends one JSON object per step to `RUN/metrics.jsonl` (flushed every step, so a
killed run loses nothing it has reported) and mirrors numeric values to TensorBoard under
`RUN/tensorboard/` with names like `reward/mean`. On resume it first drops the lines of steps
after the checkpoint being resumed (and a "final" row: the run goes on), so a resumed run's file
equals an uninterrupted run's; TensorBoard's event files cannot be edited, so they are rewritten
from the kept lines (else the re-run steps would appear twice).
`plot_metrics` draws the main curves into a PNG.

What it does not do: aggregation across ranks (the learner reports rank 0's view) or remote
logging services.
"""

from __future__ import annotations

import json
import logging
import math
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

# metric key -> TensorBoard tag
TB_TAGS = {
    "reward_mean": "reward/mean",
    "heldout_accuracy": "eval/heldout_accuracy",
    "response_tokens_mean": "rollout/response_tokens_mean",
    "tool_calls_mean": "rollout/tool_calls_mean",
    "tool_error_ratio_correct": "rollout/tool_error_ratio_correct",
    "correct_with_failed_call": "rollout/correct_with_failed_call",
    "clip_fraction": "losses/clip_fraction",
    "entropy": "losses/entropy",
    "loss": "losses/policy_loss",
    "approx_kl": "losses/approx_kl",
    "grad_norm": "losses/grad_norm",
    "mixed_group_fraction": "rollout/mixed_group_fraction",
    "moved_turns": "rollout/moved_turns",
}


def read_metrics(path: Path) -> list[dict[str, Any]]:
    path = Path(path)
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text().splitlines():
        if line.strip():
            rows.append(json.loads(line))
    return rows


class MetricsLog:
    """Append-only metrics of one run (JSONL + TensorBoard)."""

    def __init__(self, run_dir: Path, resume_step: int | None = None, tensorboard: bool = True):
        self.path = Path(run_dir) / "metrics.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        kept: list[dict[str, Any]] = []
        if resume_step is not None:
            kept = [
                r
                for r in read_metrics(self.path)
                if r.get("step", 0) <= resume_step and r.get("stage") != "final"
            ]
            self.path.write_text("".join(json.dumps(r) + "\n" for r in kept))
        elif self.path.exists():
            self.path.unlink()
        self._file = open(self.path, "a")  # noqa: SIM115 - closed in close()
        self._tb = None
        if tensorboard:
            tb_dir = Path(run_dir) / "tensorboard"
            shutil.rmtree(tb_dir, ignore_errors=True)
            from torch.utils.tensorboard import SummaryWriter  # heavy: only a run that logs

            self._tb = SummaryWriter(str(tb_dir))
            for row in kept:
                self._scalars(row)

    def _scalars(self, row: dict[str, Any]) -> None:
        assert self._tb is not None
        for key, value in row.items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                if key == "step" or not math.isfinite(value):
                    continue
                self._tb.add_scalar(TB_TAGS.get(key, f"misc/{key}"), value, row["step"])

    def write(self, row: dict[str, Any]) -> None:
        if "step" not in row:
            raise ValueError("a metrics row needs a 'step'")
        self._file.write(json.dumps(row, default=_jsonable) + "\n")
        self._file.flush()
        if self._tb is not None:
            self._scalars(row)

    def close(self) -> None:
        self._file.close()
        if self._tb is not None:
            self._tb.close()


def _jsonable(x: object) -> object:
    if hasattr(x, "item"):
        return x.item()  # numpy / torch scalars
    return str(x)


PLOT_PANELS = [
    ("reward_mean", "train reward (mean)"),
    ("heldout_accuracy", "held-out accuracy"),
    ("response_tokens_mean", "response tokens (mean)"),
    ("tool_error_ratio_correct", "tool-error ratio in correct trajectories"),
    ("clip_fraction", "clip fraction"),
    ("entropy", "entropy"),
]


def plot_metrics(
    runs: dict[str, Iterable[dict[str, Any]]],
    out: Path,
    panels: list[tuple[str, str]] | None = None,
) -> Path:
    """Plot each panel's metric against step for one or more runs (label -> rows) into `out`."""
    import matplotlib  # heavy: only when a plot is drawn (reading metrics needs none of it)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    panels = panels or PLOT_PANELS
    cols = 3
    rows_n = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(rows_n, cols, figsize=(4.2 * cols, 3.2 * rows_n), squeeze=False)
    runs = {label: list(rows) for label, rows in runs.items()}
    for ax, (key, title) in zip(axes.flat, panels, strict=False):
        for label, rows in runs.items():
            pts = [(r["step"], r[key]) for r in rows if isinstance(r.get(key), int | float)]
            if pts:
                xs, ys = zip(*pts, strict=True)
                ax.plot(xs, ys, marker="." if len(pts) < 30 else None, label=label)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # no step 1.5
        ax.grid(alpha=0.3)
        if len(runs) > 1:
            ax.legend(fontsize=8)
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    fig.tight_layout()
    out = Path(out)
    fig.savefig(out, dpi=90)
    plt.close(fig)
    return out
