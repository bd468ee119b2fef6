"""RL math as pure functions: advantages, RoC penalties and selection, the policy loss, the
training-inference logprob mismatch."""

from typing import TYPE_CHECKING

from rstar2.lazy_names import lazy_names

if TYPE_CHECKING:  # what type checkers and editors see; at run time `__getattr__` below
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

__getattr__ = lazy_names(
    __name__,
    {
        "Mismatch": "rstar2.rl.mismatch",
        "RLConfig": "rstar2.rl.rl_config",
        "TrainingBatch": "rstar2.rl.resampling",
        "build_training_batch": "rstar2.rl.resampling",
        "format_penalty": "rstar2.rl.penalty",
        "group_advantages": "rstar2.rl.advantages",
        "has_signal": "rstar2.rl.advantages",
        "logprob_mismatch": "rstar2.rl.mismatch",
        "policy_loss": "rstar2.rl.policy_loss",
        "roc_lowest_penalty": "rstar2.rl.resampling",
        "roc_sample": "rstar2.rl.resampling",
        "select_rollouts": "rstar2.rl.resampling",
        "split_counts": "rstar2.rl.resampling",
        "tool_error_penalty": "rstar2.rl.penalty",
        "total_penalty": "rstar2.rl.penalty",
    },
)
