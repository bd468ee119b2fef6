"""Reward: extract the final boxed answer and verify it against the reference (0/1 reward).

`extract_answer` and the normaliser are cheap and run in the caller; math-verify runs in
worker processes owned by `open_reward_pool` (see `reward_pool`).
"""

from rstar2.reward.extraction import extract_answer
from rstar2.reward.normalizer import answers_match, normalize_answer
from rstar2.reward.reward_config import RewardConfig
from rstar2.reward.reward_pool import RewardPool, RewardPoolError, open_reward_pool
from rstar2.wire import RewardResult

__all__ = [
    "RewardConfig",
    "RewardPool",
    "RewardPoolError",
    "RewardResult",
    "answers_match",
    "extract_answer",
    "normalize_answer",
    "open_reward_pool",
]
