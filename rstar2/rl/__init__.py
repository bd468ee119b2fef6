"""RL math as pure functions: advantages, RoC penalties and selection, the policy loss, the
training-inference logprob mismatch."""

from rstar2.rl.advantages import group_advantages, has_signal
from rstar2.rl.mismatch import Mismatch, logprob_mismatch
from rstar2.rl.penalty import format_penalty, tool_error_penalty, total_penalty
from rstar2.rl.policy_loss import policy_loss
from rstar2.rl.resampling import (
    TrainingBatch,
    build_training_batch,
    roc_lowest_penalty,
    roc_sample,
    select_rollouts,
    split_counts,
)
from rstar2.rl.rl_config import RLConfig

__all__ = [
    "Mismatch",
    "RLConfig",
    "TrainingBatch",
    "build_training_batch",
    "format_penalty",
    "group_advantages",
    "has_signal",
    "logprob_mismatch",
    "policy_loss",
    "roc_lowest_penalty",
    "roc_sample",
    "select_rollouts",
    "split_counts",
    "tool_error_penalty",
    "total_penalty",
]
