"""Which reward outcomes are infrastructure failures rather than verdicts on the answer.

A verification that timed out (the verifier's alarm or the pool's hard timeout) or failed
(a verifier that died twice, or raised on the input) scores 0, but that 0 is not a judgement
of the answer: the verifier never finished. Such a trajectory is marked
`infra_failure = "reward:<status>"` and RL does not train on it (`rstar2.rl.resampling`).
The cost: a pathological answer that makes math-verify time out (`9^{9^{9^{9}}}`) is lost as
a negative instead of counted as one. Answers the normaliser proves equal never reach a
worker, and a plain wrong answer is decided in milliseconds, so a timeout or an error is far
more often a slow, overloaded or dying verifier than a model's doing; and a mark that drops a
rare true negative costs less than fake zeros that skew a group's advantages.

What it does not do: score (`reward_pool.py`) or decide what trains (`rstar2.rl`).
"""

from __future__ import annotations

INFRA_REWARD_STATUSES = frozenset({"timeout", "error"})
"""Reward statuses whose 0 is not a verdict on the answer (the verification did not finish)."""


def infra_failure_of(reward_status: str, previous: str = "") -> str:
    """The trajectory's infrastructure-failure mark after scoring: the rollout's own mark
    (`previous`) when it has one, else "reward:<status>" for a verification that did not
    finish, else empty."""
    if previous or reward_status not in INFRA_REWARD_STATUSES:
        return previous
    return f"reward:{reward_status}"
