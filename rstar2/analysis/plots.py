"""The PNGs of `rstar2 analyze`: entropy by distance from the last tool response, and the
comparison of two models on the same trajectories.

`plot_entropy_by_distance(reports, window, path)`: one line per model (mean entropy at each
distance, in nats), a dashed line at each model's mean entropy before any tool response, and the
reflection window shaded. `plot_comparison(reports, path)`: bars of the reflection and forking
shares of the high-entropy tokens beside the window's share of all tokens, and of the mean
entropy inside and outside the window, one bar per model.

What it does not do: compute anything (high_entropy.py) or choose file names (the command).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 - the backend must be chosen first

from rstar2.whole_file import replacing  # noqa: E402

Report = dict[str, object]


def plot_entropy_by_distance(
    reports: Sequence[tuple[str, Report]], window: int, path: str | Path
) -> Path:
    """Mean entropy against distance from the last tool response, one line per model."""
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.axvspan(-0.5, window - 0.5, color="tab:orange", alpha=0.12, label=f"window (d < {window})")
    for n, (label, report) in enumerate(reports):
        color = f"C{n}"
        rows = report["entropy_by_distance"]
        ax.plot(
            [r["distance"] for r in rows],  # type: ignore[attr-defined, index]
            [r["mean_entropy"] for r in rows],  # type: ignore[attr-defined, index]
            marker=".", color=color, label=label,
        )  # fmt: skip
        before = report["entropy_before_tool_response"]["mean_entropy"]  # type: ignore[index]
        if before is not None:
            ax.axhline(before, color=color, linestyle="--", linewidth=1,
                       label=f"{label}: before any tool response")  # fmt: skip
    ax.set_xlabel("generated tokens since the last tool response ended")
    ax.set_ylabel("mean entropy (nats)")
    ax.set_title("Policy entropy by distance from the last tool response")
    ax.legend(fontsize=8)
    return _save(fig, path)


def plot_comparison(reports: Sequence[tuple[str, Report]], path: str | Path) -> Path:
    """Shares of reflection/forking tokens and mean entropies, side by side per model."""
    fig, (shares, means) = plt.subplots(1, 2, figsize=(10, 4))
    width = 0.8 / len(reports)
    share_keys = ("reflection_fraction", "forking_fraction", "window_token_fraction")
    mean_keys = ("mean_entropy_in_window", "mean_entropy_outside_window", "mean_entropy")
    for n, (label, report) in enumerate(reports):
        for ax, keys in ((shares, share_keys), (means, mean_keys)):
            values = [report[k] or 0.0 for k in keys]
            ax.bar([i + n * width for i in range(len(keys))], values, width, label=label)
    shares.set_xticks(
        [i + width * (len(reports) - 1) / 2 for i in range(3)],
        ["reflection\n(of high-entropy)", "forking\n(of high-entropy)", "window\n(of all tokens)"],
    )
    shares.set_ylabel("share")
    means.set_xticks(
        [i + width * (len(reports) - 1) / 2 for i in range(3)],
        ["in window", "outside window", "all tokens"],
    )
    means.set_ylabel("mean entropy (nats)")
    shares.legend(fontsize=8)
    fig.suptitle("High-entropy tokens: reflection vs forking, per model")
    return _save(fig, path)


def _save(fig: plt.Figure, path: str | Path) -> Path:
    """Save `fig` as PNG `path`, whole or not at all (`rstar2.whole_file`), and close it."""
    path = Path(path)
    fig.tight_layout()
    try:
        with replacing(path) as tmp:
            fig.savefig(tmp, dpi=110, format="png")
    finally:
        plt.close(fig)
    return path
