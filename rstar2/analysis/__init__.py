"""Analysis of recorded trajectories: the policy's high-entropy tokens (`rstar2 analyze`).

Public API:
- `load_trajectories`, `RecordedTrajectory`: token ids and loss masks from `rstar2 eval`'s
  JSONL or a run's token-carrying rollout trace (trajectory_file.py);
- `teacher_force`, `TokenScores`, `entropy_from_logits`, `length_batches`, `logprob_gap`:
  per-token entropy and logprob under a model (token_entropy.py);
- `token_table`, `analyze`, `compare`, `Settings`, `tool_response_distances`,
  `high_entropy_mask`, `reflection_mask`: reflection vs forking tokens and the aggregates
  (high_entropy.py);
- `plot_entropy_by_distance`, `plot_comparison`: the PNGs (plots.py).

What it does not do: generate trajectories (`rstar2 eval`, the trainer) or load models.
"""

from rstar2.analysis.high_entropy import (
    NO_RESPONSE,
    Settings,
    TokenTable,
    analyze,
    compare,
    high_entropy_mask,
    reflection_mask,
    token_table,
    tool_response_distances,
)
from rstar2.analysis.plots import plot_comparison, plot_entropy_by_distance
from rstar2.analysis.token_entropy import (
    TokenScores,
    entropy_from_logits,
    length_batches,
    logprob_gap,
    teacher_force,
)
from rstar2.analysis.trajectory_file import (
    LoadedTrajectories,
    RecordedTrajectory,
    load_trajectories,
)

__all__ = [
    "NO_RESPONSE",
    "LoadedTrajectories",
    "RecordedTrajectory",
    "Settings",
    "TokenScores",
    "TokenTable",
    "analyze",
    "compare",
    "entropy_from_logits",
    "high_entropy_mask",
    "length_batches",
    "load_trajectories",
    "logprob_gap",
    "plot_comparison",
    "plot_entropy_by_distance",
    "reflection_mask",
    "teacher_force",
    "token_table",
    "tool_response_distances",
]
