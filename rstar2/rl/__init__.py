"""RL math as pure functions: advantages, RoC penalties and selection, the policy loss, the
training-inference logprob mismatch."""

from rstar2.lazy_names import lazy_names

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
